package agentcore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	// The test binary is also the Session supervisor inside sandboxes.
	sandboxkit.Main()
	os.Exit(m.Run())
}

// requireSandbox skips (or fails under CI=true) a test that needs real
// sandboxes where they cannot run.
func requireSandbox(t testing.TB) {
	t.Helper()
	sandboxtest.RequireSandbox(t, func(ctx context.Context) error { return sandboxkit.Doctor(ctx, sandboxkit.DoctorOptions{}).Err() })
}

// recLLM records every request it passes on.
type recLLM struct {
	llm agentcore.LLM
	mu  sync.Mutex
	req []agentcore.Request
}

func (r *recLLM) Stream(ctx context.Context, req agentcore.Request) (agentcore.Stream, error) {
	r.mu.Lock()
	r.req = append(r.req, req)
	r.mu.Unlock()
	return r.llm.Stream(ctx, req)
}

func (r *recLLM) requests() []agentcore.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]agentcore.Request(nil), r.req...)
}

// lastContent is the content of the last message of request i.
func (r *recLLM) lastContent(t *testing.T, i int) string {
	t.Helper()
	reqs := r.requests()
	if len(reqs) <= i {
		t.Fatalf("%d model requests, want more than %d", len(reqs), i)
	}
	m := reqs[i].Messages
	return m[len(m)-1].Content
}

// lowers gives every conversation the same lower tree.
type lowers string

func (l lowers) Lower(ctx context.Context, user, conversation string) (string, error) {
	return string(l), nil
}

// secrets is a SecretResolver over user → name → value.
type secrets map[string]map[string]string

func (s secrets) Names(ctx context.Context, user string) ([]string, error) {
	var names []string
	for n := range s[user] {
		names = append(names, n)
	}
	return names, nil
}

func (s secrets) Value(ctx context.Context, user, name string) (string, error) {
	v, ok := s[user][name]
	if !ok {
		return "", fmt.Errorf("secret %s: %w", name, agentcore.ErrNotFound)
	}
	return v, nil
}

// harness is an Engine over real sandboxes, an in-memory Store and a
// scripted model.
type harness struct {
	t      testing.TB
	e      *agentcore.Engine
	store  *agentcoretest.MemStore
	llm    *recLLM
	dir    string // holds lower, layers and whatever lies "outside"
	lower  string
	layers *overlay.Store
	logs   *sandboxtest.Buffer
}

// lowerFiles is the project every test workspace shows.
var lowerFiles = map[string]string{
	"README.md":       "# demo\nhello world\n",
	"src/main.go":     "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n",
	"src/util.go":     "package main\n\nfunc util() int { return 42 }\n",
	"dup.txt":         "x\nx\n",
	"gone.txt":        "gone\n",
	"dir/a.txt":       "a\n",
	"dir/b.txt":       "b\n",
	"bin/blob.bin":    "\x00\x01hello\x00",
	"docs/guide.md":   "see README.md\n",
	"docs/hello.txt":  "hello docs\n",
	"nested/x/y/z.md": "deep hello\n",
}

func newHarness(t testing.TB, s *llmtest.Script, configure func(*agentcore.Config)) *harness {
	t.Helper()
	requireSandbox(t)
	dir := t.TempDir()
	// Runs before TempDir's own cleanup: overlayfs leaves a mode-000 dir.
	t.Cleanup(func() { overlay.RemoveAll(dir) })
	lower := filepath.Join(dir, "lower")
	for name, data := range lowerFiles {
		p := filepath.Join(lower, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	layers, err := overlay.Open(filepath.Join(dir, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, store: agentcoretest.NewMemStore(), llm: &recLLM{llm: s.LLM()}, dir: dir, lower: lower, layers: layers, logs: &sandboxtest.Buffer{}}
	cfg := agentcore.Config{
		LLM:        h.llm,
		Store:      h.store,
		Workspaces: lowers(lower),
		Layers:     layers,
		Logger:     slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// Tests run a table of calls in one step; TestToolCallCaps
		// tests the default.
		MaxToolCalls: 256,
	}
	if configure != nil {
		configure(&cfg)
	}
	h.e, err = agentcore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.e.Close() })
	return h
}

// start starts a turn of user "alice".
func (h *harness) start(conv, content string) *agentcore.Turn {
	h.t.Helper()
	turn, err := h.e.StartTurn(h.t.Context(), agentcore.TurnRequest{User: "alice", Conversation: conv, Content: content})
	if err != nil {
		h.t.Fatalf("StartTurn: %v", err)
	}
	return turn
}

// wait waits for the turn to end and returns its error.
func (h *harness) wait(turn *agentcore.Turn) error {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 60*time.Second)
	defer cancel()
	err := turn.Wait(ctx)
	if ctx.Err() != nil {
		h.t.Fatalf("turn %s did not end", turn.ID)
	}
	return err
}

// event waits for the first event of type typ in conv and returns it.
func (h *harness) event(conv, typ string) agentcore.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 30*time.Second)
	defer cancel()
	for ev := range h.e.Subscribe(ctx, conv, 0) {
		if ev.Type == typ {
			return ev
		}
	}
	h.t.Fatalf("no %s event in %s", typ, conv)
	return agentcore.Event{}
}

// pendingApproval waits for the next approval_pending event after seq
// and returns the approval.
func (h *harness) pendingApproval(conv string, after int64) (agentcore.Approval, int64) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 30*time.Second)
	defer cancel()
	for ev := range h.e.Subscribe(ctx, conv, after) {
		if ev.Type == agentcore.EventApprovalPending {
			var a agentcore.Approval
			if err := json.Unmarshal(ev.Data, &a); err != nil {
				h.t.Fatal(err)
			}
			return a, ev.Seq
		}
	}
	h.t.Fatalf("no approval_pending event in %s", conv)
	return agentcore.Approval{}, 0
}

// types lists the types of conv's events, in order.
func (h *harness) types(conv string) []string {
	var out []string
	for _, ev := range h.store.AllEvents(conv) {
		out = append(out, ev.Type)
	}
	return out
}

// toolResults returns the tool messages of conv, by tool call ID.
func (h *harness) toolResults(conv string) map[string]string {
	msgs, _ := h.store.Messages(context.Background(), conv)
	out := map[string]string{}
	for _, m := range msgs {
		if m.Role == agentcore.RoleTool {
			out[m.ToolCallID] = m.Content
		}
	}
	return out
}

// upper is the upper layer dir of conv (which may not exist yet).
func (h *harness) upper(conv string) string {
	return filepath.Join(h.dir, "layers", conv, "upper")
}

// shellCall is a tool call of shell.
func shellCall(id, command string) agentcore.ToolCall {
	b, _ := json.Marshal(map[string]string{"command": command})
	return agentcore.ToolCall{ID: id, Name: "shell", Arguments: string(b)}
}

// call is a tool call with arguments v.
func call(id, name string, v any) agentcore.ToolCall {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return agentcore.ToolCall{ID: id, Name: name, Arguments: string(b)}
}

func alwaysAllow(c *agentcore.Config) { c.ShellAlwaysAllow = true }

func hasAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
