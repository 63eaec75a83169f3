package overlay_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// writeTree makes the files of tree (path: content) below dir.
func writeTree(t *testing.T, dir string, tree map[string]string) {
	t.Helper()
	for p, data := range tree {
		f := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestViewFS runs io/fs's conformance checks on a merged view of two
// layers with a whiteout and a symlink inside the view.
func TestViewFS(t *testing.T) {
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "upper")
	writeTree(t, lower, map[string]string{"a.txt": "lower a", "gone.txt": "x", "d/l.txt": "lower l"})
	writeTree(t, upper, map[string]string{"a.txt": "upper a", "d/u.txt": "upper u", "n/new.txt": "new"})
	if err := syscall.Mknod(upper+"/gone.txt", syscall.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d/l.txt", upper+"/link"); err != nil {
		t.Fatal(err)
	}
	v := overlay.NewView(upper, lower)
	if err := fstest.TestFS(v, "a.txt", "d/l.txt", "d/u.txt", "n/new.txt", "link"); err != nil {
		t.Fatal(err)
	}
	if b, err := fs.ReadFile(v, "a.txt"); err != nil || string(b) != "upper a" {
		t.Errorf("a.txt = %q, %v; want upper's", b, err)
	}
	if b, err := fs.ReadFile(v, "link"); err != nil || string(b) != "lower l" {
		t.Errorf("link = %q, %v; want the lower file it points to", b, err)
	}
	if _, err := v.Stat("gone.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone.txt (whited out): %v, want not found", err)
	}
	if target, err := v.ReadLink("link"); err != nil || target != "d/l.txt" {
		t.Errorf("ReadLink(link) = %q, %v", target, err)
	}
	v.MaxReadFile = 3
	if _, err := v.ReadFile("a.txt"); err == nil || !strings.Contains(err.Error(), "read limit") {
		t.Errorf("ReadFile over MaxReadFile: %v, want the read limit refused", err)
	}
}

// TestViewSwappedSymlink races every View read against a process that
// keeps exchanging a directory of the upper layer with a symlink to a
// host directory (renameat2 RENAME_EXCHANGE, as a sandbox can): a read
// re-resolved by host path after its check would show the host entries.
// Not one host name or byte may come back.
func TestViewSwappedSymlink(t *testing.T) {
	dir := t.TempDir()
	lower, upper, host := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "host")
	writeTree(t, lower, map[string]string{"keep.txt": "k"})
	writeTree(t, host, map[string]string{"HOSTLEAK.txt": "HOSTLEAK", "sub/HOSTLEAK-deep.txt": "HOSTLEAK"})
	writeTree(t, upper, map[string]string{"sw/inside.txt": "inside", "sw/sub/deep.txt": "inside"})
	if err := os.Symlink(host, upper+"/swl"); err != nil {
		t.Fatal(err)
	}
	v := overlay.NewView(upper, lower)
	defer sandboxtest.Exchange(t, upper+"/sw", upper+"/swl")()
	leak := func(what, s string) {
		// A symlink's target is the sandbox's own text, and may be shown;
		// the layers' host paths may not.
		if strings.Contains(s, "HOSTLEAK") || strings.Contains(s, upper) || strings.Contains(s, lower) {
			t.Fatalf("%s shows the host: %q", what, s)
		}
	}
	seen := 0
	for i := range 3000 {
		switch i % 4 {
		case 0:
			ents, err := v.ReadDir("sw")
			if err != nil {
				leak("ReadDir error", err.Error())
			}
			for _, e := range ents {
				leak("ReadDir", e.Name())
				if e.Name() == "inside.txt" {
					seen++
				}
			}
		case 1:
			err := v.Walk(".", 100, func(name string, _ fs.FileInfo) bool {
				leak("Walk", name)
				return true
			})
			if err != nil {
				leak("Walk error", err.Error())
			}
		case 2:
			b, err := v.ReadFile("sw/sub/deep.txt")
			if err != nil {
				leak("ReadFile error", err.Error())
			}
			leak("ReadFile", string(b))
		case 3:
			fi, err := v.Stat("sw/HOSTLEAK.txt")
			if err == nil {
				t.Fatalf("Stat(sw/HOSTLEAK.txt) found the host file: %v", fi.Name())
			}
			if strings.Contains(err.Error(), upper) {
				t.Fatalf("Stat error shows the host: %v", err)
			}
		}
	}
	if seen == 0 {
		t.Error("no listing showed sw/inside.txt: the race was not exercised")
	}
}
