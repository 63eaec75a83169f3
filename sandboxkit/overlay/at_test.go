package overlay_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// TestOpenAt checks the descriptor helpers on every kind of entry a
// sandbox may leave where a directory or a file was seen: what they open,
// what they refuse, and that no error names the host directory.
func TestOpenAt(t *testing.T) {
	host := t.TempDir()
	writeTree(t, host, map[string]string{"f.txt": "content", "d/x": "x"})
	for _, l := range []struct{ name, target string }{{"ld", "d"}, {"lf", "f.txt"}, {"out", "/etc"}} {
		if err := os.Symlink(l.target, filepath.Join(host, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(host, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(host)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()

	const changed = "changed while it was read (the sandbox is changing it); try again"
	tests := []struct {
		name    string
		openDir bool   // OpenDirAt, else OpenFileAt
		want    string // the content read, or the error's text
	}{
		{"d", true, ""},
		{"ld", true, "sub/ld " + changed},
		{"f.txt", true, "sub/f.txt " + changed},
		{"missing", true, "sub/missing " + changed},
		{"fifo", true, "sub/fifo " + changed},
		{"f.txt", false, "content"},
		{"d", false, "sub/d " + changed},
		{"fifo", false, "sub/fifo " + changed}, // and does not block
		{"lf", false, "sub/lf: " + syscall.ELOOP.Error()},
		{"missing", false, "sub/missing: " + syscall.ENOENT.Error()},
	}
	for _, tt := range tests {
		rel := "sub/" + tt.name
		var f *os.File
		if tt.openDir {
			f, err = overlay.OpenDirAt(dir, tt.name, rel)
		} else {
			f, err = overlay.OpenFileAt(dir, tt.name, rel)
		}
		if err != nil {
			if err.Error() != tt.want {
				t.Errorf("open %s (dir %v): %q, want %q", tt.name, tt.openDir, err, tt.want)
			}
			if strings.Contains(err.Error(), host) {
				t.Errorf("open %s: %q names the host path", tt.name, err)
			}
			continue
		}
		if f.Name() != rel {
			t.Errorf("open %s: Name %q, want %q", tt.name, f.Name(), rel)
		}
		got := ""
		if !tt.openDir {
			b, err := io.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			got = string(b)
		} else if fi, err := f.Stat(); err != nil || !fi.IsDir() {
			t.Errorf("open %s: not a directory (%v)", tt.name, err)
		}
		f.Close()
		if got != tt.want {
			t.Errorf("open %s (dir %v): %q, want %q", tt.name, tt.openDir, got, tt.want)
		}
	}

	for name, want := range map[string]string{"ld": "d", "out": "/etc"} {
		if got, err := overlay.ReadLinkAt(dir, name); err != nil || got != want {
			t.Errorf("ReadLinkAt(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := overlay.ReadLinkAt(dir, "f.txt"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("ReadLinkAt(f.txt): %v, want EINVAL", err)
	}
}

// TestViewError checks that the wording keeps the view path and the bare
// error and drops the host path of a *fs.PathError or *os.LinkError.
func TestViewError(t *testing.T) {
	host := t.TempDir()
	_, openErr := os.Open(filepath.Join(host, "nope"))
	linkErr := os.Link(filepath.Join(host, "a"), filepath.Join(host, "b"))
	tests := []struct {
		rel  string
		err  error
		want string
		is   error
	}{
		{"a/nope", openErr, "a/nope: " + syscall.ENOENT.Error(), fs.ErrNotExist},
		{"", linkErr, ".: " + syscall.ENOENT.Error(), syscall.ENOENT},
		{"x", syscall.EACCES, "x: " + syscall.EACCES.Error(), fs.ErrPermission},
	}
	for _, tt := range tests {
		err := overlay.ViewError(tt.rel, tt.err)
		if err.Error() != tt.want || !errors.Is(err, tt.is) || strings.Contains(err.Error(), host) {
			t.Errorf("ViewError(%q, %v) = %q (is %v: %v), want %q", tt.rel, tt.err, err, tt.is, errors.Is(err, tt.is), tt.want)
		}
	}
}
