package overlay

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "workspaces"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpenCreatesPrivateBase(t *testing.T) {
	base := filepath.Join(t.TempDir(), "a", "workspaces")
	if _, err := Open(base); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(base)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("base mode %#o, want 0700", perm)
	}
}

func TestOpenRefusesSharedBase(t *testing.T) {
	base := t.TempDir()
	if err := os.Chmod(base, 0o750); err != nil {
		t.Fatal(err)
	}
	_, err := Open(base)
	if err == nil || !strings.Contains(err.Error(), "chmod 700 "+base) {
		t.Fatalf("Open of a 0750 base: got %v, want an error naming the fix chmod 700 %s", err, base)
	}
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(base); err != nil {
		t.Errorf("Open after chmod 700: %v", err)
	}
}

func TestLayerIDs(t *testing.T) {
	s := openStore(t)
	for _, id := range []string{"", ".", "..", ".hidden", "a/b", "../x", "a b", "x\x00", "é", strings.Repeat("a", 129)} {
		if _, err := s.Create(id); err == nil || !strings.Contains(err.Error(), "invalid layer id") {
			t.Errorf("Create(%q): got %v, want an invalid id error", id, err)
		}
		if _, err := s.Get(id); err == nil {
			t.Errorf("Get(%q) succeeded", id)
		}
		if err := s.Remove(id); err == nil {
			t.Errorf("Remove(%q) succeeded", id)
		}
	}
	for _, id := range []string{"a", "conv-01_2.x", "A.b-", strings.Repeat("z", 128)} {
		if _, err := s.Create(id); err != nil {
			t.Errorf("Create(%q): %v", id, err)
		}
	}
}

func TestCreateGetLayersRemove(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("conv1")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{l.Dir, l.Upper, l.Work} {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want a 0700 directory", d, fi, err)
		}
	}
	if filepath.Dir(l.Upper) != l.Dir || filepath.Dir(l.Dir) != s.base {
		t.Errorf("layer paths %+v not under %s", l, s.base)
	}
	if _, err := s.Create("conv1"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Create: got %v, want fs.ErrExist", err)
	}
	if _, err := s.Create("conv2"); err != nil {
		t.Fatal(err)
	}
	// Not layers: a file and a hidden directory in the base.
	os.WriteFile(filepath.Join(s.base, "note"), nil, 0o600)
	os.Mkdir(filepath.Join(s.base, ".tmp"), 0o700)
	layers, err := s.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range layers {
		ids = append(ids, l.ID)
	}
	if want := []string{"conv1", "conv2"}; !slices.Equal(ids, want) {
		t.Errorf("Layers: %v, want %v", ids, want)
	}
	got, err := s.Get("conv1")
	if err != nil || *got != *l {
		t.Errorf("Get: %+v, %v; want %+v", got, err, l)
	}
	if err := s.Remove("conv1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("conv1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Get after Remove: got %v, want fs.ErrNotExist", err)
	}
	if err := s.Remove("conv1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("second Remove: got %v, want fs.ErrNotExist", err)
	}
}

// overlayfs leaves work/work with mode 000, and a sandbox may leave
// directories it made unreadable; Remove must still remove everything.
func TestRemoveUnreadableDirs(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("c")
	if err != nil {
		t.Fatal(err)
	}
	build(t, l.Upper, []node{file("locked/deep/f", "x\n"), link("locked/l", "/etc/passwd")})
	for _, d := range []string{filepath.Join(l.Work, "work"), filepath.Join(l.Upper, "locked", "deep"), filepath.Join(l.Upper, "locked")} {
		os.MkdirAll(d, 0o700)
		if err := os.Chmod(d, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Remove("c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(l.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("layer dir still there after Remove: %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("/etc/passwd: %v", err)
	}
}

func TestGetIncompleteLayer(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("c")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(l.Work)
	if _, err := s.Get("c"); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("Get of a layer without work: got %v, want an incomplete-layer error", err)
	}
}

func TestLock(t *testing.T) {
	s := openStore(t)
	l, err := s.Create("c")
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(l.Upper)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(l.Upper)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), l.Upper) {
		t.Errorf("second Lock: got %v, want ErrInUse naming %s", err, l.Upper)
	}
	if err := s.Remove("c"); !errors.Is(err, ErrInUse) {
		t.Errorf("Remove of a locked layer: got %v, want ErrInUse", err)
	}
	if _, err := os.Stat(l.Upper); err != nil {
		t.Errorf("locked layer damaged by refused Remove: %v", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	if err := unlock(); err != nil {
		t.Errorf("second unlock: %v", err)
	}
	unlock2, err := Lock(l.Upper)
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	unlock2()
	if err := s.Remove("c"); err != nil {
		t.Errorf("Remove after unlock: %v", err)
	}
	if _, err := Lock(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lock of a missing dir: got %v, want fs.ErrNotExist", err)
	}
}

func TestTouchLastUse(t *testing.T) {
	s := openStore(t)
	before := time.Now().Add(-time.Second)
	l, err := s.Create("c")
	if err != nil {
		t.Fatal(err)
	}
	last, err := l.LastUse()
	if err != nil || last.Before(before) {
		t.Errorf("LastUse after Create: %v, %v; want about now", last, err)
	}
	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := l.Touch(when); err != nil {
		t.Fatal(err)
	}
	if last, err := l.LastUse(); err != nil || !last.Equal(when) {
		t.Errorf("LastUse after Touch(%v): %v, %v", when, last, err)
	}
}

func TestGC(t *testing.T) {
	s := openStore(t)
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	ages := map[string]time.Duration{
		"old-a":  40 * 24 * time.Hour,
		"old-b":  31 * 24 * time.Hour,
		"recent": 29 * 24 * time.Hour,
		"locked": 90 * 24 * time.Hour,
	}
	for id, age := range ages {
		l, err := s.Create(id)
		if err != nil {
			t.Fatal(err)
		}
		build(t, l.Upper, []node{file("f", "x\n")})
		if err := l.Touch(now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	locked, _ := s.Get("locked")
	unlock, err := Lock(locked.Upper)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()

	ids, err := s.GC(context.Background(), DefaultTTL, now, true)
	if want := []string{"old-a", "old-b"}; err != nil || !slices.Equal(ids, want) {
		t.Errorf("dry-run GC: %v, %v; want %v", ids, err, want)
	}
	if layers, _ := s.Layers(); len(layers) != 4 {
		t.Errorf("dry-run GC left %d layers, want all 4", len(layers))
	}

	ids, err = s.GC(context.Background(), DefaultTTL, now, false)
	if want := []string{"old-a", "old-b"}; err != nil || !slices.Equal(ids, want) {
		t.Errorf("GC: %v, %v; want %v", ids, err, want)
	}
	var left []string
	layers, _ := s.Layers()
	for _, l := range layers {
		left = append(left, l.ID)
	}
	if want := []string{"locked", "recent"}; !slices.Equal(left, want) {
		t.Errorf("after GC: %v, want %v", left, want)
	}

	unlock()
	ids, err = s.GC(context.Background(), DefaultTTL, now, false)
	if want := []string{"locked"}; err != nil || !slices.Equal(ids, want) {
		t.Errorf("GC after unlock: %v, %v; want %v", ids, err, want)
	}

	if _, err := s.GC(context.Background(), 0, now, true); err == nil {
		t.Error("GC with TTL 0 should be refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.GC(ctx, time.Hour, now.Add(365*24*time.Hour), false); !errors.Is(err, context.Canceled) {
		t.Errorf("GC with a cancelled context: %v, want context.Canceled", err)
	}
	if layers, _ := s.Layers(); len(layers) != 1 {
		t.Errorf("GC with a cancelled context removed layers: %d left, want 1", len(layers))
	}
}

// The lock holds against other processes (flock(1) here), and a child
// process, such as bwrap, does not inherit it: once unlocked, it is free
// although the child still runs.
func TestLockAcrossProcesses(t *testing.T) {
	flock := requireTool(t, "flock")
	upper := t.TempDir()
	tryLock := func() error { return exec.Command(flock, "--nonblock", upper+".lock", "true").Run() }
	unlock, err := Lock(upper)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "5")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	if err := tryLock(); err == nil {
		t.Error("another process took the lock while it was held")
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	if err := tryLock(); err != nil {
		t.Errorf("another process could not take the lock after unlock, with the child still running: %v", err)
	}
}
