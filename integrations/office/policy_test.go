package office

import (
	"context"
	"slices"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
)

// TestWorkerPolicy: the worker sees its input read-only and nothing to
// write, has no workspace and no network, and runs under its own limits
// in the settings' cgroup; a relative input is refused.
func TestWorkerPolicy(t *testing.T) {
	server := sandboxkit.DefaultLimits()
	server.Cgroup, server.Require = "/srv/cg", true
	launched := false
	s := sandboxkit.Settings{Bwrap: "/opt/bwrap", Limits: &server, Launching: func(context.Context, sandboxkit.LaunchRecord) error { launched = true; return nil }}
	p, err := WorkerPolicy(s, "/srv/in/report.docx")
	if err != nil {
		t.Fatal(err)
	}
	want := WorkerLimits()
	want.Cgroup, want.Require = "/srv/cg", true
	if p.Limits != want || p.Bwrap != "/opt/bwrap" || p.Profile != "office" || p.Launching == nil || p.Seccomp == nil {
		t.Errorf("worker policy lost a setting: %+v", p)
	}
	if p.Launching(t.Context(), sandboxkit.LaunchRecord{}); !launched {
		t.Error("the settings' Launching is not the worker's")
	}
	if !slices.Equal(p.ReadOnly, []sandboxkit.Bind{{Src: "/srv/in/report.docx", Dst: "/input/report.docx"}}) || p.Dir != "/input" {
		t.Errorf("input bind %v, dir %q", p.ReadOnly, p.Dir)
	}
	if p.Workspace != nil || p.ShareNet || p.Egress != nil || p.HostView || len(p.ReadWrite) > 0 {
		t.Errorf("the worker gets more than its input: %+v", p)
	}
	l, err := diag.Build(p, "true")
	if err != nil {
		t.Fatal(err)
	}
	for _, deny := range []string{"--share-net", "--bind", sandboxkit.WorkspaceDir} {
		if slices.Contains(l.Args, deny) {
			t.Errorf("the worker's argv has %s: %q", deny, l.Args)
		}
	}
	if _, err := WorkerPolicy(s, "rel.docx"); err == nil {
		t.Error("a relative input made a policy")
	}
}
