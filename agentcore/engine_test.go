package agentcore_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/agentcoretest"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// echoScript asks for one shell command, then needs its output.
func echoScript(command, expect string) *llmtest.Script {
	return &llmtest.Script{Steps: []llmtest.Step{
		{Text: "Let me run that.", ToolCalls: []agentcore.ToolCall{shellCall("c1", command)}},
		{Expect: expect, Text: "Done."},
	}}
}

func TestTurnApproved(t *testing.T) {
	h := newHarness(t, echoScript("echo hi > f.txt && cat f.txt", "hi"), nil)
	turn := h.start("conv1", "make f.txt")

	a, _ := h.pendingApproval("conv1", 0)
	if a.Command != "echo hi > f.txt && cat f.txt" || a.Cwd != "/workspace" || a.Conversation != "conv1" || a.User != "alice" || a.Status != agentcore.ApprovalPending {
		t.Fatalf("approval %+v", a)
	}
	// Nothing ran before the decision.
	if _, err := os.Stat(filepath.Join(h.upper("conv1"), "f.txt")); err == nil {
		t.Fatal("f.txt exists before approval")
	}
	// Another user, another conversation, an unknown ID: the same not-found.
	for _, bad := range []struct{ user, conv, id string }{{"mallory", "conv1", a.ID}, {"alice", "conv2", a.ID}, {"alice", "conv1", "appr_nope"}} {
		err := h.e.Decide(t.Context(), bad.user, bad.conv, bad.id, agentcore.DecisionApprove)
		if !errors.Is(err, agentcore.ErrNotFound) {
			t.Errorf("Decide(%v) = %v, want ErrNotFound", bad, err)
		}
	}
	if err := h.e.Decide(t.Context(), "alice", "conv1", a.ID, agentcore.DecisionApprove); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(turn); err != nil {
		t.Fatalf("turn: %v", err)
	}
	// Single-use.
	if err := h.e.Decide(t.Context(), "alice", "conv1", a.ID, agentcore.DecisionApprove); !errors.Is(err, agentcore.ErrApprovalDecided) {
		t.Errorf("second Decide = %v, want ErrApprovalDecided", err)
	}
	if got := h.llm.lastContent(t, 1); !strings.Contains(got, "hi") {
		t.Errorf("the model got %q, want the output hi", got)
	}
	if b, err := os.ReadFile(filepath.Join(h.upper("conv1"), "f.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("upper f.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(h.lower, "f.txt")); err == nil {
		t.Error("f.txt written to the lower tree")
	}
	want := []string{"turn_started", "text_delta", "tool_call_requested", "usage", "approval_pending", "approval_decided", "tool_output", "tool_finished", "text_delta", "usage", "turn_usage", "turn_finished"}
	if got := slices.Compact(h.types("conv1")); !slices.Equal(got, want) {
		t.Errorf("events %v\nwant %v", got, want)
	}
	stored, err := h.store.Approval(t.Context(), a.ID)
	if err != nil || stored.Status != agentcore.ApprovalDecided || stored.Decision != agentcore.DecisionApprove || stored.DecidedBy != "alice" {
		t.Errorf("stored approval %+v, %v", stored, err)
	}
	// Seq: 1, 2, 3, … without gaps.
	for i, ev := range h.store.AllEvents("conv1") {
		if ev.Seq != int64(i+1) || ev.Turn != turn.ID || ev.Conversation != "conv1" {
			t.Fatalf("event %d: seq %d turn %q", i, ev.Seq, ev.Turn)
		}
	}
}

func TestApprovalOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		decide   agentcore.Decision // "" lets it expire
		wantText string             // in the tool result
		wantFile bool
		status   agentcore.ApprovalStatus
	}{
		{"deny", agentcore.DecisionDeny, "denied", false, agentcore.ApprovalDecided},
		{"expire", "", "expired", false, agentcore.ApprovalExpired},
		{"approve", agentcore.DecisionApprove, "exit status 0", true, agentcore.ApprovalDecided},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, echoScript("touch marker && echo ran", tt.wantText), func(c *agentcore.Config) {
				c.ApprovalTimeout = 500 * time.Millisecond
			})
			turn := h.start("c", "go")
			a, _ := h.pendingApproval("c", 0)
			if tt.decide != "" {
				if err := h.e.Decide(t.Context(), "alice", "c", a.ID, tt.decide); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.wait(turn); err != nil {
				t.Fatalf("turn: %v", err)
			}
			if got := h.toolResults("c")["c1"]; !strings.Contains(got, tt.wantText) {
				t.Errorf("tool result %q lacks %q", got, tt.wantText)
			}
			_, err := os.Stat(filepath.Join(h.upper("c"), "marker"))
			if ran := err == nil; ran != tt.wantFile {
				t.Errorf("command ran: %v, want %v", ran, tt.wantFile)
			}
			stored, _ := h.store.Approval(t.Context(), a.ID)
			if stored.Status != tt.status {
				t.Errorf("status %s, want %s", stored.Status, tt.status)
			}
			// Nothing decides an approval twice, or after it expired.
			if err := h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionApprove); !errors.Is(err, agentcore.ErrApprovalDecided) {
				t.Errorf("late Decide = %v, want ErrApprovalDecided", err)
			}
			if !slices.Contains(h.types("c"), agentcore.EventApprovalDecided) {
				t.Error("no approval_decided event")
			}
		})
	}
}

func TestAlwaysAllowForConversation(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("c1", "echo one > one.txt")}},
		{ToolCalls: []agentcore.ToolCall{shellCall("c2", "echo two > two.txt")}},
		{ToolCalls: []agentcore.ToolCall{call("d", "deploy", map[string]string{"target": "prod"})}},
		{Text: "done"},
	}}
	h := newHarness(t, s, nil)
	if err := h.e.Register(&deployTool{}); err != nil {
		t.Fatal(err)
	}
	turn := h.start("c", "go")
	a, seq := h.pendingApproval("c", 0)
	if err := h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionAlwaysAllow); err != nil {
		t.Fatal(err)
	}
	// The next shell call runs unasked; another tool is still asked for.
	a, _ = h.pendingApproval("c", seq)
	if a.Tool != "deploy" {
		t.Fatalf("asked for %+v, want deploy", a)
	}
	if err := h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionDeny); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"one.txt", "two.txt"} {
		if _, err := os.Stat(filepath.Join(h.upper("c"), f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	aps, _ := h.store.Approvals(t.Context(), "c")
	if len(aps) != 2 {
		t.Errorf("%d approvals asked, want 2 (shell once, deploy)", len(aps))
	}
}

func TestSecondTurnRefused(t *testing.T) {
	h := newHarness(t, echoScript("true", "exit status"), nil)
	turn := h.start("c", "go")
	a, _ := h.pendingApproval("c", 0)
	_, err := h.e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: "c", Content: "again"})
	if !errors.Is(err, agentcore.ErrTurnInProgress) {
		t.Fatalf("second StartTurn = %v, want ErrTurnInProgress", err)
	}
	if h.e.Turn("c") != turn {
		t.Error("Turn does not return the running turn")
	}
	// Another conversation is not held up.
	other := h.start("other", "go")
	if _, _ = h.pendingApproval("other", 0); other.Err() != nil {
		t.Fatal(other.Err())
	}
	h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionApprove)
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	other.Cancel()
	h.wait(other)
	// Once it ended, the next turn may start (and the script is exhausted,
	// so it fails: the error says so).
	next := h.start("c", "more")
	if err := h.wait(next); err == nil || !strings.Contains(err.Error(), "script exhausted") {
		t.Errorf("next turn: %v", err)
	}
}

// endStore records each turn-ending event that, the moment it is
// stored, would have a message sent by whoever sees it refused.
type endStore struct {
	*agentcoretest.MemStore
	e     *agentcore.Engine
	mu    sync.Mutex
	early []string
}

func (s *endStore) AppendEvent(ctx context.Context, ev agentcore.Event) (agentcore.Event, error) {
	ev, err := s.MemStore.AppendEvent(ctx, ev)
	switch ev.Type {
	case agentcore.EventTurnFinished, agentcore.EventTurnFailed, agentcore.EventTurnCancelled:
		if err == nil && agentcore.RefusesTurnNow(s.e, ev.Conversation) {
			s.mu.Lock()
			s.early = append(s.early, ev.Type)
			s.mu.Unlock()
		}
	}
	return ev, err
}

// TestNextTurnRightAfterTheLast: a client that sends the next message as
// soon as it sees a turn end (or its last event is in the Store) is not
// refused with ErrTurnInProgress.
func TestNextTurnRightAfterTheLast(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{{Text: "one"}, {Text: "two"}, {Text: "three"}}}
	store := &endStore{MemStore: agentcoretest.NewMemStore()}
	h := newHarness(t, s, func(c *agentcore.Config) { c.Store = store })
	store.e = h.e
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	events := h.e.Subscribe(ctx, "c", 0)
	h.start("c", "go")
	// Three turns answered, the fourth fails: the script is exhausted.
	var ends []string
	for ev := range events {
		switch ev.Type {
		case agentcore.EventTurnFinished:
			ends = append(ends, ev.Type)
			if _, err := h.e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: "c", Content: "more"}); err != nil {
				t.Fatalf("StartTurn right after %s: %v", ev.Type, err)
			}
		case agentcore.EventTurnFailed, agentcore.EventTurnCancelled:
			ends = append(ends, ev.Type)
			cancel()
		}
	}
	want := []string{agentcore.EventTurnFinished, agentcore.EventTurnFinished, agentcore.EventTurnFinished, agentcore.EventTurnFailed}
	if !slices.Equal(ends, want) {
		t.Fatalf("turn ends %v, want %v", ends, want)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.early) > 0 {
		t.Errorf("stored while the turn still held the conversation: %v", store.early)
	}
}

func TestCancel(t *testing.T) {
	t.Run("running command", func(t *testing.T) {
		marker := fmt.Sprintf("marker-cancel-%d", time.Now().UnixNano())
		s := &llmtest.Script{Steps: []llmtest.Step{{ToolCalls: []agentcore.ToolCall{shellCall("c1", "touch started; sleep 30; touch finished; : "+marker)}}}}
		h := newHarness(t, s, alwaysAllow)
		turn := h.start("c", "go")
		started := filepath.Join(h.dir, "layers", "c", "upper", "started")
		sandboxtest.Eventually(t, 30*time.Second, func() error {
			if _, err := os.Stat(started); err != nil {
				return fmt.Errorf("command did not start: %v", err)
			}
			return nil
		})
		if len(processesWith(marker)) == 0 {
			t.Fatal("the running command is not found by its marker (the check after the cancel would prove nothing)")
		}
		t0 := time.Now()
		turn.Cancel()
		if err := h.wait(turn); !errors.Is(err, context.Canceled) {
			t.Errorf("turn err %v, want context.Canceled", err)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("cancel took %v", d)
		}
		if types := h.types("c"); types[len(types)-1] != agentcore.EventTurnCancelled {
			t.Errorf("last event %s, want turn_cancelled", types[len(types)-1])
		}
		// The history answers the call, so the conversation can go on.
		if got := h.toolResults("c")["c1"]; !strings.Contains(got, "cancelled") {
			t.Errorf("tool result %q", got)
		}
		// Once its processes are gone, the command cannot run on.
		sandboxtest.Eventually(t, 30*time.Second, func() error {
			if p := processesWith(marker); len(p) > 0 {
				return fmt.Errorf("the command's processes run on after cancel: %v", p)
			}
			return nil
		})
		if _, err := os.Stat(filepath.Join(h.upper("c"), "finished")); err == nil {
			t.Error("the command ran on after cancel")
		}
	})
	t.Run("pending approval", func(t *testing.T) {
		h := newHarness(t, echoScript("touch marker", "x"), nil)
		turn := h.start("c", "go")
		a, _ := h.pendingApproval("c", 0)
		turn.Cancel()
		if err := h.wait(turn); !errors.Is(err, context.Canceled) {
			t.Errorf("turn err %v", err)
		}
		if err := h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionApprove); !errors.Is(err, agentcore.ErrApprovalDecided) {
			t.Errorf("Decide after cancel = %v, want ErrApprovalDecided", err)
		}
		if stored, _ := h.store.Approval(t.Context(), a.ID); stored.Status != agentcore.ApprovalCancelled {
			t.Errorf("approval status %s", stored.Status)
		}
	})
	t.Run("model stream", func(t *testing.T) {
		h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{{Text: "thinking", Stall: true}}}, nil)
		turn := h.start("c", "go")
		h.event("c", agentcore.EventTextDelta)
		turn.Cancel()
		if err := h.wait(turn); !errors.Is(err, context.Canceled) {
			t.Errorf("turn err %v", err)
		}
	})
}

func TestBudgets(t *testing.T) {
	loop := &llmtest.Script{}
	for range 5 {
		loop.Steps = append(loop.Steps, llmtest.Step{ToolCalls: []agentcore.ToolCall{shellCall("", "true")}})
	}
	h := newHarness(t, loop, func(c *agentcore.Config) { c.ShellAlwaysAllow, c.MaxSteps = true, 2 })
	turn := h.start("c", "go")
	if err := h.wait(turn); !errors.Is(err, agentcore.ErrBudget) {
		t.Errorf("err %v, want ErrBudget", err)
	}
	if n := len(h.llm.requests()); n != 2 {
		t.Errorf("%d model calls, want 2", n)
	}
	last := h.store.AllEvents("c")[len(h.store.AllEvents("c"))-1]
	if last.Type != agentcore.EventTurnFinished || !strings.Contains(string(last.Data), "max_steps") {
		t.Errorf("last event %s %s", last.Type, last.Data)
	}

	slow := &llmtest.Script{Steps: []llmtest.Step{{ToolCalls: []agentcore.ToolCall{shellCall("", "sleep 20")}}}}
	h = newHarness(t, slow, func(c *agentcore.Config) { c.ShellAlwaysAllow, c.TurnTimeout = true, time.Second })
	turn = h.start("c", "go")
	if err := h.wait(turn); !errors.Is(err, agentcore.ErrBudget) || !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "longer than") {
		t.Errorf("err %v, want the time budget", err)
	}
}

func TestConcurrentConversations(t *testing.T) {
	h := newHarness(t, echoScript(`echo "$PWD" > where.txt && cat where.txt`, "/workspace"), alwaysAllow)
	const n = 20
	turns := make([]*agentcore.Turn, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			turn, err := h.e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: fmt.Sprintf("conv%02d", i), Content: "go"})
			if err != nil {
				t.Error(err)
				return
			}
			turns[i] = turn
		})
	}
	wg.Wait()
	for i, turn := range turns {
		if turn == nil {
			continue
		}
		if err := h.wait(turn); err != nil {
			t.Errorf("conversation %d: %v", i, err)
		}
		if b, err := os.ReadFile(filepath.Join(h.upper(turn.Conversation), "where.txt")); err != nil || string(b) != "/workspace\n" {
			t.Errorf("conversation %d: where.txt %q %v", i, b, err)
		}
	}
}

// A call whose sandbox is slow to start says so in its turn's events,
// and the turn goes on once it has started: slow is not stuck.
func TestSandboxWaiting(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, echoScript("echo started", "started"), func(c *agentcore.Config) {
		c.ShellAlwaysAllow = true
		c.Sandbox.Launching = func(ctx context.Context, l sandboxkit.LaunchRecord) error {
			if l.Kind == "session" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
	})
	turn := h.start("c", "go")
	ev := h.event("c", agentcore.EventSandboxWaiting)
	var d struct {
		ID, Name, Status string
		WaitedMS         int64 `json:"waited_ms"`
	}
	if err := json.Unmarshal(ev.Data, &d); err != nil || d.ID != "c1" || d.Name != "shell" || d.Status != "starting" || d.WaitedMS < 1000 {
		t.Fatalf("first sandbox_waiting %s (%v); want call c1 starting", ev.Data, err)
	}
	close(release)
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, ev := range h.store.AllEvents("c") {
		if ev.Type == agentcore.EventSandboxWaiting {
			json.Unmarshal(ev.Data, &d)
			statuses = append(statuses, d.Status)
		}
	}
	if len(statuses) < 2 || statuses[len(statuses)-1] != "started" || slices.Contains(statuses[:len(statuses)-1], "started") {
		t.Errorf("sandbox_waiting statuses %v; want starting ..., then started", statuses)
	}
	if res := h.toolResults("c")["c1"]; !strings.Contains(res, "started") {
		t.Errorf("shell result %q", res)
	}
}

// The conversation's sandbox carries the configured seccomp mode: under
// enforce a nested user namespace is refused by the filter (EPERM), where
// log lets the call reach the kernel (bwrap's userns limit: ENOSPC).
func TestSeccompMode(t *testing.T) {
	for _, c := range []struct {
		mode seccomp.Mode
		want string
	}{
		{seccomp.Enforce, "Operation not permitted"},
		{seccomp.Log, "No space left on device"},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			h := newHarness(t, echoScript("grep Seccomp: /proc/self/status; unshare -U true", c.want), func(cfg *agentcore.Config) {
				cfg.ShellAlwaysAllow, cfg.Sandbox.Seccomp = true, c.mode
			})
			if err := h.wait(h.start("c", "go")); err != nil {
				t.Fatal(err)
			}
			if res := h.toolResults("c")["c1"]; !hasAll(res, "Seccomp:\t2", c.want) {
				t.Errorf("shell result %q, want a filter and %q", res, c.want)
			}
		})
	}
}

func TestFailClosed(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{
			shellCall("c1", "touch "+marker+" /workspace/marker"),
			call("c2", "read_file", map[string]string{"path": "README.md"}),
			call("c3", "write_file", map[string]string{"path": "new.txt", "content": "x"}),
		}},
		{Text: "could not"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) { c.ShellAlwaysAllow, c.Sandbox.Bwrap = true, "/nonexistent/bwrap" })
	turn := h.start("c", "go")
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	for _, id := range []string{"c1", "c2", "c3"} {
		if !hasAll(res[id], "sandbox unavailable", "nothing was run") {
			t.Errorf("%s: result %q, want the fail-closed error", id, res[id])
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran on the host")
	}
	if l, err := h.layers.Get("c"); err == nil {
		if ents, _ := os.ReadDir(l.Upper); len(ents) > 0 {
			t.Errorf("upper holds %v", ents)
		}
	}
	ev := h.event("c", agentcore.EventSandboxUnavailable)
	if !strings.Contains(string(ev.Data), "bwrap") {
		t.Errorf("sandbox_unavailable says %s", ev.Data)
	}
	// The model and the client learn which check failed, not the host's
	// paths; the log keeps them.
	for what, text := range map[string]string{"c1": res["c1"], "c2": res["c2"], "c3": res["c3"], "the event": string(ev.Data)} {
		if strings.Contains(text, "/nonexistent") || !strings.Contains(text, "the server log has details") {
			t.Errorf("%s names a host path or no pointer to the log: %s", what, text)
		}
	}
	if logs := h.logs.String(); !strings.Contains(logs, "/nonexistent/bwrap") {
		t.Errorf("the log lacks the detail:\n%s", logs)
	}
}

func TestSubscribe(t *testing.T) {
	h := newHarness(t, echoScript("echo hi", "hi"), alwaysAllow)
	// A subscriber that never reads does not hold up the turn.
	h.e.Subscribe(t.Context(), "c", 0)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	live := h.e.Subscribe(ctx, "c", 0)
	turn := h.start("c", "go")
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	all := h.store.AllEvents("c")
	for i := range all {
		select {
		case ev := <-live:
			if ev.Seq != int64(i+1) || ev.Type != all[i].Type {
				t.Fatalf("live event %d: seq %d %s, want %s", i, ev.Seq, ev.Type, all[i].Type)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("live subscriber stopped at %d of %d", i, len(all))
		}
	}
	// Replay from the middle, without duplicates.
	rctx, rcancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer rcancel()
	var got []int64
	for ev := range h.e.Subscribe(rctx, "c", 3) {
		got = append(got, ev.Seq)
		if len(got) == len(all)-3 {
			break
		}
	}
	if len(got) != len(all)-3 || got[0] != 4 {
		t.Errorf("replay after 3: %v of %d", got, len(all))
	}
}

func TestSecrets(t *testing.T) {
	const canary = "canary-Zq8v1Lx-4Pw9s7Tk0Rm2"
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{
			shellCall("c1", `test {{secret:TOKEN}} = "$(printf canary-Zq8v1Lx; printf -- -4Pw9s7Tk0Rm2)" && echo secret-ok`),
			shellCall("c2", `echo {{secret:TOKEN}}; echo {{secret:TOKEN}} | base64; printf %s {{secret:TOKEN}} | base64; printf %s "{{secret:TOKEN}}" | od -An -tx1 | tr -d ' \n'; echo; echo "x{{secret:TOKEN}}" | base64 -w0; echo "xy{{secret:TOKEN}}" | base64 -w0`),
			shellCall("c3", `echo {{secret:TOKEN}} > s.txt`),
			call("c4", "read_file", map[string]string{"path": "s.txt"}),
			shellCall("c5", `echo {{secret:NOPE}} > nope.txt`),
			shellCall("c6", `: {{secret:TOKEN}}; env; echo "$CODUMENTOR_SECRET_TOKEN" >&2; exit 7`),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) {
		c.Secrets = secrets{"alice": {"TOKEN": canary}}
	})
	turn := h.start("c", "use the token")
	var after int64
	for range 4 { // c4 reads a file; c5 needs none: its secret does not exist
		var a agentcore.Approval
		a, after = h.pendingApproval("c", after)
		if !strings.Contains(a.Command, "{{secret:") {
			t.Errorf("approval shows %q, want the placeholder", a.Command)
		}
		if err := h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionApprove); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	if !strings.Contains(res["c1"], "secret-ok") {
		t.Errorf("the command did not get the secret: %q", res["c1"])
	}
	if !strings.Contains(res["c2"], "[secret:TOKEN]") || strings.Count(res["c2"], "[secret:TOKEN]") < 5 {
		t.Errorf("c2 %q: want every form redacted", res["c2"])
	}
	if !strings.Contains(res["c4"], "[secret:TOKEN]") {
		t.Errorf("read_file %q", res["c4"])
	}
	if !hasAll(res["c5"], "unknown secret", "NOPE", "TOKEN") {
		t.Errorf("unknown secret: %q", res["c5"])
	}
	if _, err := os.Stat(filepath.Join(h.upper("c"), "nope.txt")); err == nil {
		t.Error("the command with an unknown secret ran")
	}
	if !hasAll(res["c6"], "CODUMENTOR_SECRET_TOKEN=[secret:TOKEN]", "exit status 7") {
		t.Errorf("c6 %q", res["c6"])
	}
	// The value is in the file the command wrote (it had it)…
	if b, _ := os.ReadFile(filepath.Join(h.upper("c"), "s.txt")); string(b) != canary+"\n" {
		t.Errorf("s.txt = %q", b)
	}
	// …and nowhere that leaves the runtime.
	leaks := []string{canary, fmt.Sprintf("%x", canary), base64.StdEncoding.EncodeToString([]byte(canary))}
	// In a base64 stream the canary's encoding depends on what precedes
	// it: the characters that encode the canary's bytes alone.
	for _, prefix := range []string{"", "x", "xy"} {
		full := base64.StdEncoding.EncodeToString([]byte(prefix + canary + "\n"))
		start, end := (len(prefix)+2)/3*4, (len(prefix)+len(canary))/3*4
		leaks = append(leaks, full[start:end])
	}
	reqs, _ := json.Marshal(h.llm.requests())
	evs, _ := json.Marshal(h.store.AllEvents("c"))
	msgs, _ := h.store.Messages(t.Context(), "c")
	msgJSON, _ := json.Marshal(msgs)
	aps, _ := h.store.Approvals(t.Context(), "c")
	apJSON, _ := json.Marshal(aps)
	for _, where := range []struct{ name, text string }{
		{"model requests", string(reqs)}, {"events", string(evs)}, {"messages", string(msgJSON)},
		{"approvals", string(apJSON)}, {"logs", h.logs.String()},
	} {
		for _, leak := range leaks {
			if leak != "" && strings.Contains(where.text, leak) {
				t.Errorf("%s hold %q", where.name, leak)
			}
		}
	}
	if !strings.Contains(h.logs.String(), "unknown secret") {
		t.Errorf("the logs miss the failed call, so they prove nothing: %s", h.logs.String())
	}
	if !strings.Contains(string(reqs), "TOKEN") {
		t.Error("the shell tool's description does not name the secret")
	}
}

func TestClose(t *testing.T) {
	h := newHarness(t, echoScript("true", "x"), nil)
	turn := h.start("c", "go")
	a, _ := h.pendingApproval("c", 0)
	if err := h.e.Decide(t.Context(), "alice", "c", a.ID, "maybe"); err == nil || errors.Is(err, agentcore.ErrApprovalDecided) {
		t.Errorf("Decide(maybe) = %v, want an unknown-decision error", err)
	}
	h.e.Close()
	if err := h.wait(turn); !errors.Is(err, agentcore.ErrClosed) {
		t.Errorf("turn err %v, want ErrClosed", err)
	}
	if types := h.types("c"); types[len(types)-1] != agentcore.EventTurnCancelled {
		t.Errorf("events %v", types)
	}
	if _, err := h.e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: "c"}); !errors.Is(err, agentcore.ErrClosed) {
		t.Errorf("StartTurn after Close = %v", err)
	}
}

// TestCloseConcurrent: Close closes the conversations' sandboxes at
// once, not one after another: every close is seen under way while none
// has been let finish.
func TestCloseConcurrent(t *testing.T) {
	const n = 4
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{call("c1", "read_file", map[string]string{"path": "README.md"})}},
		{Expect: "hello world", Text: "Done."},
	}}, nil)
	for i := range n {
		if err := h.wait(h.start(fmt.Sprintf("conv%d", i), "read it")); err != nil {
			t.Fatal(err)
		}
	}
	closing := make(chan *sandboxkit.Session, n)
	release := make(chan struct{})
	agentcore.SetCloseSession(h.e, func(s *sandboxkit.Session) error {
		closing <- s
		<-release
		return s.Close()
	})
	done := make(chan error, 1)
	go func() { done <- h.e.Close() }()
	stuck := time.After(60 * time.Second)
	var sessions []*sandboxkit.Session
	for len(sessions) < n {
		select {
		case s := <-closing:
			sessions = append(sessions, s)
		case <-stuck:
			close(release)
			<-done
			t.Fatalf("%d of %d sandboxes closing at once, want all", len(sessions), n)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, s := range sessions {
		if !errors.Is(s.Err(), sandboxkit.ErrSessionClosed) {
			t.Errorf("session %d after Close: %v, want ErrSessionClosed", i, s.Err())
		}
	}
}

// TestSandboxLimitReported: a command stopped by a sandbox limit tells
// the model which limit, and an event records it; background jobs are
// capped per conversation.
func TestSandboxLimitReported(t *testing.T) {
	l := sandboxkit.DefaultLimits()
	l.Disk = 16 << 20
	script := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("c1", "yes > big")}},
		{Expect: "disk budget (16 MiB) is used up", ToolCalls: []agentcore.ToolCall{
			{ID: "j1", Name: "shell", Arguments: `{"command":"sleep 60","background":true}`},
			{ID: "j2", Name: "shell", Arguments: `{"command":"sleep 60","background":true}`},
		}},
		{Expect: "too many background jobs running: 1 of 1", ToolCalls: []agentcore.ToolCall{
			{ID: "k1", Name: "shell_kill", Arguments: `{"job":1}`},
			{ID: "b1", Name: "shell", Arguments: `{"command":"yes > big2","background":true}`},
		}},
		{ToolCalls: []agentcore.ToolCall{shellCall("w1", "sleep 2")}},
		{ToolCalls: []agentcore.ToolCall{{ID: "o1", Name: "shell_kill", Arguments: `{"job":2}`}, {ID: "o2", Name: "shell_output", Arguments: `{"job":2}`}}},
		{Expect: "sandbox limit: the command was stopped", Text: "Done."},
	}}
	h := newHarness(t, script, func(cfg *agentcore.Config) {
		cfg.ShellAlwaysAllow, cfg.Sandbox.Seccomp, cfg.Sandbox.Limits, cfg.MaxJobs = true, seccomp.Enforce, &l, 1
	})
	if err := h.wait(h.start("c", "fill the disk")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	if !hasAll(res["c1"], "[exit status 137]", "[sandbox limit: the command was stopped: the workspace's disk budget (16 MiB) is used up") {
		t.Errorf("shell result %q", res["c1"])
	}
	var limits []string
	for _, ev := range h.store.AllEvents("c") {
		if ev.Type == agentcore.EventSandboxLimit {
			var d map[string]string
			json.Unmarshal(ev.Data, &d)
			limits = append(limits, d["id"]+":"+d["limit"])
		}
	}
	// The background job's limit: in its output, one event.
	// shell_kill returns once the job's end is known.
	if !hasAll(res["o1"], "job 2 exited with status 137; sandbox limit: the command was stopped: the workspace's disk budget (16 MiB)") || !hasAll(res["o2"], "[job 2 exited with status 137; sandbox limit") {
		t.Errorf("shell_kill %q, shell_output %q", res["o1"], res["o2"])
	}
	// Every command running when the budget is crossed is stopped (which
	// one wrote is not known): the foreground sleep too, if it had started
	// by then, and job 1 if b1's writes crossed it before k1's kill landed
	// (on a loaded machine). o2 reads the same job again: no second event.
	want := [][]string{
		{"c1:disk", "o1:disk"}, {"c1:disk", "w1:disk", "o1:disk"},
		{"c1:disk", "k1:disk", "o1:disk"}, {"c1:disk", "k1:disk", "w1:disk", "o1:disk"},
	}
	if !slices.ContainsFunc(want, func(w []string) bool { return slices.Equal(limits, w) }) {
		t.Errorf("sandbox_limit events %v, want c1:disk [k1:disk] [w1:disk] o1:disk", limits)
	}
}

// A short secret (a PIN) is redacted where it stands alone in what a
// command prints, and leaves the numbers it is part of, and every
// event's schema, alone.
func TestShortSecret(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("c1", `echo pin={{secret:PIN}}; echo 1423 4242 42x x42; echo {{secret:PIN}}`)}},
		{Text: "done"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) {
		c.Secrets = secrets{"alice": {"PIN": "42"}}
	})
	turn := h.start("c", "use the pin")
	a, _ := h.pendingApproval("c", 0)
	if err := h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionApprove); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	if got, want := h.toolResults("c")["c1"], "pin=[secret:PIN]\n1423 4242 42x x42\n[secret:PIN]\n"; !strings.HasPrefix(got, want) {
		t.Errorf("output %q; want it to begin %q", got, want)
	}
	for _, ev := range h.store.AllEvents("c") {
		if ev.Type == agentcore.EventApprovalPending || ev.Type == agentcore.EventApprovalDecided {
			var a agentcore.Approval
			if err := json.Unmarshal(ev.Data, &a); err != nil || a.Created.IsZero() || a.Expires.IsZero() || a.ID == "" {
				t.Errorf("%s: %s (%v)", ev.Type, ev.Data, err)
			}
		}
		if ev.Type == agentcore.EventUsage {
			var u agentcore.Usage
			if err := json.Unmarshal(ev.Data, &u); err != nil || u.PromptTokens == 0 {
				t.Errorf("%s: %s (%v)", ev.Type, ev.Data, err)
			}
		}
	}
}

// processesWith returns the command lines of this machine's processes
// that contain marker.
func processesWith(marker string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), marker) {
			found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}
