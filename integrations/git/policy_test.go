package git

import (
	"context"
	"slices"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
)

// TestMirrorPolicy: git's sandbox sees the repository read-only and one
// output directory read-write, nothing else of the host, no network;
// every setting reaches it, and relative paths are refused.
func TestMirrorPolicy(t *testing.T) {
	lim := sandboxkit.DefaultLimits()
	lim.Pids = 9
	launched := false
	s := sandboxkit.Settings{Bwrap: "/opt/bwrap", Limits: &lim, Launching: func(context.Context, sandboxkit.LaunchRecord) error { launched = true; return nil }}
	p, err := MirrorPolicy(s, "/srv/repos/r.git", "/srv/out")
	if err != nil {
		t.Fatal(err)
	}
	if p.Limits != lim || p.Bwrap != "/opt/bwrap" || p.Profile != "git" || p.Seccomp == nil {
		t.Errorf("git's policy lost a setting: %+v", p)
	}
	if p.Launching(t.Context(), sandboxkit.LaunchRecord{}); !launched {
		t.Error("the settings' Launching is not git's")
	}
	if !slices.Equal(p.ReadOnly, []sandboxkit.Bind{{Src: "/srv/repos/r.git", Dst: "/mirror"}}) || !slices.Equal(p.ReadWrite, []sandboxkit.Bind{{Src: "/srv/out", Dst: "/out"}}) || p.Dir != "/out" {
		t.Errorf("binds %v %v, dir %q", p.ReadOnly, p.ReadWrite, p.Dir)
	}
	if p.Workspace != nil || p.ShareNet || p.Egress != nil || p.HostView {
		t.Errorf("git's sandbox gets more than the two trees: %+v", p)
	}
	l, err := diag.Build(p, "git", "status")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(l.Args, "--share-net") {
		t.Errorf("git's sandbox shares the network: %q", l.Args)
	}
	for _, bad := range [][2]string{{"/srv/repos/r.git", "out"}, {"r.git", "/srv/out"}} {
		if _, err := MirrorPolicy(s, bad[0], bad[1]); err == nil {
			t.Errorf("MirrorPolicy(%q, %q) made a policy", bad[0], bad[1])
		}
	}
}
