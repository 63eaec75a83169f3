package sandboxkit

import (
	"strings"
	"testing"
)

// A launch step (here the abstract-socket scope of a shared network)
// runs Go threads before bwrap, so bwrap's first child gets a pid
// above the few a host's /proc may have; bwrap must still find it in
// its /proc (see launchstep.go). Which pid that is depends on how many
// threads the step's runtime started, so the failure was intermittent:
// the office worker's rlimit step made about one daemon TestAttachments
// run in four die with "open /proc/9/ns failed" on this CI host (no pid
// 9) before the step mounted its own /proc; many runs here make a
// regression likely to show. Also: the command gets no capability.
func TestLaunchStepOwnProc(t *testing.T) {
	requireSandbox(t)
	requireAbstractScope(t)
	p, err := netPolicy(Settings{}, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		var out strings.Builder
		c := Command(t.Context(), p, "sh", "-c", "grep -E '^Cap(Eff|Prm|Amb)' /proc/self/status")
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, out.String())
		}
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if f := strings.Fields(l); len(f) != 2 || strings.Trim(f[1], "0") != "" {
				t.Fatalf("run %d: the command has capabilities: %q", i, out.String())
			}
		}
	}
}
