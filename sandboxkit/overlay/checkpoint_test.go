package overlay

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// treeHash describes every entry of root exactly: type, mode, content
// hash, symlink target, device number and user.overlay.* attributes.
func treeHash(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(rel string)
	walk = func(rel string) {
		dir := filepath.Join(root, rel)
		if m := mustMode(t, dir); m&0o500 != 0o500 {
			if err := os.Chmod(dir, 0o700|m); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(dir, m)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			p := filepath.Join(rel, e.Name())
			full := filepath.Join(root, p)
			var st unix.Stat_t
			if err := unix.Lstat(full, &st); err != nil {
				t.Fatal(err)
			}
			desc := fmt.Sprintf("type %o mode %o", st.Mode&unix.S_IFMT, st.Mode&0o7777)
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				desc += fmt.Sprintf(" size %d mtime %d", st.Size, st.Mtim.Nano())
				if st.Mode&0o400 == 0 {
					break // unreadable: chmod would change its ctime, so its identity
				}
				data, err := os.ReadFile(full)
				if err != nil {
					t.Fatal(err)
				}
				desc += fmt.Sprintf(" sha256 %x", sha256.Sum256(data))
			case unix.S_IFLNK:
				target, err := os.Readlink(full)
				if err != nil {
					t.Fatal(err)
				}
				desc = "link " + target
			case unix.S_IFCHR:
				desc += fmt.Sprintf(" rdev %d", st.Rdev)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFLNK {
				for _, a := range []string{"user.overlay.opaque", "user.overlay.origin"} {
					buf := make([]byte, 64)
					if n, err := unix.Lgetxattr(full, a, buf); err == nil {
						desc += fmt.Sprintf(" %s=%q", a, buf[:n])
					}
				}
			}
			out[p] = desc
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				walk(p)
			}
		}
	}
	walk("")
	return out
}

func mustMode(t *testing.T, p string) fs.FileMode {
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func diffHashes(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, fmt.Sprintf("%s: %q, want %q", k, b[k], v))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s: %q, want none", k, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func blobCount(t *testing.T, l *Layer) int {
	ents, err := os.ReadDir(filepath.Join(l.Dir, cpDir, cpBlobs))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// A checkpoint restores the exact tree: every file's content, mode and
// mtime, symlinks, whiteouts, opaque directories, fifos and unreadable
// entries; a later change copies only what changed.
func TestCheckpointRestoresExactTree(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("conv")
	if err != nil {
		t.Fatal(err)
	}
	up := l.Upper
	t.Cleanup(func() { RemoveAll(l.Dir) })
	build(t, up, []node{
		file("a.txt", "alpha\n"), exe("bin/run.sh", "#!/bin/sh\n"), modeFile("secret", "s\n", 0o600),
		link("out", "../../../etc/passwd"), link("abs", "/etc"), whiteout("gone.txt"), opaqueDir("fresh"),
		file("fresh/only", "o\n"), file("deep/a/b/c.txt", "c\n"), whiteout("deep/a/old"),
	})
	if err := os.Chmod(filepath.Join(up, "gone.txt"), 0); err != nil { // as overlayfs makes whiteouts
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(up, "pipe"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(up, "deep/a/b"), 0o500); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(up, "secret"), 0); err != nil {
		t.Fatal(err)
	}
	before := treeHash(t, up)
	if changed, err := l.Checkpoint("t1", CheckpointLimits{}); err != nil || !changed {
		t.Fatalf("Checkpoint t1: changed %v, %v", changed, err)
	}
	if got := treeHash(t, up); diffHashes(before, got) != "" {
		t.Fatalf("Checkpoint changed the tree:\n%s", diffHashes(before, got))
	}
	firstBlobs := blobCount(t, l)
	if firstBlobs != 5 {
		t.Errorf("first checkpoint made %d copies, want 5 (one per regular file)", firstBlobs)
	}
	if changed, err := l.Checkpoint("t1b", CheckpointLimits{}); err != nil || changed {
		t.Fatalf("Checkpoint of an unchanged tree: changed %v, %v", changed, err)
	}

	// A turn's changes: in place, deletions, replacements, new whiteouts.
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(up, "a.txt"), os.O_WRONLY|os.O_APPEND, 0)
	must(err)
	_, err = f.WriteString("more\n")
	must(err)
	must(f.Close())
	must(os.Remove(filepath.Join(up, "gone.txt")))
	must(os.Remove(filepath.Join(up, "out")))
	must(os.Symlink("elsewhere", filepath.Join(up, "out")))
	must(os.Chmod(filepath.Join(up, "deep/a/b"), 0o700))
	must(os.RemoveAll(filepath.Join(up, "deep")))
	must(os.Symlink(outside, filepath.Join(up, "deep"))) // restoring deep/ must not write through it
	must(unix.Removexattr(filepath.Join(up, "fresh"), "user.overlay.opaque"))
	must(os.WriteFile(filepath.Join(up, "new.txt"), []byte("new\n"), 0o644))
	must(unix.Mknod(filepath.Join(up, "bin/removed"), unix.S_IFCHR|0o600, 0))
	must(os.Chmod(filepath.Join(up, "bin/run.sh"), 0o644))
	after := treeHash(t, up)
	if changed, err := l.Checkpoint("t2", CheckpointLimits{}); err != nil || !changed {
		t.Fatalf("Checkpoint t2: changed %v, %v", changed, err)
	}
	// a.txt, new.txt and the chmodded run.sh are copied; the rest is reused.
	if n := blobCount(t, l) - firstBlobs; n != 3 {
		t.Errorf("second checkpoint made %d copies, want 3", n)
	}

	must(l.Restore("t1"))
	if d := diffHashes(before, treeHash(t, up)); d != "" {
		t.Fatalf("Restore t1 differs:\n%s", d)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("Restore wrote through a symlink: %v", ents)
	}
	must(l.Restore("t2"))
	if d := diffHashes(after, treeHash(t, up)); d != "" {
		t.Fatalf("Restore t2 differs:\n%s", d)
	}
	must(l.Restore("t1b"))
	if d := diffHashes(before, treeHash(t, up)); d != "" {
		t.Fatalf("Restore t1b differs:\n%s", d)
	}
	// The restored tree is the head: checkpointing it copies nothing.
	n := blobCount(t, l)
	if changed, err := l.Checkpoint("t3", CheckpointLimits{}); err != nil || changed {
		t.Fatalf("Checkpoint after Restore: changed %v, %v", changed, err)
	}
	if blobCount(t, l) != n {
		t.Errorf("Checkpoint after Restore copied %d files", blobCount(t, l)-n)
	}

	// Fork: another layer gets the same tree.
	dst, err := s.Create("fork")
	must(err)
	must(l.Fork("t2", dst))
	if d := diffHashes(after, treeHash(t, dst.Upper)); d != "" {
		t.Fatalf("Fork t2 differs:\n%s", d)
	}

	// The unreadable file's content is back too.
	must(l.Restore("t1"))
	must(os.Chmod(filepath.Join(up, "secret"), 0o600))
	if data, err := os.ReadFile(filepath.Join(up, "secret")); err != nil || string(data) != "s\n" {
		t.Errorf("restored unreadable file: %q, %v", data, err)
	}

	// Remove drops the checkpoints with the layer.
	must(s.Remove("conv"))
	if _, err := os.Lstat(l.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("layer dir after Remove: %v", err)
	}
}

// Past the limits the oldest checkpoints go, with their copies.
func TestCheckpointLimits(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("conv")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(l.Upper, "f"), []byte(strings.Repeat("x", 1000*(i+1))), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Checkpoint(fmt.Sprintf("t%d", i), CheckpointLimits{MaxCount: 2}); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []bool{false, false, true, true} {
		err := l.Restore(fmt.Sprintf("t%d", i))
		if got := err == nil; got != want {
			t.Errorf("Restore t%d: %v, want kept %v", i, err, want)
		}
		if !want && !errors.Is(err, ErrNoCheckpoint) {
			t.Errorf("Restore t%d: %v, want ErrNoCheckpoint", i, err)
		}
	}
	if n := blobCount(t, l); n != 2 {
		t.Errorf("%d copies kept, want 2", n)
	}
	// The bytes bound: 2500 bytes keep only the newest 2000-byte state.
	if err := os.WriteFile(filepath.Join(l.Upper, "f"), []byte(strings.Repeat("y", 2000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Checkpoint("t4", CheckpointLimits{MaxBytes: 2500}); err != nil {
		t.Fatal(err)
	}
	names, err := l.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name != "t4" {
		t.Errorf("kept %+v, want only t4", names)
	}
	if n := blobCount(t, l); n != 1 {
		t.Errorf("%d copies kept, want 1", n)
	}
}

func TestCheckpointNames(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("conv")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "../x", "a/b", ".hidden"} {
		if _, err := l.Checkpoint(name, CheckpointLimits{}); err == nil {
			t.Errorf("Checkpoint(%q) accepted", name)
		}
	}
	if err := l.Restore("never"); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("Restore of an unknown checkpoint: %v, want ErrNoCheckpoint", err)
	}
}

// A checkpoint of a layer that nothing changed since its last one, as a
// turn's "<turn>.after" and the next turn's "<turn>", rewrites neither the
// index nor a state, and stays restorable by its name, within the limits
// and after the older name of its state is dropped.
func TestCheckpointUnchanged(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("conv")
	if err != nil {
		t.Fatal(err)
	}
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(l.Upper, "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func(name string, wantChanged bool) {
		t.Helper()
		changed, err := l.Checkpoint(name, CheckpointLimits{MaxCount: 2})
		if err != nil || changed != wantChanged {
			t.Fatalf("Checkpoint(%q): changed %v, %v; want changed %v", name, changed, err, wantChanged)
		}
	}
	stamp := func() string {
		t.Helper()
		var out []string
		for _, p := range []string{cpIndex, cpStates} {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(l.Dir, cpDir, p), &st); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(st.Ino, st.Size, st.Mtim, st.Ctim))
		}
		return strings.Join(out, " ")
	}
	restore := func(name, want string) {
		t.Helper()
		if err := l.Restore(name); err != nil {
			t.Fatalf("Restore(%q): %v", name, err)
		}
		if got, err := os.ReadFile(filepath.Join(l.Upper, "f")); err != nil || string(got) != want {
			t.Fatalf("after Restore(%q): %q, %v; want %q", name, got, err, want)
		}
	}

	// A new layer's first checkpoint names the empty state.
	checkpoint("t0", false)
	write("one")
	if err := l.Restore("t0"); err != nil {
		t.Fatalf("Restore of the empty state: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.Upper, "f")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after Restore of the empty state: %v, want no file", err)
	}
	write("one")
	checkpoint("t1", true)
	before := stamp()
	checkpoint("t1.after", false)
	checkpoint("t2", false)
	if after := stamp(); after != before {
		t.Errorf("an unchanged checkpoint rewrote the index or a state:\n%s\nthen\n%s", before, after)
	}
	names, err := l.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 4 || names[2].Name != "t1.after" || !names[2].Same || names[3].Name != "t2" || !names[3].Same || names[1].Same {
		t.Errorf("checkpoints %+v, want t1, then t1.after and t2 marked Same", names)
	}
	write("two")
	restore("t2", "one")

	// t1 names another state now; t1.after and t2 still name the old one.
	write("three")
	checkpoint("t1", true)
	restore("t1.after", "one")
	restore("t1", "three")

	// Past MaxCount (2 states) the oldest state goes with every name of it.
	write("four")
	checkpoint("t3", true)
	checkpoint("t3.after", false)
	for _, name := range []string{"t1.after", "t2"} {
		if err := l.Restore(name); !errors.Is(err, ErrNoCheckpoint) {
			t.Errorf("Restore(%q) of a dropped state: %v, want ErrNoCheckpoint", name, err)
		}
	}
	restore("t3.after", "four")
	restore("t1", "three")
	if n := blobCount(t, l); n != 2 {
		t.Errorf("%d copies kept, want 2", n)
	}

	// Many unchanged checkpoints: the journal is folded into the index
	// past its bound, and every name stays.
	for i := range maxJournal + 10 {
		checkpoint(fmt.Sprintf("u%d", i), false)
	}
	names, err = l.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 4+maxJournal+10 {
		t.Errorf("%d checkpoints kept, want %d", len(names), 4+maxJournal+10)
	}
	write("five")
	restore("u0", "three")
	restore(fmt.Sprintf("u%d", maxJournal+9), "three")
}

// The decoded index kept between calls is not used once the files say
// otherwise: another process may have written them.
func TestCheckpointIndexWrittenElsewhere(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("conv")
	if err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(l.Dir, cpDir, cpIndex)
	if err := os.WriteFile(filepath.Join(l.Upper, "f"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Checkpoint("t1", CheckpointLimits{}); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.Upper, "f"), []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Checkpoint("t2", CheckpointLimits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Checkpoint("t2.after", CheckpointLimits{}); err != nil {
		t.Fatal(err)
	}
	// Another writer puts back the index as it was after t1.
	if err := os.WriteFile(index, old, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"t2", "t2.after"} {
		if err := l.Restore(name); !errors.Is(err, ErrNoCheckpoint) {
			t.Errorf("Restore(%q) after the index was written back: %v, want ErrNoCheckpoint", name, err)
		}
	}
	if err := l.Restore("t1"); err != nil {
		t.Fatal(err)
	}
}

// A journal line cut short by a crash is ignored, and the next
// checkpoint's name is not appended to it.
func TestCheckpointJournalCut(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("conv")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"t1", "t1.after"} {
		if _, err := l.Checkpoint(name, CheckpointLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := l.cps().readIndex()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(l.cps().journalPath(idx.Gen), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("t2\t0\t17"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, name := range []string{"t3", "t3.after"} {
		if _, err := l.Checkpoint(name, CheckpointLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	// As another process would read them.
	cpCache.Lock()
	cpCache.m, cpCache.order = nil, nil
	cpCache.Unlock()
	names, err := l.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range names {
		got = append(got, n.Name)
	}
	if strings.Join(got, " ") != "t1 t1.after t3 t3.after" {
		t.Errorf("checkpoints %q, want t1 t1.after t3 t3.after", got)
	}
}
