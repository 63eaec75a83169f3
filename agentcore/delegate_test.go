package agentcore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit"
)

// recApprover approves everything and keeps what it saw.
type recApprover struct {
	mu   sync.Mutex
	seen []agentcore.Approval
}

func (r *recApprover) Review(ctx context.Context, a agentcore.Approval) (agentcore.Verdict, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, a)
	return agentcore.Verdict{Decision: agentcore.DecisionApprove}, nil
}

// outputs are conv's tool outputs by call ID.
func outputs(h *harness, conv string) map[string]string {
	out := map[string]string{}
	for _, ev := range h.store.AllEvents(conv) {
		if ev.Type == agentcore.EventToolOutput {
			var d map[string]string
			json.Unmarshal(ev.Data, &d)
			out[d["id"]] = d["output"]
		}
	}
	return out
}

// outputOf is the output of the first call of a subagent (the one whose
// call ID ends in suffix) among outs.
func outputOf(t *testing.T, outs map[string]string, suffix string) string {
	t.Helper()
	for id, o := range outs {
		if strings.HasPrefix(id, "sub_") && strings.HasSuffix(id, suffix) {
			return o
		}
	}
	t.Fatalf("no subagent call %s in %v", suffix, outs)
	return ""
}

// A shared subagent has its own history and works in its parent's
// workspace; its approvals name it.
func TestDelegateShared(t *testing.T) {
	rec := &recApprover{}
	s := &llmtest.Script{
		Steps: []llmtest.Step{
			{ToolCalls: []agentcore.ToolCall{call("d1", "delegate", map[string]string{"task": "SUBTASK-S: write s.txt"})}},
			{Expect: "Summary:\nwrote s.txt", Text: "The subagent wrote it."},
		},
		Branches: []llmtest.Branch{{Match: "SUBTASK-S", Steps: []llmtest.Step{
			{ToolCalls: []agentcore.ToolCall{shellCall("c1", "echo sub > s.txt")}},
			{Expect: "exit status 0", Text: "wrote s.txt"},
		}}},
	}
	h := newHarness(t, s, func(c *agentcore.Config) { c.Subagents, c.Approver = agentcore.SubagentsShared, rec })
	if err := h.wait(h.start("c", "please delegate")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(h.upper("c"), "s.txt")); err != nil || string(b) != "sub\n" {
		t.Fatalf("s.txt in the parent's workspace: %q, %v", b, err)
	}
	if len(rec.seen) != 1 || !strings.HasPrefix(rec.seen[0].Agent, "sub_") || rec.seen[0].ToolCallID != rec.seen[0].Agent+".c1" {
		t.Fatalf("approvals: %+v", rec.seen)
	}
	// The parent's history holds only its own messages.
	msgs, _ := h.store.Messages(t.Context(), "c")
	if len(msgs) != 4 || strings.Contains(msgs[1].Content+msgs[2].Content, "echo sub") && msgs[2].Role != agentcore.RoleTool {
		t.Fatalf("parent history: %+v", msgs)
	}
	if types := strings.Join(h.types("c"), " "); !strings.Contains(types, "subagent_started") || !strings.Contains(types, "subagent_finished") {
		t.Fatalf("events: %s", types)
	}
	// Every request has one system message, first: a subagent's joins the
	// operator's prompt (naming its own tools) with its own.
	subs := 0
	for i, req := range h.llm.requests() {
		systems := 0
		for _, m := range req.Messages {
			if m.Role == agentcore.RoleSystem {
				systems++
			}
		}
		sys := req.Messages[0].Content
		if systems != 1 || req.Messages[0].Role != agentcore.RoleSystem || !strings.Contains(sys, "You are Codumentor") {
			t.Errorf("request %d: %d system messages, the first %q", i, systems, req.Messages[0].Role)
		}
		if strings.Contains(sys, "You are a subagent") {
			subs++
			if _, tools, _ := strings.Cut(sys, "Tools: "); strings.Contains(strings.SplitN(tools, ".", 2)[0], "delegate") {
				t.Errorf("a subagent's prompt names delegate, which it does not have:\n%s", sys)
			}
		}
	}
	if subs != 2 {
		t.Errorf("%d subagent requests with the subagent's prompt, want 2", subs)
	}
}

// An isolated subagent sees its parent's workspace but writes only its
// own layer: its changes come back as a diff, the parent's workspace is
// unchanged, and a sibling sees neither its files nor its processes.
func TestDelegateIsolated(t *testing.T) {
	rec := &recApprover{}
	s := &llmtest.Script{
		Steps: []llmtest.Step{
			{ToolCalls: []agentcore.ToolCall{shellCall("p1", "echo parent > p.txt && echo parent-readme > README.md")}},
			{ToolCalls: []agentcore.ToolCall{
				call("d1", "delegate", map[string]string{"task": "SUBTASK-A: change p.txt"}),
				call("d2", "delegate", map[string]string{"task": "SUBTASK-B: look around"}),
			}},
			{Text: "Both done."},
		},
		Branches: []llmtest.Branch{
			{Match: "SUBTASK-A", Steps: []llmtest.Step{
				{ToolCalls: []agentcore.ToolCall{
					call("a1", "read_file", map[string]string{"path": "README.md"}),
					shellCall("a2", "cat p.txt README.md && echo changed > p.txt && echo a > a.txt && rm README.md"),
					call("a3", "shell", map[string]any{"command": "sleep 300", "background": true}),
				}},
				{Text: "A done"},
			}},
			{Match: "SUBTASK-B", Steps: []llmtest.Step{
				{ToolCalls: []agentcore.ToolCall{shellCall("b1", "cat p.txt; ls; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")}},
				{Text: "B done"},
			}},
		},
	}
	var mu sync.Mutex
	var launches []agentcore.Launch
	h := newHarness(t, s, func(c *agentcore.Config) {
		c.Subagents, c.Approver = agentcore.SubagentsIsolated, rec
		c.Sandbox.Launching = func(ctx context.Context, _ sandboxkit.LaunchRecord) error {
			l, ok := agentcore.LaunchOf(ctx)
			if !ok {
				return errors.New("a start without the engine's Launch")
			}
			mu.Lock()
			defer mu.Unlock()
			launches = append(launches, l)
			return nil
		}
	})
	if err := h.wait(h.start("c", "please delegate")); err != nil {
		t.Fatal(err)
	}
	// Every sandbox and command is told of, for the conversation: the
	// three sessions, the commands and the job in them, and the one-shot
	// sandbox that diffs A's layer.
	kinds := map[string]int{}
	sleep := sha256.Sum256([]byte("sh\x00-c\x00sleep 300"))
	job := false
	for _, l := range launches {
		kinds[l.Kind]++
		job = job || l.ArgvSHA256 == hex.EncodeToString(sleep[:])
		if l.Conversation != "c" || l.Profile != "workspace" || l.Seccomp != "log" || len(l.FilterSHA256) != 64 {
			t.Errorf("launch %+v", l)
		}
	}
	if kinds["session"] != 3 || kinds["run"] != 1 || kinds["session-command"] < 3 || !job {
		t.Errorf("launches by kind %v (background job seen: %v): %+v", kinds, job, launches)
	}
	outs := outputs(h, "c")
	// The parent's layer shows over the project tree, in the file tools'
	// view and in the sandbox.
	if o := outputOf(t, outs, ".a1"); !strings.Contains(o, "parent-readme") {
		t.Errorf("A's read_file of the parent's README.md: %q", o)
	}
	if o := outputOf(t, outs, ".a2"); !strings.HasPrefix(o, "parent\nparent-readme\n") {
		t.Errorf("A's cat of the parent's p.txt: %q", o)
	}
	if o := outputOf(t, outs, ".b1"); !strings.HasPrefix(o, "parent\n") || strings.Contains(o, "a.txt") || !strings.Contains(o, "README.md") || strings.Contains(o, "sleep 300") {
		t.Errorf("B saw A's work (or not the parent's): %q", o)
	}
	res := h.toolResults("c")
	if !hasAll(res["d1"], "Summary:\nA done", "NOT applied", "--- a/p.txt", "+++ b/p.txt", "-parent", "+changed", "+++ b/a.txt", "+a", "--- a/README.md", "-parent-readme") {
		t.Errorf("A's result:\n%s", res["d1"])
	}
	if !hasAll(res["d2"], "Summary:\nB done", "It changed no files.") {
		t.Errorf("B's result:\n%s", res["d2"])
	}
	// Nothing reached the parent's workspace.
	for f, want := range map[string]string{"p.txt": "parent\n", "README.md": "parent-readme\n"} {
		if b, _ := os.ReadFile(filepath.Join(h.upper("c"), f)); string(b) != want {
			t.Errorf("the parent's %s: %q", f, b)
		}
	}
	if _, err := os.Lstat(filepath.Join(h.upper("c"), "a.txt")); err == nil {
		t.Error("a.txt in the parent's upper layer")
	}
	// The subagents' layers are gone.
	if m, _ := filepath.Glob(filepath.Join(h.dir, "layers", "c.sub_*")); len(m) != 0 {
		t.Errorf("subagent layers left: %v", m)
	}
	agents := map[string]bool{}
	for _, a := range rec.seen {
		agents[a.Agent] = true
	}
	if len(rec.seen) != 4 || len(agents) != 3 || !agents[""] {
		t.Errorf("approvals: %+v", rec.seen)
	}
}

// An isolated subagent reads its parent's layer, which must not change
// under it: while a background job of the parent runs, delegate refuses,
// and no subagent starts.
func TestDelegateIsolatedRefusesWhileJobsRun(t *testing.T) {
	s := &llmtest.Script{
		Steps: []llmtest.Step{
			{ToolCalls: []agentcore.ToolCall{call("j", "shell", map[string]any{"command": "sleep 300", "background": true})}},
			{ToolCalls: []agentcore.ToolCall{call("d1", "delegate", map[string]string{"task": "SUBTASK: anything"})}},
			{Expect: "stop the job first", Text: "It refused."},
		},
		Branches: []llmtest.Branch{{Match: "SUBTASK", Steps: []llmtest.Step{{Text: "must not run"}}}},
	}
	h := newHarness(t, s, func(c *agentcore.Config) {
		c.Subagents, c.ShellAlwaysAllow = agentcore.SubagentsIsolated, true
	})
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	if types := strings.Join(h.types("c"), " "); strings.Contains(types, "subagent_started") {
		t.Fatalf("a subagent started: %s", types)
	}
}
