package ctl_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

// A PostgreSQL deployment's backup (a dump of the database, the node's
// files) restores into an empty database and an empty directory, and
// refuses a database that is not empty.
func TestBackupPostgres(t *testing.T) {
	dir, conv := migrateInstance(t)
	live := storetest.Postgres(t)
	if r := ctl(t, "migrate", "--instance", dir, "--to", live.DSN); r.code != 0 {
		t.Fatalf("migrate: %v", r)
	}
	cfg := fmt.Sprintf("auth:\n  jwt_secret: %s\nstore:\n  backend: postgres\n  postgres:\n    dsn: %q\n", migrateSecret, live.DSN)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	writeIndex(t, dir)
	upper := filepath.Join(dir, "workspaces", "layers", "conv_x", "upper")
	if err := os.MkdirAll(upper, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(upper, "file.txt"), []byte("content\n"), 0o600)
	file := filepath.Join(t.TempDir(), "pg.cbk")
	if r := (run{args: []string{"backup", "--instance", dir, "--out", file, "--passphrase-stdin"}, stdin: "pass phrase\n"}).do(t); r.code != 0 {
		t.Fatalf("backup: %v", r)
	}

	dst := filepath.Join(t.TempDir(), "restored")
	restore := func(to ...string) result {
		t.Helper()
		return run{args: append([]string{"restore", "--instance", dst, "--in", file, "--passphrase-stdin"}, to...), stdin: "pass phrase\n"}.do(t)
	}
	if r := restore(); r.code != 2 || !strings.Contains(r.stderr, "give --to DSN") {
		t.Errorf("restore without --to: %v", r)
	}
	if r := restore("--to", live.DSN); r.code != 1 || !strings.Contains(r.stderr, "not empty") || !strings.Contains(r.stderr, "nothing was written") {
		t.Errorf("restore into the live database: %v", r)
	}
	if names := listDir(t, dst); names != nil {
		t.Fatalf("a refused restore wrote %v", names)
	}
	fresh := storetest.Postgres(t)
	r := restore("--to", fresh.DSN)
	if r.code != 0 || !strings.Contains(r.stdout, "chain intact") || !strings.Contains(r.stdout, "set it to") {
		t.Fatalf("restore: %v", r)
	}
	t.Logf("restore:\n%s", r.stdout)

	// The database as it was backed up (the backup's own record
	// included), the node's files, no dump left behind.
	ldb := storetest.OpenConfig(t, live)
	db := storetest.OpenConfig(t, fresh)
	want, got := counts(t, ldb), counts(t, db)
	if len(got) != len(want) {
		t.Errorf("tables restored: %v; backed up: %v", got, want)
	}
	for tb, n := range want {
		if got[tb] != n {
			t.Errorf("table %s: %d rows restored, %d backed up", tb, got[tb], n)
		}
	}
	if err := audit.UseKeys(db, audit.NewKeys(migrateSecret, nil)); err != nil {
		t.Fatal(err)
	}
	if n, err := audit.Verify(t.Context(), db); err != nil || n != want["audit_log"] {
		t.Fatalf("restored audit log: %d, %v", n, err)
	}
	lh, _ := audit.LastHead(t.Context(), ldb)
	if h, err := audit.LastHead(t.Context(), db); err != nil || h != lh {
		t.Fatalf("restored audit head %v, %v; live %v", h, err, lh)
	}
	users, err := auth.NewUsers(db)
	if err != nil {
		t.Fatal(err)
	}
	u, err := users.ByName(t.Context(), "alice")
	if err != nil || auth.CheckPassword(u.PasswordHash, "alice password") != nil {
		t.Fatalf("alice restored: %+v, %v", u, err)
	}
	sec, err := secrets.New(db, secrets.NewKeyring(migrateSecret, nil))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := sec.Value(t.Context(), u.ID, "TOKEN"); err != nil || v != "migrated-canary" {
		t.Fatalf("secret TOKEN restored: %q, %v", v, err)
	}
	convs, err := store.NewConversations(db)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := convs.AppendEvent(t.Context(), agentcore.Event{Conversation: conv.ID, Type: "test", Data: []byte(`{}`)}); err != nil || e.Seq != 4 {
		t.Fatalf("an event after the restore: %+v, %v", e, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "workspaces", "layers", "conv_x", "upper", "file.txt")); err != nil || string(b) != "content\n" {
		t.Errorf("workspace file restored: %q, %v", b, err)
	}
	data := listDir(t, filepath.Join(dst, "data"))
	if slices.Contains(data, "database.jsonl") || slices.Contains(data, "codumentor.db") || !slices.Contains(data, "index-0.db") {
		t.Errorf("restored data/: %v; want the index files and the node's name alone", data)
	}
	// The node's name, under which its conversations are at home.
	node, err := os.ReadFile(filepath.Join(dir, "data", "node_id"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "data", "node_id")); err != nil || string(got) != string(node) {
		t.Errorf("restored node_id %q, %v; want %q", got, err, node)
	}
}
