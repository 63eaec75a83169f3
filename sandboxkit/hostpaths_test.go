package sandboxkit

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// procScript prints what a command can read of every process it sees:
// each one's command line and environment, then the mount table.
const procScript = `for d in /proc/[0-9]*; do
  echo "== $d"; tr '\0' ' ' < $d/cmdline 2>/dev/null; echo; tr '\0' ' ' < $d/environ 2>/dev/null; echo
done
echo "== mountinfo"; cat /proc/self/mountinfo`

// hostPathPolicy is a workspace policy whose every host directory (lower,
// a layer, upper, work, a read-only bind) lies under one temp dir, and
// a read-only overlay of one layer, and an egress proxy. It returns the
// host paths no process may show, and those the mount table may not
// show: all but the read-only bind's (the kernel shows a bind's source
// by its path within its filesystem; overlay layers only as
// /proc/self/fd/N).
func hostPathPolicy(t *testing.T) (p *Policy, procs, mounts []string) {
	t.Helper()
	w := testWorkspace(t)
	base := filepath.Dir(w.Lower)
	layer, ro, view := filepath.Join(base, "layer"), filepath.Join(base, "ro"), filepath.Join(base, "view")
	for _, d := range []string{layer, ro, view} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	w.Layers = []string{layer}
	p = workspacePolicy(t, w)
	p.ReadOnly = append(p.ReadOnly, Bind{Src: ro, Dst: "/opt/ro"})
	p.ReadOnlyOverlays = []ReadOnlyOverlay{{Layers: []string{view}, Dst: "/base"}}
	p.Egress = &egress.Options{}
	// The egress socket's directory is sandboxkit-egress-* in a tmpfs
	// (socketBase), else in the temp dir (scripts/test sets TMPDIR, which
	// leaves only XDG_RUNTIME_DIR: a tmpfs here).
	t.Setenv("XDG_RUNTIME_DIR", "/dev/shm")
	socketDirs := []string{filepath.Join(os.TempDir(), "sandboxkit-egress-"), "/dev/shm/", "/run/user/"}
	procs = append([]string{base}, socketDirs...)
	mounts = append(append([]string{w.Lower, w.Upper, w.Work, view}, w.Layers...), socketDirs...)
	return p, procs, mounts
}

// assertNoHostPath fails when the processes of out name one of procs, or
// its mount table one of mounts.
func assertNoHostPath(t *testing.T, what, out string, procs, mounts []string) {
	t.Helper()
	ps, mi, ok := strings.Cut(out, "== mountinfo")
	if !ok || !strings.Contains(mi, " /workspace ") || !strings.Contains(mi, " /base ro,") || !strings.Contains(ps, "== /proc/1\n") {
		t.Fatalf("%s: the script did not run: %q", what, out)
	}
	for _, c := range []struct {
		part, text string
		paths      []string
	}{{"a process", ps, procs}, {"the mount table", mi, mounts}} {
		for _, h := range c.paths {
			for _, line := range strings.Split(c.text, "\n") {
				if strings.Contains(line, h) {
					t.Errorf("%s: %s shows host path %s: %q", what, c.part, h, line)
				}
			}
		}
	}
}

func TestRunShowsNoHostPaths(t *testing.T) {
	requireSandbox(t)
	p, procs, mounts := hostPathPolicy(t)
	out, err := sh(t, p, procScript)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	assertNoHostPath(t, "a one-shot sandbox", out, procs, mounts)
	// Pid 1 is bwrap's init: its name and --args, not the host path of
	// the bwrap binary (nor of a launch step that executed it).
	if !strings.Contains(out, "== /proc/1\nbwrap --args ") {
		t.Errorf("pid 1 of a one-shot sandbox:\n%s", out)
	}
}

func TestSessionShowsNoHostPaths(t *testing.T) {
	requireSandbox(t)
	p, procs, mounts := hostPathPolicy(t)
	s := startSession(t, p, SessionOptions{})
	out, _, err := inSession(t, s, procScript)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	assertNoHostPath(t, "a session", out, procs, mounts)
}

// TestHideOptions: with argsFile, bwrap's command line is only --args and
// the command; the file holds exactly the options Build puts on it, and
// an option with a NUL (which would split into options of its own) is
// refused.
func TestHideOptions(t *testing.T) {
	p := &Policy{Workspace: &Workspace{Lower: "/srv/repo", Upper: "/var/ws/u", Work: "/var/ws/w"}, Env: []string{"X=--bind"}, UID: 1000, GID: 1000}
	plain, err := p.build([]string{"sh", "-c", "true"}, buildOptions{status: true})
	if err != nil {
		t.Fatal(err)
	}
	hidden, err := p.build([]string{"sh", "-c", "true"}, buildOptions{status: true, argsFile: true})
	if err != nil {
		t.Fatal(err)
	}
	fd := strconv.Itoa(4 + len(plain.Files)) // after the status fd and the other files
	if want := []string{"bwrap", "--args", fd, "--", "sh", "-c", "true"}; !slices.Equal(hidden.Args, want) {
		t.Errorf("command line %q, want %q", hidden.Args, want)
	}
	opts := plain.Args[1:slices.Index(plain.Args, "sh")]
	if len(hidden.Files) != len(plain.Files)+1 || string(hidden.Files[len(plain.Files)]) != strings.Join(opts[:len(opts)-1], "\x00")+"\x00" {
		t.Errorf("args file %q, want the options %q", hidden.Files[len(hidden.Files)-1], opts)
	}
	p.Env = []string{"X=a\x00--bind\x00/\x00/host"}
	if _, err := p.build([]string{"true"}, buildOptions{argsFile: true}); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("an option with NUL: %v, want a refusal", err)
	}
}
