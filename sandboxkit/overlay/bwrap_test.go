package overlay

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runOverlay runs script in bwrap with lower and the layer mounted as
// /workspace, the way the server mounts a conversation's workspace, and
// returns its stdout.
func runOverlay(t *testing.T, bwrap, lower string, l *Layer, script string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bwrap,
		"--unshare-all", "--unshare-user", "--die-with-parent",
		"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--overlay-src", lower, "--overlay", l.Upper, l.Work, "/workspace",
		"--chdir", "/workspace",
		"sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin", "LC_ALL=C"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bwrap: %v\n%s", err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// tarTree is readTree for a tar stream.
func tarTree(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := make(map[string]string)
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch h.Typeflag {
		case tar.TypeSymlink:
			out[name] = "link " + h.Linkname
		case tar.TypeReg:
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			kind := "file "
			if h.Mode&0o100 != 0 {
				kind = "exec "
			}
			out[name] = kind + string(body)
		}
	}
}

// The test that matters: a real overlay mount by bwrap in an unprivileged
// user namespace, changed by ordinary tools; Diff must name the changes,
// and the patch applied to lower by git must give the merged view that
// the sandbox sees.
func TestRealOverlay(t *testing.T) {
	bwrap := requireBwrap(t)
	requireTool(t, "git")
	lower := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	build(t, lower, []node{
		file("mod.txt", "one\ntwo\nthree\n"),
		file("touched.txt", "same\n"),
		file("chmodback.sh", "x\n"),
		file("run.sh", "echo hi\n"),
		file("del.txt", "bye\n"),
		file("gone/a", "a\n"), file("gone/sub/b", "b\n"),
		file("redo/old1", "1\n"), file("redo/old2", "2\n"),
		file("src/keep.go", "package src\n"), file("src/edit.go", "package src\n"),
		file("img.bin", "\x00\x01img"),
		link("oldlink", "mod.txt"),
		file("nonl", "a\nb"),
		file("emptied.txt", "full\n"),
		file("move_me.txt", "m\n"),
		file("mvdir/f", "f\n"),
	})
	if err := CheckOwners(lower, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(t.TempDir(), "workspaces"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Create("conv")
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(l.Upper)
	if err != nil {
		t.Fatal(err)
	}
	runOverlay(t, bwrap, lower, l, `set -e
sed -i s/two/TWO/ mod.txt
touch touched.txt
chmod +x chmodback.sh; chmod -x chmodback.sh
chmod +x run.sh
rm del.txt
rm -rf gone
rm -rf redo; mkdir redo; echo fresh > redo/fresh
echo '// more' >> src/edit.go
echo new > added.txt
mkdir -p newdir/deep; echo x > newdir/deep/x
ln -s mod.txt link
printf '\000\001\002binary\377' > data.bin
printf X >> img.bin
echo sp > 'with space.txt'
ln -sfn run.sh oldlink
printf 'a\nc' > nonl
: > emptied.txt
mv move_me.txt moved.txt
mv mvdir mvdir2
`)
	if err := unlock(); err != nil {
		t.Fatal(err)
	}

	// The layer must hold what this test is about: real whiteouts, a real
	// opaque directory and copied-up but unchanged files.
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(l.Upper, "del.txt"), &st); err != nil || !isWhiteout(&st) {
		t.Errorf("upper/del.txt is not a whiteout: %v, mode %#o", err, st.Mode)
	}
	var buf [4]byte
	if n, err := unix.Getxattr(filepath.Join(l.Upper, "redo"), "user.overlay.opaque", buf[:]); err != nil || string(buf[:n]) != "y" {
		t.Errorf("upper/redo is not opaque: %v", err)
	}
	for _, p := range []string{"touched.txt", "chmodback.sh"} {
		if _, err := os.Lstat(filepath.Join(l.Upper, p)); err != nil {
			t.Errorf("upper/%s was not copied up: %v", p, err)
		}
	}

	changes, err := Diff(lower, l.Upper)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{
		added("added.txt"), added("data.bin"), deleted("del.txt"), modified("emptied.txt"),
		deletedDir("gone"), deleted("gone/a"), deletedDir("gone/sub"), deleted("gone/sub/b"),
		modified("img.bin"), added("link"), modified("mod.txt"), deleted("move_me.txt"), added("moved.txt"),
		deletedDir("mvdir"), deleted("mvdir/f"), addedDir("mvdir2"), added("mvdir2/f"),
		addedDir("newdir"), addedDir("newdir/deep"), added("newdir/deep/x"),
		modified("nonl"), modified("oldlink"),
		added("redo/fresh"), deleted("redo/old1"), deleted("redo/old2"),
		modified("run.sh"), modified("src/edit.go"), added("with space.txt"),
	}
	if !slices.Equal(changes, want) {
		t.Errorf("Diff:\n got %v\nwant %v", changes, want)
	}

	var patch bytes.Buffer
	if err := WritePatch(&patch, lower, l.Upper); err != nil {
		t.Fatal(err)
	}
	applied := filepath.Join(t.TempDir(), "applied")
	copyTree(t, lower, applied)
	gitApply(t, applied, patch.Bytes())

	merged := tarTree(t, runOverlay(t, bwrap, lower, l, "tar -C /workspace -cf - ."))
	if merged["data.bin"] != "file \x00\x01\x02binary\xff" || merged["run.sh"] != "exec echo hi\n" {
		t.Fatalf("the sandbox's view is not what its script made: data.bin %q, run.sh %q", merged["data.bin"], merged["run.sh"])
	}
	if d := diffTrees(readTree(t, applied), merged); d != "" {
		t.Errorf("lower + patch differs from the sandbox's merged view:\n%s\npatch:\n%s", d, patch.String())
	}

	// The kernel made work/work with mode 000; Remove must cope.
	if err := s.Remove("conv"); err != nil {
		t.Fatal(err)
	}
}

// chmod 000 /workspace in the sandbox sets the upper directory's mode: the
// next Lock, the next sandbox, Remove and GC must all still work, and GC
// must go on past a layer it cannot remove.
func TestChmod000Workspace(t *testing.T) {
	bwrap := requireBwrap(t)
	lower := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	build(t, lower, []node{file("a.txt", "hello\n")})
	s := openStore(t)
	run := func(l *Layer, script string) []byte {
		t.Helper()
		unlock, err := Lock(l.Upper)
		if err != nil {
			t.Fatalf("Lock after chmod 000 /workspace: %v", err)
		}
		defer unlock()
		return runOverlay(t, bwrap, lower, l, script)
	}
	l, err := s.Create("conv")
	if err != nil {
		t.Fatal(err)
	}
	run(l, "echo new > new.txt && chmod 000 /workspace")
	if out := run(l, "cat a.txt new.txt"); string(out) != "hello\nnew\n" {
		t.Errorf("the next sandbox reads %q", out)
	}
	run(l, "chmod 000 /workspace")
	// The patch reads it too, with no sandbox started since.
	var patch bytes.Buffer
	if err := WritePatch(&patch, lower, l.Upper); err != nil || !strings.Contains(patch.String(), "+new") {
		t.Errorf("patch after chmod 000 /workspace: %v\n%s", err, patch.String())
	}
	if err := s.Remove("conv"); err != nil {
		t.Errorf("Remove: %v", err)
	}

	// GC: "a-bad" cannot even be looked at; "b-old" had its workspace
	// made unreadable. GC removes b-old and reports a-bad.
	now := time.Now()
	bad, err := s.Create("a-bad")
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Create("b-old")
	if err != nil {
		t.Fatal(err)
	}
	run(old, "chmod 000 /workspace")
	for _, l := range []*Layer{bad, old} {
		if err := l.Touch(now.Add(-2 * DefaultTTL)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(bad.Dir, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(bad.Dir, 0o700)
	ids, err := s.GC(context.Background(), DefaultTTL, now, false)
	if !slices.Equal(ids, []string{"b-old"}) || err == nil || !strings.Contains(err.Error(), `"a-bad"`) {
		t.Errorf("GC: removed %v, error %v; want b-old removed and a-bad reported", ids, err)
	}
	if _, err := s.Get("b-old"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("b-old after GC: %v", err)
	}
}

// mountedLayer returns a new layer of s changed by script in a real
// sandbox over lower.
func mountedLayer(t *testing.T, s *Store, lower, id, script string) *Layer {
	t.Helper()
	l, err := s.Create(id)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(l.Upper)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	runOverlay(t, requireBwrap(t), lower, l, script)
	return l
}

// A sparse file costs the sandbox no disk but a patch would read (hash,
// deflate) every byte of it: past the byte budget the patch is refused
// at once, with a clear error. A file or directory the sandbox made
// unreadable is marked in the patch instead of failing it.
func TestPatchSparseAndUnreadable(t *testing.T) {
	requireBwrap(t)
	lower := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	build(t, lower, []node{file("a.txt", "a\n"), file("bye.txt", "bye\n")})
	s := openStore(t)

	sparse := mountedLayer(t, s, lower, "sparse", "truncate -s 1G big && echo b >> a.txt")
	var patch bytes.Buffer
	err := WritePatch(&patch, lower, sparse.Upper)
	if !errors.Is(err, ErrPatchTooLarge) || !strings.Contains(err.Error(), "big") || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("patch with a 1 GiB sparse file: %v; want ErrPatchTooLarge naming big as sparse", err)
	}
	if patch.Len() != 0 {
		t.Errorf("a refused patch wrote %d bytes", patch.Len())
	}

	locked := mountedLayer(t, s, lower, "locked", `set -e
echo secret > locked; chmod 000 locked
mkdir hid; echo h > hid/x; chmod 000 hid
echo ok > fine; rm bye.txt`)
	t.Cleanup(func() { s.Remove("locked") })
	patch.Reset()
	if err := WritePatch(&patch, lower, locked.Upper); err != nil {
		t.Fatalf("patch with unreadable entries: %v", err)
	}
	got := patch.String()
	for _, want := range []string{"unreadable", "#   locked\n", "#   hid/\n", "diff --git a/fine b/fine", "diff --git a/bye.txt b/bye.txt"} {
		if !strings.Contains(got, want) {
			t.Errorf("patch lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "secret") || strings.Contains(got, locked.Upper) {
		t.Errorf("patch shows the unreadable content or a host path:\n%s", got)
	}
	work := filepath.Join(t.TempDir(), "work")
	copyTree(t, lower, work)
	gitApply(t, work, patch.Bytes())
	if d := diffTrees(readTree(t, work), treeOf(file("a.txt", "a\n"), file("fine", "ok\n"))); d != "" {
		t.Errorf("lower + patch:\n%s", d)
	}
}

// A repository made in the workspace never enters the patch (git apply
// refuses .git paths, and patch -p1 would write .git/config, whose
// core.fsmonitor runs a command at the user's next git command); the
// paths are listed as not exportable. Symlinks that point outside the
// tree are flagged.
func TestPatchGitAndOutsideLinks(t *testing.T) {
	requireBwrap(t)
	requireTool(t, "git")
	lower := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	build(t, lower, []node{file("a.txt", "a\n")})
	s := openStore(t)
	l := mountedLayer(t, s, lower, "git", `set -e
git init -q . && git config core.fsmonitor 'touch /tmp/pwned'
mkdir -p sub/.GIT && echo x > sub/.GIT/config && echo y > .Git
echo ok > ok.txt
ln -s /etc/passwd abs; ln -s ../../outside up; ln -s ok.txt inside; mkdir d; ln -s ../ok.txt d/fine`)
	var patch bytes.Buffer
	if err := WritePatch(&patch, lower, l.Upper); err != nil {
		t.Fatal(err)
	}
	got := patch.String()
	for _, want := range []string{"not exportable", "#   .git/\n#   sub/.GIT/\n", "#   .Git\n", "outside the workspace", "#   abs -> /etc/passwd\n", "#   up -> ../../outside\n", "diff --git a/ok.txt b/ok.txt", "diff --git a/inside b/inside"} {
		if !strings.Contains(got, want) {
			t.Errorf("patch lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"a/.git/", "a/.Git", "a/sub/.GIT", "fsmonitor", "#   inside", "#   d/fine"} {
		if strings.Contains(got, bad) {
			t.Errorf("patch holds %q:\n%s", bad, got)
		}
	}
	work := filepath.Join(t.TempDir(), "work")
	copyTree(t, lower, work)
	gitApply(t, work, patch.Bytes())
	if _, err := os.Lstat(filepath.Join(work, ".git")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("applying the patch made .git: %v", err)
	}
}
