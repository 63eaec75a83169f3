package agentcore

import (
	"github.com/codumentor/codumentor/sandboxkit"
)

// The labels of the engine's sandboxes (sandboxkit.Policy.Profile), as
// Launch.Profile tells them.
const (
	labelWorkspace     = "workspace"
	labelExternalAgent = "external-agent"
	labelInvestigation = "host-readonly"
)

// WorkspacePolicy is the sandbox of a conversation's shell and file
// tools: ws at /workspace, no network.
func WorkspacePolicy(s sandboxkit.Settings, ws *sandboxkit.Workspace) (*sandboxkit.Policy, error) {
	return s.Workspace(labelWorkspace, ws)
}

// ExternalAgentPolicy is the sandbox of a command that runs over a
// conversation's workspace with network (an external coding agent, tier
// 1): ws at /workspace, and a way out only through an egress proxy to
// the destinations of allow (none if allow is empty).
func ExternalAgentPolicy(s sandboxkit.Settings, ws *sandboxkit.Workspace, allow []string) (*sandboxkit.Policy, error) {
	p, err := s.Workspace(labelExternalAgent, ws)
	if err == nil && len(allow) > 0 {
		p.Egress = s.Egress(allow)
	}
	return p, err
}

// InvestigationPolicy is the sandbox of a host read-only investigation:
// a read-only view of the host with its data masked, mask besides
// (sandboxkit.Settings.HostView), and the host network only if
// shareNet (the user agreed).
func InvestigationPolicy(s sandboxkit.Settings, mask []string, shareNet bool) (*sandboxkit.Policy, error) {
	p, err := s.HostView(labelInvestigation, mask)
	if err == nil {
		p.ShareNet = shareNet
	}
	return p, err
}
