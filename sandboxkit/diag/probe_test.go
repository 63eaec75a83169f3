package diag

import (
	"os"
	"runtime"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/seccomp"
	"golang.org/x/sys/unix"
)

// The probe matrix in a real sandbox, as the unprivileged user: every
// blocklisted call (native, high-bit arguments, int $0x80, x32) is
// refused under enforce with its errno and let through under log and
// off; what must keep working does, in every mode.
func TestSeccompProbeMatrix(t *testing.T) {
	requireSandbox(t)
	for _, m := range seccomp.Modes {
		t.Run(string(m), func(t *testing.T) {
			p := workspacePolicy(t, m)
			if (p.Seccomp == nil) != (m == seccomp.Off) {
				t.Fatalf("mode %s: Policy.Seccomp set = %v", m, p.Seccomp != nil)
			}
			rep, err := Probe(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			abis := map[string]int{}
			for _, f := range rep.Failures(m) {
				t.Error(f)
			}
			for _, c := range rep.Calls {
				abis[c.ABI]++
				// A refused socket family answers EAFNOSUPPORT in the
				// sandbox, as a family the kernel lacks.
				if m == seccomp.Enforce && (c.Rule == "socket" || c.Rule == "socketpair") && c.Errno != int(unix.EAFNOSUPPORT) {
					t.Errorf("%s %s: %s, want EAFNOSUPPORT", c.ABI, c.Call, c.Outcome())
				}
				// The oracle tells the modes apart: a result that would
				// pass under the other verdict proves nothing.
				other := seccomp.Enforce
				if m == seccomp.Enforce {
					other = seccomp.Log
				}
				if c.Verdict(other) == nil {
					t.Errorf("%s %s: %s also passes as %s", c.ABI, c.Call, c.Outcome(), other)
				}
			}
			if runtime.GOARCH == "amd64" && (abis["x86_64"] < 50 || abis["x32"] != 1 || rep.CompatProbed != (abis["i386"] >= 45)) {
				t.Errorf("probed %v calls per ABI (compat: %s); want the whole list on x86_64, x32 and, where reachable, i386", abis, rep.Compat)
			}
			if !rep.CompatProbed {
				// Reported, not faked: TestFilterMatrix covers the
				// compat tables through an interpreter.
				t.Logf("compat table: %s", rep.Compat)
			}
			if len(rep.Works) < 8 {
				t.Errorf("only %d works checks", len(rep.Works))
			}
			if m == seccomp.Off {
				// This kernel has no x32 ABI: the call reaches it and
				// it answers ENOSYS on its own. Reported, not faked.
				for _, c := range rep.Calls {
					if c.ABI == "x32" {
						t.Logf("x32 under off: %s", c.Outcome())
					}
				}
			}
		})
	}
}

// Real toolchains keep working under enforce, in the workspace.
func TestSeccompToolchains(t *testing.T) {
	requireSandbox(t)
	p := workspacePolicy(t, seccomp.Enforce)
	for _, c := range ProbeToolchains(t.Context(), p) {
		switch {
		case c.Skipped && os.Getenv("CI") == "true":
			t.Errorf("%s: skipped under CI: %s", c.Name, c.Detail)
		case c.Skipped:
			t.Logf("%s: skipped: %s", c.Name, c.Detail)
		case !c.OK:
			t.Errorf("%s failed under enforce: %s", c.Name, c.Detail)
		}
	}
}
