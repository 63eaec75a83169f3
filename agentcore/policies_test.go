package agentcore_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// TestPolicies: the engine's three sandboxes carry every setting; the
// shell's has its workspace and no network, an external agent's reaches
// only its allow-list through the proxy under the settings' caps, an
// investigation's sees the host read-only with the extra masks and the
// host network only when agreed.
func TestPolicies(t *testing.T) {
	ws := &sandboxkit.Workspace{Lower: "/l", Upper: "/u", Work: "/w"}
	lim := sandboxkit.DefaultLimits()
	lim.Pids = 13
	caps := egress.Caps{MaxBytes: 1 << 20}
	launched := 0
	s := sandboxkit.Settings{Bwrap: "/opt/bwrap", Limits: &lim, EgressCaps: caps, Launching: func(context.Context, sandboxkit.LaunchRecord) error { launched++; return nil }}
	mask := filepath.Join(t.TempDir(), "instance")
	os.Mkdir(mask, 0o700)
	shell, err := agentcore.WorkspacePolicy(s, ws)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := agentcore.ExternalAgentPolicy(s, ws, []string{"api.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	offline, err := agentcore.ExternalAgentPolicy(s, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	denied, err := agentcore.InvestigationPolicy(s, []string{mask}, false)
	if err != nil {
		t.Fatal(err)
	}
	agreed, err := agentcore.InvestigationPolicy(s, []string{mask}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		label    string
		p        *sandboxkit.Policy
		ws, host bool
		shareNet bool
		egress   []string
	}{
		{"workspace", shell, true, false, false, nil},
		{"external-agent", agent, true, false, false, []string{"api.example.com"}},
		{"external-agent", offline, true, false, false, nil},
		{"host-readonly", denied, false, true, false, nil},
		{"host-readonly", agreed, false, true, true, nil},
	} {
		p := c.p
		if p.Profile != c.label || p.Bwrap != "/opt/bwrap" || p.Limits != lim || p.Seccomp == nil {
			t.Errorf("%s: a setting is lost: %+v", c.label, p)
		}
		launched = 0
		if p.Launching(t.Context(), sandboxkit.LaunchRecord{}); launched != 1 {
			t.Errorf("%s: the settings' Launching is not its own", c.label)
		}
		if (p.Workspace == ws) != c.ws || p.HostView != c.host || p.ShareNet != c.shareNet {
			t.Errorf("%s: workspace %v, host view %v, shared network %v", c.label, p.Workspace, p.HostView, p.ShareNet)
		}
		if (p.Egress != nil) != (c.egress != nil) || p.Egress != nil && (!slices.Equal(p.Egress.Allow, c.egress) || p.Egress.Caps != caps) {
			t.Errorf("%s: egress %+v, want %v under the settings' caps", c.label, p.Egress, c.egress)
		}
		if c.host && (!slices.Contains(p.Tmpfs, mask) || !slices.Contains(p.Tmpfs, "/home")) {
			t.Errorf("%s: masks %v lack the extra mask or /home", c.label, p.Tmpfs)
		}
		if _, err := diag.Build(p, "true"); err != nil {
			t.Errorf("%s: %v", c.label, err)
		}
	}
}
