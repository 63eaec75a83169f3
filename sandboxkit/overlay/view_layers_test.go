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

// TestViewLayers checks the merged view over layers built by hand: an
// upper directory over a lower symlink hides the link (overlayfs does),
// so nothing is read through it on the host.
func TestViewLayers(t *testing.T) {
	dir := t.TempDir()
	lower, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "upper")
	v := overlay.NewView(upper, lower)
	outside := filepath.Join(dir, "outside")
	for _, d := range []string{lower + "/d", lower + "/o", upper + "/a", upper + "/d", upper + "/o", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{lower + "/d/f.txt", lower + "/o/hidden.txt", upper + "/a/x.txt", upper + "/d/g.txt", upper + "/o/n.txt", outside + "/secret.txt"} {
		if err := os.WriteFile(f, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{lower + "/a": outside, lower + "/s": "d", lower + "/up": "../outside"} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	opaque := syscall.Setxattr(upper+"/o", "user.overlay.opaque", []byte("y"), 0) == nil

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
	if got := names("a"); !slices.Equal(got, []string{"x.txt"}) {
		t.Errorf("a lists %v: the lower symlink to outside must stay hidden", got)
	}
	if _, err := v.Lstat("a/secret.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a/secret.txt: %v, want not found", err)
	}
	if got := names("d"); !slices.Equal(got, []string{"f.txt", "g.txt"}) {
		t.Errorf("d lists %v", got)
	}
	if got := names("."); !slices.Equal(got, []string{"a", "d", "o", "s", "up"}) {
		t.Errorf("root lists %v", got)
	}
	if opaque {
		if got := names("o"); !slices.Equal(got, []string{"n.txt"}) {
			t.Errorf("opaque o lists %v", got)
		}
	} else {
		t.Log("no user xattrs here: opaque case not checked (the sandbox tests cover it)")
	}
	tests := []struct {
		in, want string
		outside  bool
	}{
		{"s/f.txt", "d/f.txt", false},
		{"s", "d", false},
		{"a/x.txt", "a/x.txt", false},
		{"up/secret.txt", "", true},
		{"missing/deeper/x", "missing/deeper/x", false},
	}
	for _, tt := range tests {
		got, err := v.Resolve(tt.in, true)
		if tt.outside != errors.Is(err, overlay.ErrOutsideView) || !tt.outside && (err != nil || got != tt.want) {
			t.Errorf("resolve(%q) = %q, %v; want %q (outside %v)", tt.in, got, err, tt.want, tt.outside)
		}
	}
	if got, err := v.Resolve("s", false); err != nil || got != "s" {
		t.Errorf("resolve(s, not following) = %q, %v", got, err)
	}
}
