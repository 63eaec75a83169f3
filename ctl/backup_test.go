package ctl_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/integrations/retrieval"
)

// backupInstance is an instance with a user, a layer whose upper holds
// a symlink out of the tree, a code index (indexFiles), and a backup of
// it under a passphrase.
func backupInstance(t *testing.T) (dir, file string) {
	t.Helper()
	dir = newInstance(t)
	if r := ctl(t, "users", "add", "--instance", dir, "--password", "alice password", "alice"); r.code != 0 {
		t.Fatal(r)
	}
	upper := filepath.Join(dir, "workspaces", "layers", "conv_x", "upper")
	if err := os.MkdirAll(upper, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/etc/hostname", filepath.Join(upper, "escape"))
	os.WriteFile(filepath.Join(upper, "file.txt"), []byte("content\n"), 0o640)
	writeIndex(t, dir)
	file = filepath.Join(t.TempDir(), "b.cbk")
	if r := (run{args: []string{"backup", "--instance", dir, "--out", file, "--passphrase-stdin"}, stdin: "pass phrase\n"}).do(t); r.code != 0 {
		t.Fatalf("backup: %v", r)
	}
	return dir, file
}

// indexFiles are files in the code index of backupInstance, over both
// of its shards.
var indexFiles = []string{"a.go", "b.go", "c.go", "d.go", "e.go"}

// writeIndex writes the code index of the instance dir as the server
// does (retrieval.Shards files in its data directory), with a chunk
// of each of indexFiles.
func writeIndex(t *testing.T, dir string) {
	t.Helper()
	be, dbs := openIndex(t, dir)
	var chunks []retrieval.Chunk
	for _, p := range indexFiles {
		chunks = append(chunks, retrieval.Chunk{Path: p, Commit: "c1", StartLine: 1, EndLine: 1, Language: "go", Text: "func backedUp() {}"})
	}
	if err := be.Replace(t.Context(), "repo", indexFiles, chunks); err != nil {
		t.Fatal(err)
	}
	for _, db := range dbs {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// openIndex opens the code index of the instance dir.
func openIndex(t *testing.T, dir string) (*retrieval.SQLite, []*sql.DB) {
	t.Helper()
	var dbs []*sql.DB
	for i := range retrieval.Shards {
		db, err := retrieval.OpenShard(t.Context(), filepath.Join(dir, "data", retrieval.ShardFile(i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	be, err := retrieval.NewSQLite(t.Context(), dbs...)
	if err != nil {
		t.Fatal(err)
	}
	return be, dbs
}

func TestBackupRestoreFiles(t *testing.T) {
	_, file := backupInstance(t)
	dst := filepath.Join(t.TempDir(), "restored")
	r := run{args: []string{"restore", "--instance", dst, "--in", file, "--passphrase-stdin"}, stdin: "pass phrase\n"}.do(t)
	if r.code != 0 || !strings.Contains(r.stdout, "audit log: 2 records, chain intact") {
		t.Fatalf("restore: %v", r)
	}
	upper := filepath.Join(dst, "workspaces", "layers", "conv_x", "upper")
	if target, err := os.Readlink(filepath.Join(upper, "escape")); err != nil || target != "/etc/hostname" {
		t.Errorf("symlink restored as %q, %v; want the link itself", target, err)
	}
	if fi, err := os.Stat(filepath.Join(upper, "file.txt")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("file.txt: %v, %v", fi, err)
	}
	if err := (config.Instance{Dir: dst}).CheckModes(); err != nil {
		t.Errorf("restored instance: %v", err)
	}
	if r := ctl(t, "users", "list", "--instance", dst); !strings.Contains(r.stdout, "alice") {
		t.Errorf("users after restore: %v", r)
	}
	// The code index, every shard of it, 0600 like the server makes it.
	for i := range retrieval.Shards {
		p := filepath.Join(dst, "data", retrieval.ShardFile(i))
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("restored %s: %v, %v; want mode 0600", p, fi, err)
		}
	}
	be, _ := openIndex(t, dst)
	rs, err := be.Search(t.Context(), retrieval.Query{Text: "backedUp", Repositories: []string{"repo"}, Limit: 10})
	var got []string
	for _, r := range rs {
		got = append(got, r.Path)
	}
	if slices.Sort(got); err != nil || !slices.Equal(got, indexFiles) {
		t.Errorf("search in the restored index: %v, %v; want %v", got, err, indexFiles)
	}
}

// A damaged, truncated or extended backup does not restore.
func TestRestoreRefusesDamage(t *testing.T) {
	_, file := backupInstance(t)
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	header := strings.IndexByte(string(good), '\n') + 1
	for _, c := range []struct {
		name string
		data []byte
		says string
	}{
		{"flipped", func() []byte { b := append([]byte(nil), good...); b[len(b)-20] ^= 1; return b }(), "does not open with this key"},
		{"truncated", good[:len(good)-100], "truncated"},
		{"appended", append(append([]byte(nil), good...), 0, 0, 0, 1, 0), "after its last chunk"},
		{"header edited", []byte(strings.Replace(string(good[:header]), `"memory_kib":65536`, `"memory_kib":65537`, 1) + string(good[header:])), "does not open"},
		{"not a backup", []byte("hello\n"), "not a codumentor backup"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "bad.cbk")
			os.WriteFile(f, c.data, 0o600)
			r := run{args: []string{"restore", "--instance", filepath.Join(t.TempDir(), "x"), "--in", f, "--passphrase-stdin"}, stdin: "pass phrase\n"}.do(t)
			if r.code != 1 || !strings.Contains(r.stderr, c.says) {
				t.Fatalf("restore of a %s backup: %v; want exit 1 saying %q", c.name, r, c.says)
			}
		})
	}
}

// A sandbox can take its owner's access away from what it writes (chmod
// 000 in /workspace): the backup still reads it, leaves the modes as it
// found them, and the restore brings back the content and the modes.
func TestBackupUnreadableEntries(t *testing.T) {
	dir := newInstance(t)
	if r := ctl(t, "users", "add", "--instance", dir, "--password", "alice password", "alice"); r.code != 0 {
		t.Fatal(r)
	}
	upper := filepath.Join(dir, "workspaces", "layers", "conv_x", "upper")
	if err := os.MkdirAll(filepath.Join(upper, "closed"), 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"locked.txt": "locked\n", "closed/inner.txt": "inner\n"}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(upper, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	modes := map[string]os.FileMode{"locked.txt": 0, "closed/inner.txt": 0o200, "closed": 0o100}
	openUp := func(root string) {
		for _, name := range []string{"closed", "closed/inner.txt", "locked.txt"} {
			os.Chmod(filepath.Join(root, name), 0o700)
		}
	}
	t.Cleanup(func() { openUp(upper) })
	for _, name := range []string{"locked.txt", "closed/inner.txt", "closed"} {
		if err := os.Chmod(filepath.Join(upper, name), modes[name]); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "b.cbk")
	if r := (run{args: []string{"backup", "--instance", dir, "--out", file, "--passphrase-stdin"}, stdin: "pass phrase\n"}).do(t); r.code != 0 {
		t.Fatalf("backup: %v", r)
	}
	for name, want := range modes {
		if fi, err := os.Lstat(filepath.Join(upper, name)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("after the backup, %s: %v, %v; want mode %v as before", name, fi, err, want)
		}
	}

	dst := filepath.Join(t.TempDir(), "restored")
	rupper := filepath.Join(dst, "workspaces", "layers", "conv_x", "upper")
	t.Cleanup(func() { openUp(rupper) })
	if r := (run{args: []string{"restore", "--instance", dst, "--in", file, "--passphrase-stdin"}, stdin: "pass phrase\n"}).do(t); r.code != 0 {
		t.Fatalf("restore: %v", r)
	}
	for name, want := range modes {
		if fi, err := os.Lstat(filepath.Join(rupper, name)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("restored %s: %v, %v; want mode %v", name, fi, err, want)
		}
	}
	openUp(rupper)
	for name, data := range files {
		if b, err := os.ReadFile(filepath.Join(rupper, name)); err != nil || string(b) != data {
			t.Errorf("restored %s: %q, %v; want %q", name, b, err, data)
		}
	}
}
