package overlay_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// TestViewStacked checks a view of three layers (an isolated subagent's:
// its upper, its parent's upper, the project) against overlayfs's rules:
// the highest layer wins, a whiteout or a file in a middle layer hides
// what is below it, an opaque middle directory hides the lower one, and
// lower directories merge through.
func TestViewStacked(t *testing.T) {
	dir := t.TempDir()
	lower, mid, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "mid"), filepath.Join(dir, "upper")
	v := overlay.NewView(upper, mid, lower)
	files := map[string]string{
		lower + "/f.txt": "lower", lower + "/gone.txt": "lower", lower + "/d/l.txt": "lower",
		lower + "/o/hidden.txt": "lower", lower + "/x/in.txt": "lower",
		mid + "/f.txt": "mid", mid + "/d/m.txt": "mid", mid + "/o/shown.txt": "mid", mid + "/x": "mid file over a lower dir",
		upper + "/d/u.txt": "upper", upper + "/new.txt": "upper",
	}
	for f, data := range files {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mknod(mid+"/gone.txt", syscall.S_IFCHR, 0); err != nil {
		t.Fatalf("making a whiteout: %v", err)
	}
	if err := syscall.Setxattr(mid+"/o", "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatalf("marking an opaque directory: %v", err)
	}
	read := func(rel string) string {
		b, err := v.ReadFile(rel)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
	names := func(rel string) []string {
		ents, err := v.ReadDir(rel)
		if err != nil {
			t.Fatalf("readDir(%q): %v", rel, err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	if got := read("f.txt"); got != "mid" {
		t.Errorf("f.txt = %q, want the middle layer's", got)
	}
	if got := read("new.txt"); got != "upper" {
		t.Errorf("new.txt = %q", got)
	}
	if _, err := v.Lstat("gone.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone.txt (whited out in the middle): %v", err)
	}
	if got := names("d"); !slices.Equal(got, []string{"l.txt", "m.txt", "u.txt"}) {
		t.Errorf("d lists %v: all three layers merge", got)
	}
	if got := names("o"); !slices.Equal(got, []string{"shown.txt"}) {
		t.Errorf("o lists %v: the opaque middle directory hides the lower one", got)
	}
	if _, err := v.Lstat("o/hidden.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("o/hidden.txt: %v", err)
	}
	if got := read("x"); got != "mid file over a lower dir" {
		t.Errorf("x = %q", got)
	}
	if _, err := v.Lstat("x/in.txt"); err == nil {
		t.Error("x/in.txt: a middle file must hide the lower directory")
	}
	if got := names("."); !slices.Equal(got, []string{"d", "f.txt", "new.txt", "o", "x"}) {
		t.Errorf("root lists %v", got)
	}
}
