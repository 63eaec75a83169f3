package setup

import (
	"slices"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// TestSetupPolicy: a setup script's sandbox has its workspace, the
// network the repository allows (none, the host's, or an allow-list
// through the proxy under the settings' caps, never both) and a layer
// bounded like a snapshot.
func TestSetupPolicy(t *testing.T) {
	ws := &sandboxkit.Workspace{Lower: "/l", Upper: "/u", Work: "/w"}
	lim := sandboxkit.DefaultLimits()
	lim.Disk = 8 << 30
	caps := egress.Caps{MaxConns: 3}
	s := sandboxkit.Settings{Bwrap: "/opt/bwrap", Limits: &lim, EgressCaps: caps}
	for _, c := range []struct {
		name     string
		maxLayer int64
		hostNet  bool
		allow    []string
		disk     int64
	}{
		{"offline", 1 << 30, false, nil, 1 << 30},
		{"host", 16 << 30, true, nil, 8 << 30},
		{"allow-list", 0, false, []string{"registry.npmjs.org"}, 8 << 30},
	} {
		p, err := Policy(s, c.maxLayer, ws, c.hostNet, c.allow)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if p.Profile != "setup" || p.Bwrap != "/opt/bwrap" || p.Workspace != ws || p.Seccomp == nil || p.Limits.Pids != lim.Pids || p.Limits.Disk != c.disk {
			t.Errorf("%s: %+v (disk %d, want %d)", c.name, p, p.Limits.Disk, c.disk)
		}
		if p.ShareNet != c.hostNet || (p.Egress != nil) != (c.allow != nil) || p.Egress != nil && (!slices.Equal(p.Egress.Allow, c.allow) || p.Egress.Caps != caps) {
			t.Errorf("%s: shared network %v, egress %+v", c.name, p.ShareNet, p.Egress)
		}
		if _, err := diag.Build(p, "sh", "/workspace/setup.sh"); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if lim.Disk != 8<<30 {
		t.Errorf("the settings' limits were changed: %+v", lim)
	}
	if _, err := Policy(s, 0, ws, true, []string{"registry.npmjs.org"}); err == nil {
		t.Error("a setup got both the host network and an allow-list")
	}
}
