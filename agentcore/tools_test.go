package agentcore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func TestBackgroundJobs(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{
			call("bg", "shell", map[string]any{"command": "echo bg-out; exec sleep 30", "background": true}),
			call("out", "shell_output", map[string]any{"job": 1, "wait": 120}),
			call("kill", "shell_kill", map[string]any{"job": 1}),
			call("gone", "shell_output", map[string]any{"job": 99}),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, alwaysAllow)
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	tests := []struct{ id, want string }{
		{"bg", "started background job 1"},
		{"out", "[job 1 running; 7 bytes of output]\nbg-out"},
		{"kill", "job 1 exited with status 137"},
		{"gone", "no such background job"},
	}
	for _, tt := range tests {
		if !strings.Contains(res[tt.id], tt.want) {
			t.Errorf("%s: %q lacks %q", tt.id, res[tt.id], tt.want)
		}
	}
}

// TestJobWaitHeadAndTail: shell_output's wait returns at its bound while
// a job prints nothing, at once when it prints, and once it ends; the
// model then sees the head and the real last line of 2 MB of output.
func TestJobWaitHeadAndTail(t *testing.T) {
	const job = `echo $$ > /tmp/jobpid; while [ ! -e /tmp/go ]; do sleep 0.05; done; seq 1 300000; echo LAST-LINE`
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{
			call("bg", "shell", map[string]any{"command": job, "background": true}),
			call("quiet", "shell_output", map[string]any{"job": 1, "wait": 1}),
			shellCall("go", "touch /tmp/go"),
			call("more", "shell_output", map[string]any{"job": 1, "wait": 120}),
			shellCall("ended", "while kill -0 $(cat /tmp/jobpid) 2>/dev/null; do sleep 0.05; done"),
			call("end", "shell_output", map[string]any{"job": 1, "wait": 120}),
			call("page", "read_file", map[string]any{"path": ".codumentor/output/bg.txt", "offset": 300000}),
			call("toolong", "shell_output", map[string]any{"job": 1, "wait": 601}),
			call("timeout", "shell", map[string]any{"command": "true", "background": true, "timeout": 5}),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, alwaysAllow)
	start := time.Now()
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	if !strings.HasPrefix(res["quiet"], "[job 1 running; 0 bytes of output]") {
		t.Errorf("quiet: %q", res["quiet"])
	}
	if !strings.HasPrefix(res["more"], "[job 1 ") || !strings.Contains(res["more"], "\n1\n2\n") {
		t.Errorf("more: %.200q, want the job's first lines", res["more"])
	}
	end := res["end"]
	if !strings.HasPrefix(end, "[job 1 exited with status 0; 1,988,905 bytes of output]\n") || !strings.Contains(end, "]\n1\n2\n3\n") || !strings.HasSuffix(end, "\n299999\n300000\nLAST-LINE\n") || !strings.Contains(end, " bytes elided …]") {
		t.Errorf("end: head %.200q … tail %q", end, end[max(0, len(end)-200):])
	}
	if !strings.Contains(end, " bytes elided …]\n[whole output: read_file path \".codumentor/output/bg.txt\"]\n") {
		t.Errorf("end does not name the kept output: %.300q", end[strings.Index(end, "[…"):])
	}
	for id, want := range map[string]string{
		"toolong": "wait is in seconds, from 0 to 600",
		"timeout": "timeout is for foreground commands",
		"page":    "lines 300000–300001 of 300,001 (bytes 1,988,888–1,988,905 of 1,988,905)\n300000\t300000\n300001\tLAST-LINE\n",
	} {
		if !strings.Contains(res[id], want) {
			t.Errorf("%s: %q, want %q", id, res[id], want)
		}
	}
	if d := time.Since(start); d > 100*time.Second {
		t.Errorf("the turn took %v: a wait did not return when it should have", d)
	}
}

// TestShellTimeout: a per-call timeout stops the command; one above the
// server's maximum is refused before it runs.
func TestShellTimeout(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{
			call("short", "shell", map[string]any{"command": "echo started; exec sleep 600", "timeout": 1}),
			call("over", "shell", map[string]any{"command": "echo ran > over.txt", "timeout": 61}),
			call("fine", "shell", map[string]any{"command": "echo fine", "timeout": 60}),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) { c.ShellAlwaysAllow, c.MaxCommandTimeout = true, time.Minute })
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	if !hasAll(res["short"], "started\n", "[killed: it ran longer than its timeout of 1s;") {
		t.Errorf("short: %q, want it stopped by its 1 s timeout", res["short"])
	}
	if !strings.Contains(res["over"], "more than the server's maximum of 60 s") {
		t.Errorf("over: %q", res["over"])
	}
	if _, err := os.Lstat(filepath.Join(h.upper("c"), "over.txt")); !os.IsNotExist(err) {
		t.Errorf("the refused command ran: %v", err)
	}
	if !strings.Contains(res["fine"], "fine\n[exit status 0]") {
		t.Errorf("fine: %q", res["fine"])
	}
}

func TestSessionRestartsWhenIdle(t *testing.T) {
	// Each command prints when its parent, the session's supervisor,
	// started (clock ticks since boot): another value is another sandbox.
	const supervisorStart = "sed 's/.*) //' /proc/$PPID/stat | cut -d' ' -f20"
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("a", "echo one > one.txt; "+supervisorStart)}},
		{Text: "first"},
		{ToolCalls: []agentcore.ToolCall{shellCall("b", "cat one.txt; "+supervisorStart)}},
		{Text: "second"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) { c.ShellAlwaysAllow, c.SessionIdle = true, 200*time.Millisecond })
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	first := ticks.FindString(h.toolResults("c")["a"])
	if first == "" {
		t.Fatalf("the first command's result %q has no start time", h.toolResults("c")["a"])
	}
	// The sandbox closes when idle: its supervisor ends.
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		if p := sandboxedSince(first); len(p) > 0 {
			cmd, _ := os.ReadFile("/proc/" + p[0] + "/cmdline")
			return fmt.Errorf("the idle sandbox still runs: PID %v (%q)", p, cmd)
		}
		return nil
	})
	if err := h.wait(h.start("c", "again")); err != nil {
		t.Fatal(err)
	}
	got := h.toolResults("c")["b"]
	if !strings.Contains(got, "one\n") {
		t.Errorf("a new sandbox over the same layer sees %q", got)
	}
	if second := ticks.FindString(got); second == "" || second == first {
		t.Errorf("the second command's sandbox started at %q, the first's at %q: want a new sandbox", second, first)
	}
}

var ticks = regexp.MustCompile(`(?m)^[0-9]+$`)

// sandboxedSince returns the host PIDs of the processes in a PID
// namespace below this one that started at start (clock ticks since
// boot, field 22 of /proc/PID/stat).
func sandboxedSince(start string) []string {
	var found []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		i := strings.LastIndex(string(b), ") ") // after the command's name
		if f := strings.Fields(string(b[i+1:])); i < 0 || len(f) < 20 || f[19] != start {
			continue
		}
		dir := filepath.Dir(p)
		status, _ := os.ReadFile(filepath.Join(dir, "status"))
		for line := range strings.Lines(string(status)) {
			if ns, ok := strings.CutPrefix(line, "NSpid:"); ok && len(strings.Fields(ns)) > 1 {
				found = append(found, filepath.Base(dir))
			}
		}
	}
	return found
}

// deployTool is an integration's executing tool.
type deployTool struct{ runs atomic.Int32 }

func (d *deployTool) Spec() agentcore.ToolSpec {
	return agentcore.ToolSpec{Name: "deploy", Description: "deploy", Parameters: []byte(`{"type":"object"}`)}
}

func (d *deployTool) Prepare(ctx context.Context, c *agentcore.Call) (agentcore.Action, error) {
	var a struct{ Target string }
	if err := c.Args(&a); err != nil {
		return agentcore.Action{}, err
	}
	return agentcore.Action{Command: "deploy " + a.Target}, nil
}

func (d *deployTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	d.runs.Add(1)
	return "deployed: " + c.Action.Command, nil
}

// echoTool executes nothing: no approval.
type echoTool struct{}

func (echoTool) Spec() agentcore.ToolSpec {
	return agentcore.ToolSpec{Name: "echo", Parameters: []byte(`{"type":"object"}`)}
}

func (echoTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	return "echo " + string(c.Arguments) + " for " + c.User, nil
}

func TestRegister(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{
			call("e", "echo", map[string]string{"x": "y"}),
			call("d1", "deploy", map[string]string{"target": "staging"}),
			call("d2", "deploy", map[string]string{"target": "prod"}),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, nil)
	d := &deployTool{}
	for _, tool := range []agentcore.Tool{d, echoTool{}} {
		if err := h.e.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.e.Register(echoTool{}); !errors.Is(err, agentcore.ErrToolExists) {
		t.Errorf("second Register = %v, want ErrToolExists", err)
	}
	turn := h.start("c", "go")
	a, seq := h.pendingApproval("c", 0)
	if a.Tool != "deploy" || a.Command != "deploy staging" {
		t.Errorf("approval %+v", a)
	}
	h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionApprove)
	a, _ = h.pendingApproval("c", seq)
	if a.Command != "deploy prod" {
		t.Errorf("approval %+v", a)
	}
	h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionDeny)
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	if res["e"] != `echo {"x":"y"} for alice` || res["d1"] != "deployed: deploy staging" || !strings.Contains(res["d2"], "denied") {
		t.Errorf("results %q", res)
	}
	if n := d.runs.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// echoApprover approves echo commands and leaves the rest to the user.
type echoApprover struct{}

func (echoApprover) Review(ctx context.Context, a agentcore.Approval) (agentcore.Verdict, error) {
	if strings.HasPrefix(a.Command, "echo ") {
		return agentcore.Verdict{Decision: agentcore.DecisionApprove, Rule: "echo"}, nil
	}
	return agentcore.Verdict{ProposedRule: []string{"touch"}}, nil
}

func TestApprover(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("a", "echo auto"), shellCall("b", "touch asked")}},
		{Text: "done"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) { c.Approver = echoApprover{} })
	turn := h.start("c", "go")
	// The approver's own decision asks nobody: the first pending
	// approval is the one it left to the user, with its proposal.
	a, _ := h.pendingApproval("c", 0)
	if a.Command != "touch asked" || !slices.Equal(a.ProposedRule, []string{"touch"}) {
		t.Fatalf("pending %+v", a)
	}
	h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionApprove)
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	aps, _ := h.store.Approvals(t.Context(), "c")
	if len(aps) != 2 || aps[0].DecidedBy != "approver" || aps[0].Rule != "echo" || aps[1].DecidedBy != "alice" || aps[1].Rule != "" {
		t.Errorf("approvals %+v", aps)
	}
	var decided []agentcore.Approval
	for _, ev := range h.store.AllEvents("c") {
		if ev.Type == agentcore.EventApprovalDecided {
			var d agentcore.Approval
			json.Unmarshal(ev.Data, &d)
			decided = append(decided, d)
		}
	}
	if len(decided) != 2 || decided[0].Command != "echo auto" || decided[0].Rule != "echo" {
		t.Errorf("approval_decided events %+v", decided)
	}
	if got := h.toolResults("c")["a"]; !strings.Contains(got, "auto") {
		t.Errorf("a: %q", got)
	}
}

// toolSource offers tools learned at run time; shell clashes with the
// built-in one.
type toolSource struct {
	calls atomic.Int32
	tools []agentcore.Tool
}

func (s *toolSource) Tools(ctx context.Context) []agentcore.Tool {
	s.calls.Add(1)
	return s.tools
}

type fakeShell struct{}

func (fakeShell) Spec() agentcore.ToolSpec {
	return agentcore.ToolSpec{Name: "shell", Parameters: []byte(`{"type":"object"}`)}
}

func (fakeShell) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	return "the source's shell ran", nil
}

// TestAddSource: a source's tools are offered and run like registered
// ones (an ExecTool behind the approval gate); a name taken by a
// registered tool stays the registered tool's.
func TestAddSource(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{
			call("e", "echo", map[string]string{"x": "y"}),
			call("d", "deploy", map[string]string{"target": "staging"}),
			shellCall("sh", "echo built-in"),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, alwaysAllow)
	d := &deployTool{}
	src := &toolSource{tools: []agentcore.Tool{echoTool{}, d, fakeShell{}}}
	h.e.AddSource(src)
	turn := h.start("c", "go")
	a, _ := h.pendingApproval("c", 0)
	if a.Tool != "deploy" || a.Command != "deploy staging" {
		t.Errorf("approval %+v", a)
	}
	h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionApprove)
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	if res["e"] != `echo {"x":"y"} for alice` || res["d"] != "deployed: deploy staging" || !strings.Contains(res["sh"], "built-in") {
		t.Errorf("results %q", res)
	}
	if src.calls.Load() == 0 {
		t.Error("the source was never asked for its tools")
	}
}
