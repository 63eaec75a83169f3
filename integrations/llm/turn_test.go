package llm_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/agentcoretest"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func TestMain(m *testing.M) {
	// The test binary is also the sandbox Session's supervisor.
	sandboxkit.Main()
	os.Exit(m.Run())
}

// The "Must show" turn over the real HTTP path: the engine asks
// this package's Client, which talks to llmtest's server; the model's
// shell call waits for approval, runs in a real sandbox, and its output
// reaches the model in the next request.
func TestTurnOverHTTP(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(t.Context(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{
		{Text: "I will write the file.", ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: `{"command":"echo hi > f.txt && cat f.txt"}`}}},
		{Expect: "hi", Text: "f.txt now holds hi."},
	}})
	defer srv.Close()
	client := newClient(t, fast(srv.URL()))

	dir := t.TempDir()
	t.Cleanup(func() { overlay.RemoveAll(dir) }) // overlayfs leaves a mode-000 work dir
	lower := filepath.Join(dir, "lower")
	if err := os.MkdirAll(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	layers, err := overlay.Open(filepath.Join(dir, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	store := agentcoretest.NewMemStore()
	e, err := agentcore.New(agentcore.Config{LLM: client, Store: store, Workspaces: oneLower(lower), Layers: layers})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	turn, err := e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: "conv1", Content: "make f.txt"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var a agentcore.Approval
	for ev := range e.Subscribe(ctx, "conv1", 0) {
		if ev.Type == agentcore.EventApprovalPending {
			if err := json.Unmarshal(ev.Data, &a); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if a.Command != "echo hi > f.txt && cat f.txt" || a.Status != agentcore.ApprovalPending {
		t.Fatalf("approval %+v, want the pending shell command", a)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d model requests while the approval is pending, want 1", n)
	}
	if err := e.Decide(t.Context(), "alice", "conv1", a.ID, agentcore.DecisionApprove); err != nil {
		t.Fatal(err)
	}
	if err := turn.Wait(ctx); err != nil {
		t.Fatalf("turn: %v", err)
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	msgs := reqs[1].Messages
	last := msgs[len(msgs)-1]
	call := msgs[len(msgs)-2]
	if last.Role != agentcore.RoleTool || !strings.Contains(last.Content, "hi") || len(call.ToolCalls) != 1 || last.ToolCallID != call.ToolCalls[0].ID {
		t.Errorf("second request ends with %+v after %+v; want the tool result holding hi, answering the call", last, call)
	}
	if !slices.ContainsFunc(reqs[0].Tools, func(s agentcore.ToolSpec) bool { return s.Name == "shell" }) {
		t.Error("the model was not offered the shell tool")
	}
	stored, _ := store.Messages(t.Context(), "conv1")
	if final := stored[len(stored)-1]; final.Role != agentcore.RoleAssistant || final.Content != "f.txt now holds hi." {
		t.Errorf("final message %+v", final)
	}
	l, err := layers.Get("conv1")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(l.Upper, "f.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("upper f.txt = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(lower, "f.txt")); err == nil {
		t.Error("f.txt was written to the lower tree")
	}
}

// oneLower shows the same lower tree to every conversation.
type oneLower string

func (l oneLower) Lower(ctx context.Context, user, conversation string) (string, error) {
	return string(l), nil
}
