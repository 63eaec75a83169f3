package setup

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestSetupInputs(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         []string
		err          string
	}{
		{"none", "echo hi\n", nil, ""},
		{"one line", "# codumentor-setup-inputs: go.sum package-lock.json\nnpm ci\n", []string{"go.sum", "package-lock.json"}, ""},
		{"lines add up, indented", "#!/bin/sh\n  # codumentor-setup-inputs: a/b.lock\n# codumentor-setup-inputs: c\n", []string{"a/b.lock", "c"}, ""},
		{"absolute", "# codumentor-setup-inputs: /etc/passwd\n", nil, "clean path"},
		{"parent", "# codumentor-setup-inputs: ../x\n", nil, "clean path"},
		{"unclean", "# codumentor-setup-inputs: a/../../x\n", nil, "clean path"},
		{"too many", "# codumentor-setup-inputs:" + strings.Repeat(" f", maxSetupInputs+1) + "\n", nil, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setupInputs(tc.script)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("setupInputs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// The key changes with the script, its named inputs and the network
// setting, not with other files; a symlinked script is not run, and an
// input that leaves the snapshot is refused.
func TestSetupKey(t *testing.T) {
	snap := t.TempDir()
	write := func(name, s string) {
		os.MkdirAll(filepath.Dir(filepath.Join(snap, name)), 0o755)
		if err := os.WriteFile(filepath.Join(snap, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := func(network bool) string {
		t.Helper()
		spec, err := setupKey(snap, "repo_1", network, nil)
		if err != nil || spec.script == "" {
			t.Fatalf("setupKey: %+v %v", spec, err)
		}
		return spec.digest
	}
	if spec, err := setupKey(snap, "repo_1", false, nil); spec.script != "" || err != nil {
		t.Fatalf("no script: %+v %v", spec, err)
	}
	write("setup.sh", "# codumentor-setup-inputs: go.sum\ngo mod download\n")
	write("go.sum", "v1\n")
	k := key(false)
	write("other.go", "package x\n")
	if key(false) != k {
		t.Fatal("an unnamed file changed the key")
	}
	if key(true) == k {
		t.Fatal("the network setting did not change the key")
	}
	if spec, _ := setupKey(snap, "repo_2", false, nil); spec.digest == k {
		t.Fatal("another repository has the same key")
	}
	write("go.sum", "v2\n")
	if key(false) == k {
		t.Fatal("a named input did not change the key")
	}
	os.Remove(filepath.Join(snap, "go.sum"))
	missing := key(false)
	write(".codumentor/setup.sh", "# codumentor-setup-inputs: go.sum\ngo mod download\n")
	if spec, _ := setupKey(snap, "repo_1", false, nil); spec.script != ".codumentor/setup.sh" {
		t.Fatalf("script %q, want .codumentor/setup.sh first", spec.script)
	}
	os.Remove(filepath.Join(snap, ".codumentor/setup.sh"))
	if key(false) != missing {
		t.Fatal("the key is not stable")
	}
	os.Symlink("/etc/passwd", filepath.Join(snap, "go.sum"))
	if _, err := setupKey(snap, "repo_1", false, nil); err == nil || !strings.Contains(err.Error(), "go.sum") {
		t.Fatalf("an input symlinked out of the snapshot: %v", err)
	}
	os.Remove(filepath.Join(snap, "setup.sh"))
	os.Symlink("other.go", filepath.Join(snap, "setup.sh"))
	if spec, err := setupKey(snap, "repo_1", false, nil); spec.script != "" || err != nil {
		t.Fatalf("a symlinked script: %+v %v", spec, err)
	}
}

func TestSetupOutputs(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         []string
		err          string
	}{
		{"none", "echo hi\n", nil, ""},
		{"lines add up", "# codumentor-setup-outputs: node_modules .venv\n# codumentor-setup-outputs: vendor/bundle\n", []string{"node_modules", ".venv", "vendor/bundle"}, ""},
		{"the whole tree", "# codumentor-setup-outputs: .\n", nil, "inside the repository"},
		{"git", "# codumentor-setup-outputs: .git/hooks\n", nil, "outside .git"},
		{"parent", "# codumentor-setup-outputs: ../x\n", nil, "clean path"},
		{"nested", "# codumentor-setup-outputs: vendor vendor/bundle\n", nil, "overlap"},
		{"twice", "# codumentor-setup-outputs: a\n# codumentor-setup-outputs: a\n", nil, "overlap"},
		{"too many", "# codumentor-setup-outputs:" + strings.Repeat(" f", maxSetupOutputs+1) + "\n", nil, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setupOutputs(tc.script)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("setupOutputs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// An output must be a path the snapshot does not have, below only
// directories of it: a layer stacked over it then hides none of its files.
func TestSetupOutputsAbsent(t *testing.T) {
	snap := t.TempDir()
	os.MkdirAll(filepath.Join(snap, "vendor"), 0o755)
	os.WriteFile(filepath.Join(snap, "README.md"), []byte("hi\n"), 0o644)
	os.WriteFile(filepath.Join(snap, "vendor", "keep.txt"), []byte("hi\n"), 0o644)
	os.Symlink("vendor", filepath.Join(snap, "link"))
	root, err := os.OpenRoot(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, tc := range []struct{ output, err string }{
		{"node_modules", ""},
		{"vendor/bundle", ""},
		{"a/b/c", ""},
		{"README.md", "is in the repository"},
		{"vendor", "is in the repository"},
		{"vendor/keep.txt", "is in the repository"},
		{"README.md/x", "README.md is not a directory"},
		{"link/bundle", "link is not a directory"},
		{"link", "is in the repository"},
	} {
		err := outputsAbsent(root, []string{tc.output})
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("output %s: %v, want %q", tc.output, err, tc.err)
		}
	}
}

// keepOutputs keeps the declared outputs of an upper layer and nothing
// else: not the files the script changed or made elsewhere, nor its
// whiteouts; inside the outputs, no device nodes, fifos or overlay
// xattrs, and no symlink is followed.
func TestKeepOutputs(t *testing.T) {
	dir := t.TempDir()
	upper, layer, outside := filepath.Join(dir, "upper"), filepath.Join(dir, "layer"), filepath.Join(dir, "outside")
	for _, d := range []string{upper, layer, outside, upper + "/node_modules/a", upper + "/node_modules/sub", upper + "/node_modules/locked", upper + "/vendor/bundle", upper + "/real"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mknod := func(name string, mode uint32) {
		t.Helper()
		if err := unix.Mknod(filepath.Join(dir, name), mode|0o600, 0); err != nil {
			t.Fatal(err)
		}
	}
	write("upper/Makefile", "all:\n\tevil\n")
	write("upper/app.txt", "poisoned\n")
	mknod("upper/README.md", unix.S_IFCHR) // a whiteout
	write("upper/node_modules/a/index.js", "ok\n")
	write("upper/node_modules/locked/x", "ok\n")
	write("upper/vendor/bundle/gem", "ok\n")
	write("upper/real/out", "ok\n")
	write("outside/secret", "s\n")
	os.Symlink("../a/index.js", filepath.Join(upper, "node_modules", "tool"))
	os.Symlink(outside, filepath.Join(upper, "node_modules", "escape"))
	os.Symlink(outside, filepath.Join(upper, ".venv"))
	os.Symlink("real", filepath.Join(upper, "via")) // via/out: not kept through the symlink
	mknod("upper/node_modules/wh", unix.S_IFCHR)
	mknod("upper/node_modules/sub/fifo", unix.S_IFIFO)
	mknod("upper/dist", unix.S_IFCHR) // an output that is a whiteout
	if err := unix.Setxattr(filepath.Join(upper, "node_modules", "sub"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatalf("setting an overlay xattr: %v", err)
	}
	os.MkdirAll(filepath.Join(upper, "node_modules", "ro"), 0o755)
	mknod("upper/node_modules/ro/fifo", unix.S_IFIFO)
	write("upper/node_modules/ro/f", "ok\n")
	for name, mode := range map[string]os.FileMode{"node_modules/locked": 0, "node_modules/ro": 0o555, "vendor": 0o555, "node_modules": 0o555, ".": 0o555} {
		os.Chmod(filepath.Join(upper, name), mode)
	}

	if err := keepOutputs(upper, layer, []string{"node_modules", ".venv", "vendor/bundle", "via/out", "dist", "missing/x"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	root, _ := os.OpenRoot(layer)
	defer root.Close()
	fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if p != "." {
			got = append(got, p+" "+d.Type().String())
		}
		return nil
	})
	want := []string{
		".venv L---------",
		"node_modules d---------",
		"node_modules/a d---------",
		"node_modules/a/index.js ----------",
		"node_modules/escape L---------",
		"node_modules/locked d---------",
		"node_modules/locked/x ----------",
		"node_modules/ro d---------",
		"node_modules/ro/f ----------",
		"node_modules/sub d---------",
		"node_modules/tool L---------",
		"vendor d---------",
		"vendor/bundle d---------",
		"vendor/bundle/gem ----------",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the layer holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n, err := unix.Getxattr(filepath.Join(layer, "node_modules", "sub"), "user.overlay.opaque", make([]byte, 4)); err == nil {
		t.Fatalf("the opaque xattr was kept (%d bytes)", n)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("the tree a symlink pointed to changed: %v", ents)
	}
	if target, _ := os.Readlink(filepath.Join(layer, ".venv")); target != outside {
		t.Fatalf(".venv -> %q", target)
	}
}

// The setup slots: a user holds a second slot only while no other user
// waits; a user who arrives then gets the slot of the first user's latest
// setup, which gives it back (preempted) and waits again.
func TestSetupSlots(t *testing.T) {
	ctx := context.Background()
	s := newSetupSlots(2)
	a1, release1, err := s.acquire(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	a2, release2, err := s.acquire(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 3)
	go func() {
		_, release, err := s.acquire(ctx, "bob")
		if err != nil {
			got <- err.Error()
			return
		}
		got <- "bob"
		release()
	}()
	select {
	case <-a2.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("alice's second setup kept its slot while bob waits")
	}
	if context.Cause(a2) != errSetupPreempted || a1.Err() != nil {
		t.Fatalf("after bob arrived: alice's first %v, second %v", context.Cause(a1), context.Cause(a2))
	}
	select {
	case g := <-got:
		t.Fatalf("%s before alice's preempted setup released its slot", g)
	default:
	}
	release2()
	if g := <-got; g != "bob" {
		t.Fatal(g)
	}
	// A waiting acquire gives up with its context.
	s.acquire(ctx, "carol")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { _, _, err := s.acquire(cctx, "dave"); done <- err }()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("an acquire whose context ended got a slot")
	}
	release1()
	if _, _, err := s.acquire(ctx, "erin"); err != nil {
		t.Fatal(err)
	}
}
