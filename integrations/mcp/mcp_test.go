package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// envTestServer makes the test binary an MCP server of our own (see
// testServer), for what the npm servers cannot show: a server that asks
// for sampling and elicitation, and one that dies during a call.
const envTestServer = "CODUMENTOR_MCP_TEST_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(envTestServer) == "1" {
		testServer()
		return
	}
	sandboxkit.Main()
	os.Exit(m.Run())
}

// testServer serves two tools on stdio: ask (requests sampling and
// elicitation from the client and reports what came back) and crash
// (exits in the middle of the call).
func testServer() {
	s := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "ask"}, func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		var out []string
		//lint:ignore SA1019 sampling is deprecated (SEP-2577) but still functional: servers may ask, and the client must refuse
		_, err := req.Session.CreateMessage(ctx, &sdk.CreateMessageParams{MaxTokens: 10, Messages: []*sdk.SamplingMessage{{Role: "user", Content: &sdk.TextContent{Text: "hi"}}}})
		out = append(out, fmt.Sprintf("sampling refused=%v (%v)", err != nil, err))
		_, err = req.Session.Elicit(ctx, &sdk.ElicitParams{Message: "your password?", RequestedSchema: &jsonschemaObject})
		out = append(out, fmt.Sprintf("elicitation refused=%v (%v)", err != nil, err))
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Join(out, "\n")}}}, nil, nil
	})
	// ask-mrtr asks the way protocol 2026-07-28 wants: a result that
	// needs input, answered by a retry of the call.
	sdk.AddTool(s, &sdk.Tool{Name: "ask-mrtr"}, func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		if len(req.Params.InputResponses) > 0 {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "the client answered"}}}, nil, nil
		}
		return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{
			//lint:ignore SA1019 sampling is deprecated (SEP-2577) but still functional: servers may ask, and the client must refuse
			"s": &sdk.CreateMessageParams{MaxTokens: 10, Messages: []*sdk.SamplingMessage{{Role: "user", Content: &sdk.TextContent{Text: "hi"}}}},
			"e": &sdk.ElicitParams{Message: "your password?", RequestedSchema: &jsonschemaObject},
		}}, nil, nil
	})
	// dial connects to the TCP address it is given and says whether it
	// got through.
	sdk.AddTool(s, &sdk.Tool{Name: "dial"}, func(ctx context.Context, req *sdk.CallToolRequest, in struct {
		Addr string `json:"addr"`
	}) (*sdk.CallToolResult, any, error) {
		text := "connected"
		if c, err := net.DialTimeout("tcp", in.Addr, 5*time.Second); err != nil {
			text = "dial failed: " + err.Error()
		} else {
			c.Close()
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "crash"}, func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
		os.Exit(3)
		return nil, nil, nil
	})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		os.Exit(1)
	}
}

var jsonschemaObject = map[string]any{"type": "object", "properties": map[string]any{"password": map[string]any{"type": "string"}}}

// requireSandbox skips (or fails under CI=true) where sandboxes cannot run.
func requireSandbox(t testing.TB) {
	t.Helper()
	sandboxtest.RequireSandbox(t, func(ctx context.Context) error { return sandboxkit.Doctor(ctx, sandboxkit.DoctorOptions{}).Err() })
}

// nodeModules is where scripts/install-prereqs installs the npm servers.
func nodeModules(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CODUMENTOR_MCP_NODE_MODULES")
	if dir == "" {
		dir = "/var/cache/codumentor-prereqs/npm/node_modules"
	}
	for _, p := range []string{"/usr/bin/node", dir + "/@modelcontextprotocol/server-everything/dist/index.js", dir + "/@modelcontextprotocol/server-filesystem/dist/index.js"} {
		if _, err := os.Stat(p); err != nil {
			sandboxtest.SkipOrFail(t, "MCP servers are not installed (scripts/install-prereqs installs them): %v", err)
		}
	}
	return dir
}

func everything(nm string) ServerConfig {
	return ServerConfig{Name: "everything", Command: "node", Args: []string{nm + "/@modelcontextprotocol/server-everything/dist/index.js", "stdio"},
		ReadOnly: []string{nm}, AutoApprove: []string{"echo"}, Env: map[string]string{"MCP_GREETING": "configured-value"}}
}

func filesystem(nm string, root string) ServerConfig {
	return ServerConfig{Name: "fs", Command: "node", Args: []string{nm + "/@modelcontextprotocol/server-filesystem/dist/index.js", root},
		ReadOnly: []string{nm}, AutoApprove: []string{"read_text_file", "list_directory"}}
}

func newManager(t testing.TB, o Options) *Manager {
	t.Helper()
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func toolsByName(ctx context.Context, m *Manager) map[string]agentcore.Tool {
	out := map[string]agentcore.Tool{}
	for _, t := range m.Tools(ctx) {
		out[t.Spec().Name] = t
	}
	return out
}

// call runs a tool as the engine would: Prepare, then Run with the
// approved Action, for a gated tool.
func call(ctx context.Context, t agentcore.Tool, args any) (string, error) {
	b, _ := json.Marshal(args)
	c := &agentcore.Call{Name: t.Spec().Name, Arguments: b}
	if x, ok := t.(agentcore.ExecTool); ok {
		a, err := x.Prepare(ctx, c)
		if err != nil {
			return "", err
		}
		c.Action = &a
	}
	return t.Run(ctx, c)
}

func TestEverythingThroughSandbox(t *testing.T) {
	requireSandbox(t)
	nm := nodeModules(t)
	t.Setenv("CODUMENTOR_JWT_SECRET", "jwt-secret-of-the-server-0123456789abcdef")
	t.Setenv("CODUMENTOR_LLM_API_KEY", "llm-key-of-the-server-fedcba9876543210")
	ctx := t.Context()
	m := newManager(t, Options{Servers: []ServerConfig{everything(nm)}})
	// The server outlives the turn that started it.
	turn, endTurn := context.WithCancel(ctx)
	tools := toolsByName(turn, m)
	endTurn()
	echo, env := tools["mcp__everything__echo"], tools["mcp__everything__get-env"]
	if echo == nil || env == nil {
		t.Fatalf("tools = %v, want mcp__everything__echo and mcp__everything__get-env", slices.Sorted(mapsKeys(tools)))
	}

	// auto_approve decides which tools are gated; annotations do not
	// (get-env says readOnlyHint: true and is still gated).
	if _, gated := echo.(agentcore.ExecTool); gated {
		t.Error("echo is listed in auto_approve but needs approval")
	}
	x, gated := env.(agentcore.ExecTool)
	if !gated {
		t.Fatal("get-env is not in auto_approve but runs without approval")
	}
	a, err := x.Prepare(ctx, &agentcore.Call{Name: "mcp__everything__get-env", Arguments: json.RawMessage(`{}`)})
	if err != nil || a.Command != "mcp__everything__get-env {}" {
		t.Errorf("approval shows %q, %v; want the tool and its arguments", a.Command, err)
	}
	if _, err := env.Run(ctx, &agentcore.Call{Name: "mcp__everything__get-env"}); err == nil {
		t.Error("a gated tool ran without an approved action")
	}

	out, err := call(ctx, echo, map[string]string{"message": "hello through bwrap"})
	if err != nil || !strings.Contains(out, "hello through bwrap") {
		t.Fatalf("echo = %q, %v", out, err)
	}
	out, err = call(ctx, env, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	var vars map[string]string
	if err := json.Unmarshal([]byte(out), &vars); err != nil {
		t.Fatalf("get-env output is not the JSON environment: %v\n%s", err, out)
	}
	if vars["MCP_GREETING"] != "configured-value" || vars["HOME"] != "/home/sandbox" {
		t.Errorf("environment lacks the configured variable or the sandbox HOME: %v", vars)
	}
	for k, v := range vars {
		if strings.HasPrefix(k, "CODUMENTOR_") || strings.Contains(v, "jwt-secret-of-the-server") || strings.Contains(v, "llm-key-of-the-server") {
			t.Errorf("the server's environment reached the MCP server: %s=%s", k, v)
		}
	}
	st := m.Status()
	if len(st) != 1 || st[0].State != StateRunning || !st[0].Sandboxed || !slices.Contains(st[0].Tools, ToolStatus{Name: "echo", Offered: true}) || st[0].Restarts != 0 {
		t.Errorf("status = %+v", st)
	}
}

func mapsKeys(m map[string]agentcore.Tool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestFilesystemRootedAtSlash configures the filesystem server with / as
// its root: it still sees only the sandbox's root, not /root, the
// service user's home (~/.ssh) or the instance directory, and no process
// of the host (its own pid namespace: nothing to signal).
func TestFilesystemRootedAtSlash(t *testing.T) {
	requireSandbox(t)
	nm := nodeModules(t)
	ctx := t.Context()
	inst := t.TempDir()
	if err := os.WriteFile(filepath.Join(inst, "codumentor.db"), []byte("instance secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Options{Servers: []ServerConfig{filesystem(nm, "/")}})
	tools := toolsByName(ctx, m)
	read, list := tools["mcp__fs__read_text_file"], tools["mcp__fs__list_directory"]
	if read == nil || list == nil {
		t.Fatalf("tools = %v", slices.Sorted(mapsKeys(tools)))
	}
	// The tool works: a file the sandbox shows is read.
	if out, err := call(ctx, read, map[string]string{"path": "/etc/os-release"}); err != nil || !strings.Contains(out, "ID=") {
		t.Fatalf("read /etc/os-release = %q, %v", out, err)
	}
	for _, p := range []string{"/root", home, filepath.Join(home, ".ssh"), inst, filepath.Join(inst, "codumentor.db")} {
		if _, err := os.Stat(p); err != nil && p != filepath.Join(home, ".ssh") && p != "/root" {
			t.Fatalf("host path %s: %v", p, err)
		}
		if out, err := call(ctx, read, map[string]string{"path": p}); err == nil {
			t.Errorf("read %s through the sandbox: %q", p, out)
		}
		if out, err := call(ctx, list, map[string]string{"path": p}); err == nil && strings.TrimSpace(out) != "" {
			t.Errorf("listed %s through the sandbox: %q", p, out)
		}
	}

	// Every process it can see is its sandbox's: bwrap and node.
	out, err := call(ctx, list, map[string]string{"path": "/proc"})
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for line := range strings.Lines(out) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "[DIR] "); ok {
			if _, err := strconv.Atoi(name); err == nil {
				pids = append(pids, name)
			}
		}
	}
	if len(pids) == 0 || len(pids) > 4 {
		t.Fatalf("processes visible in the sandbox: %v (want only its own)", pids)
	}
	for _, pid := range pids {
		cmdline, err := call(ctx, read, map[string]string{"path": "/proc/" + pid + "/cmdline"})
		if err != nil {
			continue // it may have exited
		}
		if !strings.Contains(cmdline, "bwrap") && !strings.Contains(cmdline, "node") {
			t.Errorf("pid %s in the sandbox is %q: the host's processes are visible", pid, cmdline)
		}
	}
	if strconv.Itoa(os.Getpid()) != "1" && slices.Contains(pids, strconv.Itoa(os.Getpid())) {
		cmdline, _ := call(ctx, read, map[string]string{"path": "/proc/" + strconv.Itoa(os.Getpid()) + "/cmdline"})
		if strings.Contains(cmdline, filepath.Base(os.Args[0])) {
			t.Errorf("the server process is visible (and signalable) from the sandbox")
		}
	}
}

// TestSamplingAndElicitationRefused: a server asking the client for
// sampling (our model) or elicitation (the user) gets an error.
func TestSamplingAndElicitationRefused(t *testing.T) {
	requireSandbox(t)
	ctx := t.Context()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Options{Servers: []ServerConfig{{Name: "own", Command: exe, Env: map[string]string{envTestServer: "1"}, AutoApprove: []string{"ask", "ask-mrtr"}}}})
	tools := toolsByName(ctx, m)
	ask := tools["mcp__own__ask"]
	if ask == nil {
		t.Fatalf("tools = %v; status %+v", slices.Sorted(mapsKeys(tools)), m.Status())
	}
	out, err := call(ctx, ask, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "sampling refused=true") || !strings.Contains(out, "elicitation refused=true") {
		t.Errorf("the server's requests were not refused:\n%s", out)
	}
	out, err = call(ctx, tools["mcp__own__ask-mrtr"], map[string]string{})
	if err == nil || !strings.Contains(err.Error(), "refuses") || !strings.Contains(err.Error(), "sampling") || !strings.Contains(err.Error(), "elicitation") {
		t.Errorf("a result asking for sampling and elicitation: %q, %v; want the call refused", out, err)
	}
}

// TestNetwork: a server has no network (its own network namespace: the
// host's loopback listener is out of reach) unless its network is host
// or it runs unconfined (mode: off); its status says which.
func TestNetwork(t *testing.T) {
	requireSandbox(t)
	ctx := t.Context()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sandboxtest.ServeTCP(t, "127.0.0.1:0", nil))
	for _, tc := range []struct{ network, mode, want, shown string }{
		{"", "", "dial failed", NetworkNone},
		{NetworkNone, "", "dial failed", NetworkNone},
		{NetworkHost, "", "connected", NetworkHost},
		{"", ModeOff, "connected", NetworkHost},
	} {
		m := newManager(t, Options{Servers: []ServerConfig{{Name: "own", Command: exe, Network: tc.network, Mode: tc.mode, Env: map[string]string{envTestServer: "1"}, AutoApprove: []string{"dial"}}}})
		dial := toolsByName(ctx, m)["mcp__own__dial"]
		if dial == nil {
			t.Fatalf("network %q mode %q: no dial tool; status %+v", tc.network, tc.mode, m.Status())
		}
		if out, err := call(ctx, dial, map[string]string{"addr": addr}); err != nil || !strings.HasPrefix(out, tc.want) {
			t.Errorf("network %q mode %q: dial the host's listener = %q, %v; want %q", tc.network, tc.mode, out, err, tc.want)
		}
		if st := m.Status(); st[0].Network != tc.shown {
			t.Errorf("network %q mode %q: the status shows network %q; want %q", tc.network, tc.mode, st[0].Network, tc.shown)
		}
		m.Close()
	}
}

// TestCrashRestarts: a server that dies during a call fails that call
// with an error saying so, and is restarted with backoff.
func TestCrashRestarts(t *testing.T) {
	requireSandbox(t)
	ctx := t.Context()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Options{Servers: []ServerConfig{{Name: "own", Command: exe, Env: map[string]string{envTestServer: "1"}, AutoApprove: []string{"crash", "ask"}}}, MaxBackoff: 200 * time.Millisecond})
	tools := toolsByName(ctx, m)
	if tools["mcp__own__crash"] == nil {
		t.Fatalf("tools = %v; status %+v", slices.Sorted(mapsKeys(tools)), m.Status())
	}
	_, err = call(ctx, tools["mcp__own__crash"], map[string]string{})
	if err == nil || !strings.Contains(err.Error(), "stopped during the call") {
		t.Fatalf("call in flight when the server died: %v", err)
	}
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		st := m.Status()[0]
		if st.State != StateRunning || st.Restarts != 1 {
			return fmt.Errorf("not restarted: %+v", st)
		}
		if !strings.Contains(st.LastError, "exited") {
			t.Errorf("last error = %q, want why it stopped", st.LastError)
		}
		return nil
	})
	if out, err := call(ctx, toolsByName(ctx, m)["mcp__own__ask"], map[string]string{}); err != nil || !strings.Contains(out, "sampling") {
		t.Errorf("after the restart: %q, %v", out, err)
	}
}

// TestUnavailableSandboxFailsClosed: with a bwrap the sandbox refuses,
// the server does not start (a marker it would write stays absent) and
// its tool says why.
func TestUnavailableSandboxFailsClosed(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	old := sandboxtest.OldBwrap(t)
	ctx := t.Context()
	marker := filepath.Join(t.TempDir(), "ran")
	m := newManager(t, Options{Sandbox: sandboxkit.Settings{Bwrap: old}, Servers: []ServerConfig{{Name: "marker", Command: "/bin/sh", Args: []string{"-c", "touch " + marker}}}})
	tools := m.Tools(ctx)
	if len(tools) != 1 || tools[0].Spec().Name != "mcp__marker" || !strings.Contains(tools[0].Spec().Description, "sandbox unavailable") {
		t.Fatalf("tools = %v", tools)
	}
	_, err := tools[0].Run(ctx, &agentcore.Call{Name: "mcp__marker"})
	if !errors.Is(err, sandboxkit.ErrUnavailable) || !strings.Contains(err.Error(), "nothing was run") {
		t.Errorf("call = %v, want the sandbox's ErrUnavailable", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the server ran on the host: %v", err)
	}
	if st := m.Status()[0]; st.State != StateStopped || !strings.Contains(st.LastError, "unavailable") {
		t.Errorf("status = %+v", st)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c    ServerConfig
		want string
	}{
		{ServerConfig{Name: "ok", Command: "node"}, ""},
		{ServerConfig{Name: "Bad_Name", Command: "node"}, "name"},
		{ServerConfig{Name: "a", Command: " "}, "command"},
		{ServerConfig{Name: "a", Command: "x", Network: "lan"}, "network"},
		{ServerConfig{Name: "a", Command: "x", Mode: "yolo"}, "mode"},
		{ServerConfig{Name: "a", Command: "x", ReadOnly: []string{"rel"}}, "read_only"},
		{ServerConfig{Name: "a", Command: "x", Env: map[string]string{"A=B": "c"}}, "env"},
		{ServerConfig{Name: "a", Command: "x", EgressAllowlist: []string{"api.example.com:443", "*.example.org"}}, ""},
		{ServerConfig{Name: "a", Command: "x", EgressAllowlist: []string{"api.example.com"}, Network: NetworkHost}, "exclude each other"},
		{ServerConfig{Name: "a", Command: "x", EgressAllowlist: []string{"api.example.com"}, Mode: ModeOff}, "mode: sandboxed"},
		{ServerConfig{Name: "a", Command: "x", EgressAllowlist: []string{"http://api.example.com/"}}, "egress_allowlist"},
	} {
		err := tc.c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
	if _, err := New(Options{Servers: []ServerConfig{{Name: "a", Command: "x"}, {Name: "a", Command: "y"}}}); err == nil {
		t.Error("two servers with one name accepted")
	}
}
