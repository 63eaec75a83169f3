package daemon_test

import (
	"encoding/json"
	"errors"
	"fmt"
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
	if len(st.Servers) != 1 || st.Servers[0].State != mcp.StateRunning || !slices.Contains(st.Servers[0].Tools, mcp.ToolStatus{Name: "get-env", Offered: true}) || !st.Servers[0].Sandboxed {
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
	if len(st.Servers) != 1 || !slices.Equal(st.Servers[0].EgressAllowlist, []string{"api.example.com:443"}) || st.Servers[0].EgressAttempts["refused"] != 1 || st.Servers[0].Network != mcp.NetworkAllowlist {
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

// buildProbeServer builds testdata/probeserver, an MCP server of our own
// whose probe tool says whether it reaches a TCP address and reads a
// file, and which lists tools the model cannot be offered.
func buildProbeServer(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "probeserver")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/codumentor/codumentor/integrations/mcp/testdata/probeserver").CombinedOutput(); err != nil {
		t.Fatalf("building probeserver: %v\n%s", err, out)
	}
	return exe
}

// toolOutputs are the turn's tool outputs by tool name.
func toolOutputs(t *testing.T, evs []sseEvent) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range evs {
		if e.Type != agentcore.EventToolOutput {
			continue
		}
		var o struct{ Data struct{ Name, Output string } }
		if err := json.Unmarshal(e.Data, &o); err != nil {
			t.Fatalf("tool_output %s: %v", e.Data, err)
		}
		out[o.Data.Name] = o.Data.Output
	}
	return out
}

// TestMCPAdminShowsConfinement: for each mode the config offers, GET
// /api/v1/admin/mcp shows what the server's process really has, as its
// probe finds it: the host's loopback listener reached only with the
// host network, the instance's database (a file of the service user)
// read only when it is unconfined (mode: off).
func TestMCPAdminShowsConfinement(t *testing.T) {
	needSandbox(t)
	probe := buildProbeServer(t)
	addr := fmt.Sprintf("127.0.0.1:%d", sandboxtest.ServeTCP(t, "127.0.0.1:0", nil))
	in := newInstance(t, "")
	args := fmt.Sprintf(`{"addr":%q,"file":%q}`, addr, in.config().Database())
	cases := []struct {
		name, extra string     // extra: the server's settings beyond its name and command
		want        mcp.Status // Sandboxed, Network, Files
	}{
		{"none", "", mcp.Status{Sandboxed: true, Network: mcp.NetworkNone, Files: mcp.FilesSandbox}},
		{"host", "network: host, ", mcp.Status{Sandboxed: true, Network: mcp.NetworkHost, Files: mcp.FilesSandbox}},
		{"allow", "egress_allowlist: [api.example.com:443], ", mcp.Status{Sandboxed: true, Network: mcp.NetworkAllowlist, Files: mcp.FilesSandbox}},
		{"off", "mode: off, ", mcp.Status{Sandboxed: false, Network: mcp.NetworkHost, Files: mcp.FilesServiceUser}},
	}
	var calls []agentcore.ToolCall
	yaml := "plugins: [workspace_isolation, mcp]\nmcp:\n  servers:\n"
	for _, c := range cases {
		calls = append(calls, agentcore.ToolCall{Name: "mcp__" + c.name + "__probe", Arguments: args})
		yaml += fmt.Sprintf("    - {name: %s, command: %s, %sauto_approve: [probe]}\n", c.name, probe, c.extra)
	}
	// The probe names the instance's database: the configuration comes after.
	cfg := "auth:\n  jwt_secret: " + testSecret + "\n" + llm(t, llmtest.Step{Text: "Probing.", ToolCalls: calls}, llmtest.Step{Text: "Done."}) + yaml
	if err := os.WriteFile(in.config().ConfigFile(), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	conv := admin.newConversation()
	s := admin.follow(conv, "")
	admin.send(conv, "go")
	outs := toolOutputs(t, s.until(agentcore.EventTurnFinished, 120*time.Second))
	var st struct{ Servers []mcp.Status }
	admin.must(http.StatusOK, "GET", "/api/v1/admin/mcp", nil, &st)
	for i, c := range cases {
		out := outs["mcp__"+c.name+"__probe"]
		if i >= len(st.Servers) || st.Servers[i].Name != c.name {
			t.Fatalf("admin/mcp: %+v", st.Servers)
		}
		got := st.Servers[i]
		if got.Sandboxed != c.want.Sandboxed || got.Network != c.want.Network || got.Files != c.want.Files {
			t.Errorf("%s: admin/mcp shows sandboxed %v, network %q, files %q; want %v, %q, %q", c.name, got.Sandboxed, got.Network, got.Files, c.want.Sandboxed, c.want.Network, c.want.Files)
		}
		// What is shown is what the process has.
		if reached := strings.Contains(out, "dial=connected"); reached != (got.Network == mcp.NetworkHost) || !strings.Contains(out, "dial=") {
			t.Errorf("%s: the probe says %q (the host's loopback listener); admin/mcp shows network %q", c.name, out, got.Network)
		}
		if read := strings.Contains(out, "file=read"); read != (got.Files == mcp.FilesServiceUser) || read == got.Sandboxed || !strings.Contains(out, "file=") {
			t.Errorf("%s: the probe says %q (the instance's database); admin/mcp shows files %q, sandboxed %v", c.name, out, got.Files, got.Sandboxed)
		}
	}
}

// TestMCPToolsNotOffered: a server listing tools whose names the model's
// tool names cannot carry (files.read; one too long with its prefix):
// GET /api/v1/admin/mcp lists them as not offered, saying why, and the
// model's tool list lacks them.
func TestMCPToolsNotOffered(t *testing.T) {
	needSandbox(t)
	probe := buildProbeServer(t)
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "Done."}}}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n", srv.URL())+`plugins: [workspace_isolation, mcp]
mcp:
  servers:
    - {name: probe, command: `+probe+`}
`)
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	conv := admin.newConversation()
	s := admin.follow(conv, "")
	admin.send(conv, "go")
	s.until(agentcore.EventTurnFinished, 60*time.Second)

	var st struct{ Servers []mcp.Status }
	admin.must(http.StatusOK, "GET", "/api/v1/admin/mcp", nil, &st)
	if len(st.Servers) != 1 || st.Servers[0].State != mcp.StateRunning {
		t.Fatalf("admin/mcp: %+v", st)
	}
	tools := map[string]mcp.ToolStatus{}
	for _, tl := range st.Servers[0].Tools {
		tools[tl.Name] = tl
	}
	const long = "a-tool-name-that-is-far-too-long-once-prefixed-for-the-model"
	if tl := tools["probe"]; !tl.Offered || tl.Reason != "" {
		t.Errorf("probe: %+v; want offered", tl)
	}
	for name, why := range map[string]string{"files.read": "characters", long: "longer than 64"} {
		if tl, ok := tools[name]; !ok || tl.Offered || !strings.Contains(tl.Reason, why) {
			t.Errorf("%s: %+v (listed %v); want not offered, the reason saying %q", name, tl, ok, why)
		}
	}
	reqs := srv.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was not asked")
	}
	var offered []string
	for _, tl := range reqs[0].Tools {
		if strings.HasPrefix(tl.Name, "mcp__") {
			offered = append(offered, tl.Name)
		}
	}
	if !slices.Equal(offered, []string{"mcp__probe__probe"}) {
		t.Errorf("the model was offered %q; want only mcp__probe__probe", offered)
	}
}

// TestWebMCPPage: the admin page shows each server's confinement and
// marks in words (not by colour alone) the tools not offered, with why.
func TestWebMCPPage(t *testing.T) {
	needSandbox(t)
	probe := buildProbeServer(t)
	in := newInstance(t, llm(t, llmtest.Step{Text: "Done."})+`plugins: [workspace_isolation, mcp]
mcp:
  servers:
    - {name: probe, command: `+probe+`}
    - {name: loose, command: `+probe+`, mode: off}
`)
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	conv := admin.newConversation()
	s := admin.follow(conv, "")
	admin.send(conv, "go") // starts the servers
	s.until(agentcore.EventTurnFinished, 60*time.Second)

	w := newWebUI(t, p.URL)
	w.signIn("root", pw)
	const rows = "document.querySelectorAll('#mcp tbody tr')"
	w.open("/admin/mcp", rows+".length === 2")
	for i, want := range [][]string{
		{"probe", "running", "Sandboxed", "Network: none", "Files: its sandbox only", "files.read not offered: its name has characters other than", "not offered: its name as the model would see it"},
		{"loose", "running", "NOT sandboxed (mode: off)", "Network: the host's", "Files: all of the service user's"},
	} {
		got := eval[string](w, fmt.Sprintf("%s[%d].innerText", rows, i))
		for _, s := range want {
			if !strings.Contains(got, s) {
				t.Errorf("row %d lacks %q:\n%s", i, s, got)
			}
		}
	}
	w.checkPage("mcp-servers", rows+".length === 2", "")
	if pr := w.seen(&w.problems); len(pr) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(pr, "\n"))
	}
}
