package externalagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/agentcoretest"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/integrations/externalagent"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/egress/egresstest"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func TestMain(m *testing.M) {
	sandboxkit.Main()
	os.Exit(m.Run())
}

// buildAgent builds testdata/agentcli, the stand-in agent CLI.
func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentcli")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/codumentor/codumentor/testdata/agentcli").CombinedOutput()
	if err != nil {
		t.Fatalf("building agentcli: %v\n%s", err, out)
	}
	return bin
}

type lowerDir string

func (l lowerDir) Lower(ctx context.Context, user, conversation string) (string, error) {
	return string(l), nil
}

// failedSetup is a workspace whose project setup failed.
type failedSetup struct{ lowerDir }

func (failedSetup) Layers(ctx context.Context, user, conversation string) ([]string, error) {
	return nil, errors.New("execution tools are disabled in this conversation: the setup failed")
}

// workspacesOf gives newEnv's workspaces (lowerDir unless a test says).
var workspacesOf = func(lower string) agentcore.Workspaces { return lowerDir(lower) }

type approveAll struct{}

func (approveAll) Review(ctx context.Context, a agentcore.Approval) (agentcore.Verdict, error) {
	return agentcore.Verdict{Decision: agentcore.DecisionApprove}, nil
}

// env is one run of the external_agent tool through a real Engine with
// the scripted model.
type env struct {
	t       *testing.T
	e       *agentcore.Engine
	store   *agentcoretest.MemStore
	dir     string
	lower   string
	hostF   string
	dials   *atomic.Int32
	addr    string
	logs    *syncWriter
	toolErr error
}

func newEnv(t *testing.T, agents []externalagent.Config, isolation, allow bool, steps ...llmtest.Step) *env {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { overlay.RemoveAll(dir) })
	lower := filepath.Join(dir, "lower")
	os.MkdirAll(lower, 0o755)
	if err := os.WriteFile(filepath.Join(lower, "README.md"), []byte("# project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostF := filepath.Join(dir, "host-secret.txt")
	os.WriteFile(hostF, []byte("host-secret-value"), 0o600)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dials := &atomic.Int32{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	home, _ := os.UserHomeDir()
	for i := range agents {
		agents[i].Env = map[string]string{"AGENTCLI_DIAL": ln.Addr().String(), "AGENTCLI_HOST_FILE": hostF, "AGENTCLI_HOST_HOME": home,
			"AGENTCLI_CONNECT": fmt.Sprintf("allowed.test:%d", ln.Addr().(*net.TCPAddr).Port)}
	}
	layers, err := overlay.Open(filepath.Join(dir, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	store := agentcoretest.NewMemStore()
	logs := &syncWriter{b: &strings.Builder{}}
	log := slog.New(slog.NewTextHandler(logs, nil))
	e, err := agentcore.New(agentcore.Config{
		LLM: (&llmtest.Script{Steps: steps}).LLM(), Store: store, Workspaces: workspacesOf(lower), Layers: layers,
		Approver: approveAll{}, Logger: log, NoWorkspaceTools: !isolation,
		Programs: externalagent.Programs(agents, isolation),
		// Test only: allowed.test is the listener above.
		Sandbox: sandboxkit.Settings{EgressResolver: egresstest.AllowLoopback(egresstest.Resolver{"allowed.test": {netip.MustParseAddr("127.0.0.1")}})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ev := &env{t: t, e: e, store: store, dir: dir, lower: lower, hostF: hostF, dials: dials, addr: ln.Addr().String(), logs: logs}
	tool, err := externalagent.New(externalagent.Options{Agents: agents, Isolation: isolation, AllowUnsandboxed: allow, Engine: e, Logger: log})
	if err != nil {
		ev.toolErr = err
		return ev
	}
	if err := e.Register(tool); err != nil {
		t.Fatal(err)
	}
	return ev
}

type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// run runs one turn of conv and returns its tool output, the streamed
// deltas, and the approval's command.
func (ev *env) run(conv string) (output, streamed, approved string) {
	t := ev.t
	t.Helper()
	turn, err := ev.e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: conv, Content: "delegate it"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := turn.Wait(ctx); err != nil {
		t.Fatalf("turn: %v", err)
	}
	for _, e := range ev.store.AllEvents(conv) {
		var d map[string]any
		json.Unmarshal(e.Data, &d)
		switch e.Type {
		case agentcore.EventToolOutput:
			output, _ = d["output"].(string)
		case agentcore.EventToolOutputDelta:
			s, _ := d["text"].(string)
			streamed += s
		case agentcore.EventApprovalPending, agentcore.EventApprovalDecided:
			// An Approver that decides at once emits only the decision.
			approved, _ = d["command"].(string)
		}
	}
	return output, streamed, approved
}

func agentCall(task string) llmtest.Step {
	b, _ := json.Marshal(map[string]string{"agent": "fake", "task": task})
	return llmtest.Step{ToolCalls: []agentcore.ToolCall{{Name: "external_agent", Arguments: string(b)}}}
}

func requireSandbox(t *testing.T) {
	t.Helper()
	sandboxtest.RequireSandbox(t, func(ctx context.Context) error { return sandboxkit.Doctor(ctx, sandboxkit.DoctorOptions{}).Err() })
}

func has(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// The agent CLI runs in the conversation's sandbox: its edits land in the
// conversation's upper layer (never the project tree), it reaches no
// network, no ~/.ssh and no host file, and its output streams as events.
// With an egress allow-list it reaches the names listed, only through
// the egress proxy (the test resolver maps allowed.test to the host
// listener); its sandbox still has no network of its own.
func TestTier1(t *testing.T) {
	requireSandbox(t)
	bin := buildAgent(t)
	for _, tc := range []struct {
		name      string
		allowlist []string
		network   string
	}{
		{"no network", nil, "network: blocked"},
		{"egress allow-list", []string{"allowed.test"}, "proxy: reached allowed.test:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agents := []externalagent.Config{{Name: "fake", Command: bin, EgressAllowlist: tc.allowlist}}
			ev := newEnv(t, agents, true, false, agentCall("add a marker file"), llmtest.Step{Expect: "report: done", Text: "Done."})
			if ev.toolErr != nil {
				t.Fatal(ev.toolErr)
			}
			out, streamed, approved := ev.run("conv1")
			if !has(out, "task: add a marker file", "cwd: /workspace", "edit: wrote AGENT_DONE.txt", "network: blocked", tc.network, "host file: unreadable", "report: done", "[exit status 0]") ||
				strings.Contains(out, "READABLE") || strings.Contains(out, "host-secret-value") {
				t.Fatalf("agent output:\n%s", out)
			}
			if strings.Count(out, "ssh ") != 2 || strings.Count(out, ": unreadable") != 3 {
				t.Fatalf("want both .ssh dirs and the host file unreadable:\n%s", out)
			}
			if !strings.Contains(streamed, "report: done") {
				t.Errorf("streamed output: %q", streamed)
			}
			if !has(approved, "external agent fake (sandboxed", "'add a marker file'") {
				t.Errorf("approval command: %q", approved)
			}
			if got := ev.dials.Load(); (got > 0) != (tc.allowlist != nil) {
				t.Errorf("%d connections reached the host listener", got)
			}
			// The edits are in the upper layer; the project tree is untouched.
			upper := filepath.Join(ev.dir, "layers", "conv1", "upper")
			if b, err := os.ReadFile(filepath.Join(upper, "AGENT_DONE.txt")); err != nil || string(b) != "task: add a marker file\n" {
				t.Errorf("AGENT_DONE.txt in the upper layer: %q, %v", b, err)
			}
			if b, _ := os.ReadFile(filepath.Join(upper, "README.md")); !strings.Contains(string(b), "edited by agentcli") {
				t.Errorf("README.md in the upper layer: %q", b)
			}
			if b, _ := os.ReadFile(filepath.Join(ev.lower, "README.md")); string(b) != "# project\n" {
				t.Errorf("the project tree was written: %q", b)
			}
			if _, err := os.Stat(filepath.Join(ev.lower, "AGENT_DONE.txt")); err == nil {
				t.Error("the project tree was written")
			}
			if strings.Contains(ev.logs.String(), "network enabled") {
				t.Errorf("\"network enabled\" in the log:\n%s", ev.logs)
			}
			// Every attempt through the proxy is an event of the call.
			var egressEvents []string
			evs, _ := ev.store.Events(t.Context(), "conv1", 0, 10000)
			for _, e := range evs {
				if e.Type == agentcore.EventEgress {
					egressEvents = append(egressEvents, string(e.Data))
				}
			}
			if tc.allowlist != nil && (len(egressEvents) != 1 || !has(egressEvents[0], `"verdict":"allowed"`, `"host":"allowed.test"`, `"name":"external_agent"`)) {
				t.Errorf("egress events: %v", egressEvents)
			}
		})
	}
}

// A run longer than the agent's timeout is killed, and says so.
func TestTier1Timeout(t *testing.T) {
	requireSandbox(t)
	bin := buildAgent(t)
	agents := []externalagent.Config{{Name: "fake", Command: bin, Args: []string{"-sleep", "1m"}, Timeout: 2 * time.Second}}
	ev := newEnv(t, agents, true, false, agentCall("slow"), llmtest.Step{Expect: "report: done", Text: "Done."})
	start := time.Now()
	out, _, _ := ev.run("conv1")
	if !has(out, "report: done", "killed") || time.Since(start) > 45*time.Second {
		t.Fatalf("after %v:\n%s", time.Since(start), out)
	}
}

// Tier 0 while isolation is enabled needs allow_unsandboxed_external_agents;
// with it (or without isolation) the agent runs on the host, with a
// warning at each start.
func TestTier0(t *testing.T) {
	bin := buildAgent(t)
	agents := func() []externalagent.Config {
		return []externalagent.Config{{Name: "fake", Command: bin, SandboxTier: externalagent.Tier0}}
	}
	ev := newEnv(t, agents(), true, false)
	if !errors.Is(ev.toolErr, externalagent.ErrUnsandboxed) || !strings.Contains(ev.toolErr.Error(), "allow_unsandboxed_external_agents") {
		t.Fatalf("tier 0 with isolation: %v", ev.toolErr)
	}
	for _, isolation := range []bool{true, false} {
		ev := newEnv(t, agents(), isolation, isolation, agentCall("host work"), llmtest.Step{Expect: "report: done", Text: "Done."})
		if ev.toolErr != nil {
			t.Fatal(ev.toolErr)
		}
		out, _, approved := ev.run("conv1")
		if !has(out, "cwd: ", "host file: READ", "[exit status 0]") || strings.Contains(out, "cwd: "+ev.lower) || !strings.Contains(approved, "UNSANDBOXED") {
			t.Fatalf("isolation %v: approval %q, output:\n%s", isolation, approved, out)
		}
		if strings.Count(ev.logs.String(), "UNSANDBOXED") < 2 {
			t.Errorf("want a warning at start and at the run:\n%s", ev.logs)
		}
	}
}

// A failed project setup disables a tier-0 agent too: nothing runs on
// the host.
func TestTier0FailedSetup(t *testing.T) {
	bin := buildAgent(t)
	workspacesOf = func(lower string) agentcore.Workspaces { return failedSetup{lowerDir(lower)} }
	defer func() { workspacesOf = func(lower string) agentcore.Workspaces { return lowerDir(lower) } }()
	agents := []externalagent.Config{{Name: "fake", Command: bin, SandboxTier: externalagent.Tier0}}
	ev := newEnv(t, agents, false, false, agentCall("host work"), llmtest.Step{Expect: "the setup failed", Text: "Disabled."})
	if ev.toolErr != nil {
		t.Fatal(ev.toolErr)
	}
	out, _, _ := ev.run("conv1")
	if strings.Contains(out, "cwd: ") {
		t.Fatalf("the agent ran:\n%s", out)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  externalagent.Config
		want string
	}{
		{externalagent.Config{Name: "a b", Command: "x"}, "external_agents[0].name"},
		{externalagent.Config{Name: "a", Command: "rel/x"}, "external_agents[0].command"},
		{externalagent.Config{Name: "a", Command: "x", SandboxTier: "2"}, "external_agents[0].sandbox_tier"},
		{externalagent.Config{Name: "a", Command: "x", Env: map[string]string{"A=B": "c"}}, "external_agents[0].env"},
	} {
		if err := externalagent.Validate([]externalagent.Config{tc.cfg}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v; want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if err := externalagent.Validate([]externalagent.Config{{Name: "a", Command: "/usr/bin/true", SandboxTier: "1"}}); err != nil {
		t.Error(err)
	}
}

// tier0Agent edits, adds, deletes, re-types and chmods files in its
// working directory, and plants symlinks out of the tree (to a host
// directory and a host file) and a FIFO.
const tier0Agent = `#!/bin/sh
set -e
echo "cwd: $(pwd)"
printf 'edited by the agent\n' >> README.md
mkdir -p sub/deeper
echo new > sub/deeper/new.txt
rm gone.txt
rm -rf docs
ln -s "$(dirname "$AGENTCLI_HOST_FILE")/outside" docs
rm plain.txt
ln -s "$AGENTCLI_HOST_FILE" plain.txt
rm -rf data
mkdir data
echo fresh > data/fresh.txt
mkdir conf
echo new > conf/new.txt
chmod 755 tool.sh
mkfifo fifo
echo "report: done"
`

// A tier-0 agent works on a private copy of the conversation's
// workspace: the shared project tree is unchanged, another conversation
// on it sees nothing, and the changes come back into the conversation's
// upper layer, where its sandbox (real overlayfs) and its diff show
// them. The agent's symlinks come back as symlinks: nothing is read or
// written through them, and a FIFO does not come back.
func TestTier0PrivateCopy(t *testing.T) {
	requireSandbox(t)
	script := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(script, []byte(tier0Agent), 0o755); err != nil {
		t.Fatal(err)
	}
	agents := []externalagent.Config{{Name: "fake", Command: script, SandboxTier: externalagent.Tier0}}
	check := `cat README.md; ls -A conf data; test -e gone.txt || echo gone-ok; readlink docs plain.txt; cat sub/deeper/new.txt; test -x tool.sh && echo exec-ok; test -e fifo || echo no-fifo; cat keep.txt`
	ev := newEnv(t, agents, true, true,
		shellCall("rm -rf conf"), // the conversation deleted conf before: a whiteout over the project's
		agentCall("rework the tree"),
		shellCall(check),
		llmtest.Step{Text: "Done."})
	if ev.toolErr != nil {
		t.Fatal(ev.toolErr)
	}
	project := map[string]string{
		"gone.txt": "gone\n", "docs/a.md": "docs\n", "plain.txt": "plain\n", "data/old.txt": "old\n",
		"conf/c.txt": "c\n", "keep.txt": "kept\n", "tool.sh": "echo tool\n",
	}
	for name, body := range project {
		p := filepath.Join(ev.lower, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(ev.dir, "outside")
	os.Mkdir(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "outside.txt"), []byte("outside\n"), 0o644)

	turn, err := ev.e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: "conv1", Content: "rework it"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := turn.Wait(ctx); err != nil {
		t.Fatalf("turn: %v", err)
	}
	var outputs []string
	for _, e := range ev.store.AllEvents("conv1") {
		if e.Type == agentcore.EventToolOutput {
			var d map[string]any
			json.Unmarshal(e.Data, &d)
			s, _ := d["output"].(string)
			outputs = append(outputs, s)
		}
	}
	if len(outputs) != 3 {
		t.Fatalf("tool outputs: %q", outputs)
	}
	if out := outputs[1]; !has(out, "cwd: ", "report: done", "[exit status 0]") || strings.Contains(out, "cwd: "+ev.lower) {
		t.Fatalf("agent output:\n%s", out)
	}
	// The conversation's sandbox sees the agent's tree.
	want := []string{"# project\nedited by the agent\n", "conf:\nnew.txt\n", "data:\nfresh.txt\n", "gone-ok\n",
		outside + "\n" + ev.hostF + "\n", "new\n", "exec-ok\n", "no-fifo\n", "kept\n"}
	if out := outputs[2]; !has(out, want...) || strings.Contains(out, "c.txt") || strings.Contains(out, "old.txt") {
		t.Fatalf("the conversation's sandbox after the agent:\n%s", out)
	}

	// The shared project tree and the host are as they were.
	for name, body := range project {
		if b, err := os.ReadFile(filepath.Join(ev.lower, name)); err != nil || string(b) != body {
			t.Errorf("project %s: %q %v", name, b, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ev.lower, "README.md")); string(b) != "# project\n" {
		t.Errorf("project README.md: %q", b)
	}
	if ents, _ := os.ReadDir(ev.lower); len(ents) != 8 {
		t.Errorf("project tree: %v", ents)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("the directory a symlink pointed to was written: %v", ents)
	}
	if b, _ := os.ReadFile(ev.hostF); string(b) != "host-secret-value" {
		t.Errorf("the host file a symlink pointed to: %q", b)
	}
	upper := filepath.Join(ev.dir, "layers", "conv1", "upper")
	for _, name := range []string{"docs", "plain.txt"} {
		if fi, err := os.Lstat(filepath.Join(upper, name)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s in the upper layer: %v %v, want the agent's symlink", name, fi, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(upper, "keep.txt")); err == nil {
		t.Error("an unchanged file was copied into the upper layer")
	}
	ents, _ := os.ReadDir(filepath.Join(ev.dir, "layers", "conv1"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "hostcopy-") {
			t.Errorf("the agent's copy was left: %v", ents)
		}
	}

	// Another conversation on the same project sees none of it.
	if _, err := ev.e.ReadWorkspace(t.Context(), "alice", "conv2", "sub/deeper/new.txt", ""); err == nil {
		t.Error("conversation 2 sees the agent's new file")
	}
	if f, err := ev.e.ReadWorkspace(t.Context(), "alice", "conv2", "README.md", ""); err != nil || string(f.Content) != "# project\n" {
		t.Errorf("conversation 2's README.md: %v %v", f, err)
	}

	// The first conversation's diff shows the agent's changes.
	var diff strings.Builder
	if err := overlay.WritePatch(&diff, ev.lower, upper); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"+edited by the agent", "b/sub/deeper/new.txt", "a/gone.txt", "a/docs/a.md", "a/data/old.txt", "b/data/fresh.txt",
		"a/conf/c.txt", "b/conf/new.txt", "new mode 100755", "+" + ev.hostF} {
		if !strings.Contains(diff.String(), w) {
			t.Errorf("the diff lacks %q:\n%s", w, diff.String())
			break
		}
	}
	if strings.Contains(diff.String(), "host-secret-value") || strings.Contains(diff.String(), "outside.txt") || strings.Contains(diff.String(), "fifo") {
		t.Errorf("the diff went through a symlink or has the FIFO:\n%s", diff.String())
	}
}

func shellCall(cmd string) llmtest.Step {
	b, _ := json.Marshal(map[string]string{"command": cmd})
	return llmtest.Step{ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: string(b)}}}
}
