package sandboxkit

import (
	"os"
	"path/filepath"
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
// with an egress proxy. It returns the host paths no process may show,
// and those the mount table may not show: the workspace's (a bind's
// source is shown by the kernel; see hideOptions).
func hostPathPolicy(t *testing.T) (p *Policy, procs, mounts []string) {
	t.Helper()
	w := testWorkspace(t)
	base := filepath.Dir(w.Lower)
	layer, ro := filepath.Join(base, "layer"), filepath.Join(base, "ro")
	for _, d := range []string{layer, ro} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	w.Layers = []string{layer}
	p = workspacePolicy(t, w)
	p.ReadOnly = append(p.ReadOnly, Bind{Src: ro, Dst: "/opt/ro"})
	p.Egress = &egress.Options{}
	// The egress socket's directory: sandboxkit-egress-* under it.
	procs = []string{base, filepath.Join(os.TempDir(), "sandboxkit-egress-")}
	mounts = append([]string{w.Lower, w.Upper, w.Work}, w.Layers...)
	return p, procs, mounts
}

// assertNoHostPath fails when the processes of out name one of procs, or
// its mount table one of mounts.
func assertNoHostPath(t *testing.T, what, out string, procs, mounts []string) {
	t.Helper()
	ps, mi, ok := strings.Cut(out, "== mountinfo")
	if !ok || !strings.Contains(mi, " /workspace ") || !strings.Contains(ps, "== /proc/1\n") {
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
