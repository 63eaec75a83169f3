package daemon_test

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/integrations/mcp"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// mcpNodeModules is where scripts/install-prereqs installs the npm MCP
// servers.
func mcpNodeModules(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CODUMENTOR_MCP_NODE_MODULES")
	if dir == "" {
		dir = "/var/cache/codumentor-prereqs/npm/node_modules"
	}
	if _, err := os.Stat(dir + "/@modelcontextprotocol/server-everything/dist/index.js"); err != nil {
		sandboxtest.SkipOrFail(t, "MCP servers are not installed (scripts/install-prereqs installs them): %v", err)
	}
	return dir
}

// TestMCPThroughTheAPI: the model calls a sandboxed server-everything's
// tools: echo (auto_approve) runs at once; get-env waits for the user's
// approval and shows none of the server's secrets. GET /api/v1/admin/mcp
// lists the server, for admins only.
func TestMCPThroughTheAPI(t *testing.T) {
	needSandbox(t)
	nm := mcpNodeModules(t)
	in := newInstance(t, llm(t,
		llmtest.Step{Text: "Echo.", ToolCalls: []agentcore.ToolCall{{Name: "mcp__everything__echo", Arguments: `{"message":"via the api"}`}}},
		llmtest.Step{Text: "Env.", ToolCalls: []agentcore.ToolCall{{Name: "mcp__everything__get-env", Arguments: `{}`}}},
		llmtest.Step{Text: "Done."},
	)+`plugins: [workspace_isolation, mcp]
mcp:
  servers:
    - name: everything
      command: node
      args: [`+nm+`/@modelcontextprotocol/server-everything/dist/index.js, stdio]
      read_only: [`+nm+`]
      env: {GREETING: configured}
      auto_approve: [echo]
`)
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start("CODUMENTOR_JWT_SECRET="+testSecret, "CODUMENTOR_LLM_API_KEY=llm-key-in-the-server-environment")
	admin, alice := p.login("root", pw), p.login("alice", pw)
	var st struct{ Servers []mcp.Status }
	admin.must(http.StatusOK, "GET", "/api/v1/admin/mcp", nil, &st)
	if len(st.Servers) != 1 || st.Servers[0].State != mcp.StateIdle {
		t.Fatalf("before any turn: %+v (want idle: servers start lazily)", st)
	}
	alice.must(http.StatusForbidden, "GET", "/api/v1/admin/mcp", nil, nil)

	conv := alice.newConversation()
	s := alice.follow(conv, "")
	alice.send(conv, "go")
	evs := s.until(agentcore.EventApprovalPending, 60*time.Second)
	if !slices.ContainsFunc(evs, func(e sseEvent) bool {
		return e.Type == agentcore.EventToolOutput && strings.Contains(string(e.Data), "via the api")
	}) {
		t.Fatalf("echo's output missing: %v", evs)
	}
	if slices.ContainsFunc(evs, func(e sseEvent) bool {
		return e.Type == agentcore.EventApprovalPending && strings.Contains(string(e.Data), "echo")
	}) {
		t.Error("echo is in auto_approve but asked for approval")
	}
	aid := approvalID(t, evs[len(evs)-1])
	if !strings.Contains(string(evs[len(evs)-1].Data), "mcp__everything__get-env {}") {
		t.Errorf("the approval does not show the call: %s", evs[len(evs)-1].Data)
	}
	alice.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+aid, map[string]string{"decision": "approve"}, nil)
	evs = s.until(agentcore.EventTurnFinished, 60*time.Second)
	i := slices.IndexFunc(evs, func(e sseEvent) bool {
		return e.Type == agentcore.EventToolOutput && strings.Contains(string(e.Data), "mcp__everything__get-env")
	})
	if i < 0 {
		t.Fatalf("get-env's output missing: %v", evs)
	}
	out := string(evs[i].Data)
	if !strings.Contains(out, "configured") || strings.Contains(out, "CODUMENTOR") || strings.Contains(out, testSecret) || strings.Contains(out, "llm-key-in-the-server") {
		t.Errorf("get-env in the sandbox: %s", out)
	}
	admin.must(http.StatusOK, "GET", "/api/v1/admin/mcp", nil, &st)
	if len(st.Servers) != 1 || st.Servers[0].State != mcp.StateRunning || !slices.Contains(st.Servers[0].Tools, "get-env") || !st.Servers[0].Sandboxed {
		t.Errorf("after the turn: %+v", st)
	}
}

// TestMCPModeOffWarns: a mode: off server is logged as unsandboxed at
// every start.
func TestMCPModeOffWarns(t *testing.T) {
	in := newInstance(t, `plugins: [mcp]
mcp:
  servers:
    - {name: loose, command: /bin/true, mode: off}
`)
	for range 2 {
		p := in.start()
		if !strings.Contains(p.stderr.String(), "UNSANDBOXED") {
			t.Errorf("no warning for mode: off:\n%s", p.stderr)
		}
		p.stop()
	}
}

// TestMCPFailsClosed: with the sandbox unavailable (a bwrap older than
// sandboxkit accepts), a sandboxed MCP server does not start: a marker it
// would write stays absent, and the model's call of its tool says why.
func TestMCPFailsClosed(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	old := sandboxtest.OldBwrap(t)
	marker := filepath.Join(t.TempDir(), "ran-on-the-host")
	in := newInstance(t, llm(t,
		llmtest.Step{Text: "Try it.", ToolCalls: []agentcore.ToolCall{{Name: "mcp__marker", Arguments: `{}`}}},
		llmtest.Step{Text: "Done."},
	)+`plugins: [workspace_isolation, mcp]
sandbox:
  bwrap: `+old+`
mcp:
  servers:
    - {name: marker, command: /bin/sh, args: [-c, "touch `+marker+`"]}
`)
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	conv := admin.newConversation()
	s := admin.follow(conv, "")
	admin.send(conv, "go")
	evs := s.until(agentcore.EventTurnFinished, 60*time.Second)
	if !slices.ContainsFunc(evs, func(e sseEvent) bool {
		return e.Type == agentcore.EventToolOutput && strings.Contains(string(e.Data), "sandbox unavailable") && strings.Contains(string(e.Data), "nothing was run")
	}) || !slices.ContainsFunc(evs, func(e sseEvent) bool { return e.Type == agentcore.EventSandboxUnavailable }) {
		t.Errorf("the tool did not say why it is unavailable: %v", evs)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the MCP server ran on the host: %v", err)
	}
	var st struct{ Servers []mcp.Status }
	admin.must(http.StatusOK, "GET", "/api/v1/admin/mcp", nil, &st)
	if len(st.Servers) != 1 || st.Servers[0].State != mcp.StateStopped || !strings.Contains(st.Servers[0].LastError, "unavailable") {
		t.Errorf("admin/mcp: %+v", st)
	}
}

// TestMCPEgress: a server with egress_allowlist runs with its own
// network and the egress proxy: the model's fetch of a name not on the
// list is refused; the attempt is counted in the admin listing and in
// /metrics (source mcp), and is no event of the conversation (every
// conversation shares the server). testdata/fetchserver is an MCP server
// of our own; integrations/mcp's tests show allowed names reached.
func TestMCPEgress(t *testing.T) {
	needSandbox(t)
	fetch := filepath.Join(t.TempDir(), "fetchserver")
	if out, err := exec.Command("go", "build", "-o", fetch, "github.com/codumentor/codumentor/integrations/mcp/testdata/fetchserver").CombinedOutput(); err != nil {
		t.Fatalf("building fetchserver: %v\n%s", err, out)
	}
	in := newInstance(t, llm(t,
		llmtest.Step{Text: "Fetch.", ToolCalls: []agentcore.ToolCall{{Name: "mcp__fetch__fetch", Arguments: `{"url":"https://elsewhere.example/"}`}}},
		llmtest.Step{Text: "Done."},
	)+`plugins: [workspace_isolation, mcp]
sandbox:
  egress: {max_connections: 2, max_bytes: 1MiB, max_connection_duration: 30s, dial_timeout: 2s}
mcp:
  servers:
    - {name: fetch, command: `+fetch+`, egress_allowlist: [api.example.com:443], auto_approve: [fetch]}
`)
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	conv := admin.newConversation()
	s := admin.follow(conv, "")
	admin.send(conv, "go")
	evs := s.until(agentcore.EventTurnFinished, 60*time.Second)
	if !slices.ContainsFunc(evs, func(e sseEvent) bool {
		return e.Type == agentcore.EventToolOutput && strings.Contains(string(e.Data), "fetch failed")
	}) {
		t.Errorf("the refused fetch's output missing: %v", evs)
	}
	if slices.ContainsFunc(evs, func(e sseEvent) bool { return e.Type == agentcore.EventEgress }) {
		t.Errorf("an MCP server's attempt became a conversation's event: %v", evs)
	}
	var st struct{ Servers []mcp.Status }
	admin.must(http.StatusOK, "GET", "/api/v1/admin/mcp", nil, &st)
	if len(st.Servers) != 1 || !slices.Equal(st.Servers[0].EgressAllowlist, []string{"api.example.com:443"}) || st.Servers[0].EgressAttempts["refused"] != 1 || st.Servers[0].Network != mcp.NetworkNone {
		t.Errorf("admin/mcp: %+v", st)
	}
	_, body, _ := p.anon().do("GET", "/metrics", nil)
	if !strings.Contains(string(body), `codumentor_egress_attempts_total{source="mcp",verdict="refused"} 1`) {
		t.Errorf("/metrics has no refused mcp attempt:\n%s", grepLines(string(body), "codumentor_egress"))
	}
	if !strings.Contains(p.stderr.String(), "MCP server egress attempt") {
		t.Errorf("the attempt was not logged:\n%s", p.stderr)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
