package overlay

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// node is one entry of a tree built for a test. Parents are made as needed.
type node struct {
	path string
	kind byte // 'f' file, 'l' symlink, 'd' dir, 'o' opaque dir, 'w' whiteout
	data string
	mode fs.FileMode // for files; 0 means 0644
}

func file(p, data string) node { return node{path: p, kind: 'f', data: data} }
func exe(p, data string) node  { return node{path: p, kind: 'f', data: data, mode: 0o755} }
func modeFile(p, data string, m fs.FileMode) node {
	return node{path: p, kind: 'f', data: data, mode: m}
}
func link(p, target string) node { return node{path: p, kind: 'l', data: target} }
func dir(p string) node          { return node{path: p, kind: 'd'} }
func opaqueDir(p string) node    { return node{path: p, kind: 'o'} }
func whiteout(p string) node     { return node{path: p, kind: 'w'} }

// build makes the nodes under root. Whiteouts are real 0/0 character
// devices: since Linux 5.8 an unprivileged user may create them.
func build(t *testing.T, root string, nodes []node) {
	t.Helper()
	for _, n := range nodes {
		p := filepath.Join(root, n.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch n.kind {
		case 'f':
			mode := n.mode
			if mode == 0 {
				mode = 0o644
			}
			if err = os.WriteFile(p, []byte(n.data), mode); err == nil {
				err = os.Chmod(p, mode) // past the umask
			}
		case 'l':
			err = os.Symlink(n.data, p)
		case 'd':
			err = os.MkdirAll(p, 0o755)
		case 'o':
			if err = os.MkdirAll(p, 0o755); err == nil {
				err = unix.Setxattr(p, "user.overlay.opaque", []byte("y"), 0)
			}
		case 'w':
			err = unix.Mknod(p, unix.S_IFCHR|0o600, 0)
		default:
			t.Fatalf("unknown node kind %q", n.kind)
		}
		if err != nil {
			t.Fatalf("build %s: %v", n.path, err)
		}
	}
}

// readTree describes what git can see of a tree: each file as its exec bit
// and content, each symlink as its target. Directories are left out, as
// git has none.
func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[rel] = "link " + target
			return err
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			data, err := os.ReadFile(p)
			kind := "file "
			if fi.Mode()&0o100 != 0 {
				kind = "exec "
			}
			out[rel] = kind + string(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// treeOf is readTree's view of the nodes, for stating expected trees.
func treeOf(nodes ...node) map[string]string {
	out := make(map[string]string)
	for _, n := range nodes {
		switch {
		case n.kind == 'l':
			out[n.path] = "link " + n.data
		case n.kind == 'f' && n.mode&0o100 != 0:
			out[n.path] = "exec " + n.data
		case n.kind == 'f':
			out[n.path] = "file " + n.data
		}
	}
	return out
}

// copyTree copies files, symlinks, directories and modes from src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		q := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(q, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, q)
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(q, data, fi.Mode().Perm()); err != nil {
				return err
			}
			return os.Chmod(q, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// gitApply applies patch to dir with git, outside any repository.
func gitApply(t *testing.T, dir string, patch []byte) {
	t.Helper()
	requireTool(t, "git")
	pf := filepath.Join(t.TempDir(), "change.patch")
	if err := os.WriteFile(pf, patch, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "apply", "--whitespace=nowarn", pf)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v\n%s\npatch:\n%s", err, out, patch)
	}
}

// diffTrees lists how two readTree results differ, for failure messages.
func diffTrees(got, want map[string]string) string {
	var lines []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			lines = append(lines, "missing "+p)
		} else if g != w {
			lines = append(lines, "differs "+p+": got "+quoteShort(g)+", want "+quoteShort(w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			lines = append(lines, "extra "+p)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func quoteShort(s string) string {
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return strings.ReplaceAll(s, "\n", `\n`)
}

// skipOrFail skips the test, or fails it in CI (CI=true), where a missing
// prerequisite must not pass unnoticed.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		sandboxtest.SkipOrFail(t, "%s not found in PATH; install it (scripts/install-prereqs) to run this test", name)
	}
	return p
}

// requireBwrap returns bwrap's path if this test can mount a real overlay
// with it: bwrap is installed and the test runs as an unprivileged user,
// which is how the server runs it. Otherwise it skips, or fails in CI.
func requireBwrap(t *testing.T) string {
	t.Helper()
	sandboxtest.RequireUnprivileged(t)
	return requireTool(t, "bwrap")
}
