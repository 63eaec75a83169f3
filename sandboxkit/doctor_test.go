package sandboxkit

import (
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
)

// The Doctor's remedies are neutral unless the caller gives its own
// (naming its installer, its unit file): each call gets its own words,
// whatever the cached report holds.
func TestDoctorRemedies(t *testing.T) {
	const install, delegate = "run ./install-bwrap", "run ./delegate-cgroups"
	r := Doctor(t.Context(), DoctorOptions{Bwrap: "/nonexistent/bwrap", InstallRemedy: install})
	if c := r.Checks[0]; c.Name != "bwrap" || c.OK || c.Remedy != install+", or configure its path" {
		t.Errorf("bwrap check with the caller's remedy: %+v", c)
	}
	r = Doctor(t.Context(), DoctorOptions{Bwrap: "/nonexistent/bwrap"})
	if c := r.Checks[0]; c.Remedy != installRemedy+", or configure its path" {
		t.Errorf("bwrap check with the default remedy: %+v", c)
	}

	requireSandbox(t)
	l := DefaultLimits()
	l.Cgroup = "no-such-parent/no-such-user"
	for _, c := range []struct{ give, want string }{{delegate, delegate}, {"", cgroup.Remedy()}, {delegate, delegate}} {
		r := Doctor(t.Context(), DoctorOptions{Limits: &l, CgroupRemedy: c.give, InstallRemedy: install})
		lc := r.Checks[len(r.Checks)-1]
		if lc.Name != "limits" || !lc.Warning || lc.Remedy != c.want {
			t.Errorf("limits check, remedy %q: %+v", c.give, lc)
		}
		for _, k := range r.Checks {
			if strings.Contains(k.Remedy, installRemedy) {
				t.Errorf("check %s kept the default install remedy: %q", k.Name, k.Remedy)
			}
		}
	}
}
