package config

import (
	"strings"
	"testing"
	"time"
)

// The external_agents and subagent_isolation keys parse as the README
// writes them, and bad values name their key.
func TestIntegrationsConfig(t *testing.T) {
	c, err := Parse([]byte(`
plugins: [workspace_isolation, external_agent]
external_agents:
  - name: coder
    command: /usr/local/bin/coder-cli
    args: [--non-interactive, "{task}"]
    env: {CODER_TELEMETRY: "0"}
    egress_allowlist: []
    sandbox_tier: 1
    timeout: 20m
allow_unsandboxed_external_agents: true
subagent_isolation: isolated
`))
	if err != nil {
		t.Fatal(err)
	}
	a := c.ExternalAgents[0]
	if a.Name != "coder" || a.SandboxTier != "1" || a.Timeout != 20*time.Minute || a.Env["CODER_TELEMETRY"] != "0" || a.Args[1] != "{task}" ||
		!c.AllowUnsandboxedExternalAgents || c.SubagentIsolation != "isolated" {
		t.Fatalf("parsed: %+v", c)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"subagent_isolation: yes\n", "subagent_isolation"},
		{"plugins: [external_agent]\nexternal_agents: [{name: a, command: x, sandbox_tier: 2}]\n", "external_agents[0].sandbox_tier"},
		{"external_agents: [{name: a, command: x}]\n", "external_agent plugin is not enabled"},
		{"plugins: [mystery]\n", "known: workspace_isolation, external_agent, mcp, office, webretrieve, mermaid_render"},
	} {
		if _, err := Parse([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want an error naming %s", tc.yaml, err, tc.want)
		}
	}
}

func TestIntegrationsValidate(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"plugins: [mcp]\nmcp:\n  servers:\n    - {name: fs, command: node}\n", ""},
		{"mcp:\n  servers:\n    - {name: fs, command: node}\n", "mcp plugin is not enabled"},
		{"plugins: [mcp]\nmcp:\n  servers:\n    - {name: fs, command: node}\n    - {name: fs, command: node}\n", "used twice"},
		{"plugins: [mcp]\nmcp:\n  servers:\n    - {name: fs, command: node, mode: yolo}\n", "mode"},
		{"plugins: [mcp]\nmcp:\n  servers:\n    - {name: fs, command: node, sandbox: none}\n", "sandbox"},
		{"plugins: [nope]\n", "unknown plugin"},
		{"investigation: {enabled: true, users: [carol]}\n", ""},
		{"investigation: {users: [carol]}\n", "investigation.enabled is false"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
