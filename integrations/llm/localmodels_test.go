package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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

// What local models emit, over the real HTTP path: the engine, this
// package's Client and llmtest's server streaming as vLLM and llama.cpp
// do. Assertions are on the events and on the request bodies the server
// recorded.

// engineOver is an engine whose model is the client of srv, over an
// in-memory store and a workspace of one file.
func engineOver(t *testing.T, srv *llmtest.Server, configure func(*agentcore.Config)) (*agentcore.Engine, *agentcoretest.MemStore) {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() { overlay.RemoveAll(dir) })
	lower := filepath.Join(dir, "lower")
	if err := os.MkdirAll(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "README.md"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	layers, err := overlay.Open(filepath.Join(dir, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	store := agentcoretest.NewMemStore()
	cfg := agentcore.Config{LLM: newClient(t, fast(srv.URL())), Store: store, Workspaces: oneLower(lower), Layers: layers}
	if configure != nil {
		configure(&cfg)
	}
	e, err := agentcore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, store
}

// runTurn runs one turn of conv to its end and returns its error.
func runTurn(t *testing.T, e *agentcore.Engine, conv, content string) error {
	t.Helper()
	turn, err := e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: conv, Content: content})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	err = turn.Wait(ctx)
	if ctx.Err() != nil {
		t.Fatal("the turn did not end")
	}
	return err
}

// eventsOf returns conv's events of type typ, decoded into T.
func eventsOf[T any](t *testing.T, store *agentcoretest.MemStore, conv, typ string) []T {
	t.Helper()
	var out []T
	for _, ev := range store.AllEvents(conv) {
		if ev.Type != typ {
			continue
		}
		var v T
		if err := json.Unmarshal(ev.Data, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// bodyMessages decodes the messages of a recorded request body.
func bodyMessages(t *testing.T, body json.RawMessage) []map[string]json.RawMessage {
	t.Helper()
	var b struct {
		Messages []map[string]json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatal(err)
	}
	return b.Messages
}

// A reasoning model's thinking (reasoning_content, or reasoning as newer
// vLLM names it) is streamed as reasoning_delta events, coalesced, before
// the text; stored bounded, with a note of what was cut; and never sent
// back to the model.
func TestReasoningOverHTTP(t *testing.T) {
	thinking := "The user greets me. " + strings.Repeat("I should answer briefly. ", 40)
	for _, field := range []string{"reasoning_content", "reasoning"} {
		t.Run(field, func(t *testing.T) {
			srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{
				{Reasoning: thinking, Text: "Hello!"},
				{Reasoning: strings.Repeat("é", 3000), Text: "Again."},
			}}, llmtest.Options{ReasoningField: field})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			e, store := engineOver(t, srv, func(c *agentcore.Config) { c.MaxReasoning = 4 << 10 })
			if err := runTurn(t, e, "c1", "hi"); err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			ds := eventsOf[agentcore.ReasoningDelta](t, store, "c1", agentcore.EventReasoningDelta)
			for _, d := range ds {
				got.WriteString(d.Text)
				if d.Omitted != 0 {
					t.Errorf("a reasoning_delta says %d bytes were cut from a reply within the cap", d.Omitted)
				}
			}
			if got.String() != thinking {
				t.Fatalf("reasoning deltas hold %q, want %q", got.String(), thinking)
			}
			// Coalesced: not a delta per streamed piece (the script
			// streams 4 characters a piece).
			if len(ds) > len(thinking)/40 {
				t.Errorf("%d reasoning_delta events for %d bytes: not coalesced", len(ds), len(thinking))
			}
			var order []string
			for _, ev := range store.AllEvents("c1") {
				if ev.Type == agentcore.EventReasoningDelta || ev.Type == agentcore.EventTextDelta {
					order = append(order, ev.Type)
				}
			}
			if order[0] != agentcore.EventReasoningDelta || order[len(order)-1] != agentcore.EventTextDelta {
				t.Errorf("events %v; want the reasoning first, then the text", order)
			}
			msgs, _ := store.Messages(t.Context(), "c1")
			if last := msgs[len(msgs)-1]; last.Content != "Hello!" {
				t.Errorf("stored reply %q; want the text alone", last.Content)
			}

			// The second turn's request carries the first reply without
			// its thinking; the second reply's thinking is cut at the cap.
			if err := runTurn(t, e, "c1", "hi again"); err != nil {
				t.Fatal(err)
			}
			bodies := srv.Bodies()
			if len(bodies) != 2 {
				t.Fatalf("%d requests, want 2", len(bodies))
			}
			if strings.Contains(string(bodies[1]), "answer briefly") || strings.Contains(string(bodies[1]), `"reasoning`) {
				t.Errorf("the second request sends the reasoning back:\n%s", bodies[1])
			}
			if m := bodyMessages(t, bodies[1]); string(m[2]["content"]) != `"Hello!"` {
				t.Errorf("the second request's assistant message %v; want the reply's text", m[2])
			}
			ds = eventsOf[agentcore.ReasoningDelta](t, store, "c1", agentcore.EventReasoningDelta)
			kept, last := 0, ds[len(ds)-1]
			for _, d := range ds {
				kept += len(d.Text)
			}
			kept -= len(thinking)
			if kept > 4<<10 || kept < 4<<10-1 || last.Omitted != 6000-kept || last.Text != "" {
				t.Errorf("of 6000 bytes of reasoning %d kept, last delta %+v; want 4 KiB (on a character boundary) and the rest counted", kept, last)
			}
		})
	}
}

// Invalid JSON arguments are answered with an error, and the history
// holds {} in their place: an endpoint that parses the history's
// arguments (older vLLM) would otherwise refuse every later request.
func TestInvalidArgumentsStoredAsEmptyObject(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{{ID: "bad", Name: "shell", Arguments: `{"command": "echo hi"`}}},
		{Expect: "invalid arguments for shell", Text: "Sorry."},
	}})
	defer srv.Close()
	e, store := engineOver(t, srv, nil)
	if err := runTurn(t, e, "c1", "go"); err != nil {
		t.Fatal(err)
	}
	bodies := srv.Bodies()
	if len(bodies) != 2 {
		t.Fatalf("%d requests, want 2", len(bodies))
	}
	msgs := bodyMessages(t, bodies[1])
	var calls []struct {
		ID       string
		Function struct{ Name, Arguments string }
	}
	if err := json.Unmarshal(msgs[len(msgs)-2]["tool_calls"], &calls); err != nil || len(calls) != 1 {
		t.Fatalf("the second request's assistant message %v: %v", msgs[len(msgs)-2], err)
	}
	if calls[0].Function.Arguments != "{}" || calls[0].Function.Name != "shell" {
		t.Errorf("the history re-sends the call as %+v; want shell with {}", calls[0])
	}
	if a, _ := store.Approvals(t.Context(), "c1"); len(a) != 0 {
		t.Errorf("approvals %+v: a call with invalid arguments asked for one", a)
	}
	req := eventsOf[map[string]string](t, store, "c1", agentcore.EventToolCallRequested)
	if len(req) != 1 || req[0]["arguments"] != "{}" {
		t.Errorf("tool_call_requested %v; want the arguments as {}", req)
	}
}

// A model without a native tool parser writes its calls as text: in
// text mode no tools field is sent, the system prompt describes the
// tools, the calls are parsed (a tag split across stream chunks too) and
// go through the approval gate like native ones, and the history goes
// back as text. A block that is not a call is answered as invalid.
func TestTextToolCallsOverHTTP(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(t.Context(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{
		{Text: "Let me check.\n<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"echo out-$((6*7))\"}}\n</tool_call>"},
		{Expect: "out-42", Text: "It printed out-42. <tool_call>{\"name\": \"shell\", \"arguments\": </tool_call> And more."},
		{Expect: "not a valid call", Text: "Done."},
	}})
	defer srv.Close()
	e, store := engineOver(t, srv, func(c *agentcore.Config) { c.ToolCalls = agentcore.ToolCallsText })
	turn, err := e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: "c1", Content: "run it"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var a agentcore.Approval
	for ev := range e.Subscribe(ctx, "c1", 0) {
		if ev.Type == agentcore.EventApprovalPending {
			json.Unmarshal(ev.Data, &a)
			break
		}
		if ev.Type == agentcore.EventTurnFinished || ev.Type == agentcore.EventTurnFailed {
			t.Fatalf("the turn ended (%s %s) without asking for an approval", ev.Type, ev.Data)
		}
	}
	if a.Command != "echo out-$((6*7))" || a.Tool != "shell" {
		t.Fatalf("approval %+v; want the text call's shell command waiting", a)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d model requests while the approval is pending, want 1", n)
	}
	if err := e.Decide(t.Context(), "alice", "c1", a.ID, agentcore.DecisionApprove); err != nil {
		t.Fatal(err)
	}
	if err := turn.Wait(ctx); err != nil {
		t.Fatalf("turn: %v", err)
	}
	bodies := srv.Bodies()
	if len(bodies) != 3 {
		t.Fatalf("%d requests, want 3", len(bodies))
	}
	var first map[string]json.RawMessage
	json.Unmarshal(bodies[0], &first)
	if _, ok := first["tools"]; ok {
		t.Error("text mode sent a tools field")
	}
	msgs := bodyMessages(t, bodies[0])
	var sys string
	json.Unmarshal(msgs[0]["content"], &sys)
	if !strings.Contains(sys, "<tools>") || !strings.Contains(sys, `"name":"shell"`) || !strings.Contains(sys, "<tool_call>") {
		t.Errorf("the system prompt does not describe the tools and the call format:\n%s", sys)
	}
	msgs = bodyMessages(t, bodies[1])
	var roles []string
	for _, m := range msgs {
		var r string
		json.Unmarshal(m["role"], &r)
		roles = append(roles, r)
		if _, ok := m["tool_calls"]; ok || r == "tool" {
			t.Errorf("text mode sent a native tool message %v", m)
		}
	}
	var call, result string
	json.Unmarshal(msgs[2]["content"], &call)
	json.Unmarshal(msgs[3]["content"], &result)
	if strings.Join(roles, " ") != "system user assistant user" || !strings.HasPrefix(call, "Let me check.\n<tool_call>\n") || !strings.Contains(result, "<tool_response>\nout-42") {
		t.Errorf("the second request: roles %v, the call %q, the result %q; want the call as a block in the reply and the result in a tool_response", roles, call, result)
	}
	stored, _ := store.Messages(t.Context(), "c1")
	if m := stored[1]; m.Content != "Let me check.\n" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Name != "shell" {
		t.Errorf("stored reply %+v; want the text and one shell call", m)
	}
	if m := stored[3]; m.Content != "It printed out-42.  And more." || len(m.ToolCalls) != 1 || !strings.Contains(stored[4].Content, "error: the <tool_call> block is not a valid call") {
		t.Errorf("stored %+v, answered %q; want the text around the malformed block and the block answered as an invalid call", m, stored[4].Content)
	}
	if as, _ := store.Approvals(t.Context(), "c1"); len(as) != 1 {
		t.Errorf("%d approvals; want only the valid call's", len(as))
	}
}

// The same call with the same arguments three times in a row (layout
// aside) stops the turn before the third runs, with turn_finished
// reason repeating and a message; the history answers every call, so
// the conversation goes on. Past max_steps the turn says so too.
func TestRepeatedCallStopsTurn(t *testing.T) {
	list := func(args string) llmtest.Step {
		return llmtest.Step{ToolCalls: []agentcore.ToolCall{{Name: "list_files", Arguments: args}}}
	}
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{
		list(`{"path": "."}`), list(`{"path":"."}`), list(`{ "path" : "." }`), {Text: "never"},
	}, Branches: []llmtest.Branch{{Match: "steps", Steps: []llmtest.Step{
		list(`{"path":"."}`), list(`{"path":"README.md"}`), list(`{"path":"."}`), {Text: "never"},
	}}}})
	defer srv.Close()
	e, store := engineOver(t, srv, func(c *agentcore.Config) { c.MaxSteps = 3 })
	err := runTurn(t, e, "c1", "loop")
	if !errors.Is(err, agentcore.ErrRepeating) {
		t.Fatalf("turn: %v; want ErrRepeating", err)
	}
	fin := eventsOf[map[string]string](t, store, "c1", agentcore.EventTurnFinished)
	if len(fin) != 1 || fin[0]["reason"] != "repeating" || !strings.Contains(fin[0]["message"], "list_files with the same arguments 3 times in a row") {
		t.Errorf("turn_finished %v; want reason repeating and a message naming the call", fin)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d model requests, want 3", n)
	}
	if out := eventsOf[map[string]string](t, store, "c1", agentcore.EventToolOutput); len(out) != 2 {
		t.Errorf("%d tool outputs; want 2: the third call is not run", len(out))
	}
	msgs, _ := store.Messages(t.Context(), "c1")
	if last := msgs[len(msgs)-1]; last.Role != agentcore.RoleTool || !strings.Contains(last.Content, "not run: the same call") {
		t.Errorf("the history ends with %+v; want the third call answered", last)
	}

	// Different calls in between: no repetition, the step budget ends
	// the turn and says so.
	err = runTurn(t, e, "c2", "steps")
	if !errors.Is(err, agentcore.ErrBudget) {
		t.Fatalf("turn: %v; want ErrBudget", err)
	}
	fin = eventsOf[map[string]string](t, store, "c2", agentcore.EventTurnFinished)
	if len(fin) != 1 || fin[0]["reason"] != "max_steps" || !strings.Contains(fin[0]["message"], "after 3 model calls") {
		t.Errorf("turn_finished %v; want reason max_steps and a message", fin)
	}
}

// In auto mode the tools are offered natively and a call the model
// writes as text anyway is run too, its history sent back natively; a
// model's own mode (WithToolCalls, a profile's) replaces the engine's.
func TestAutoToolCalls(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{
		{Text: `<tool_call>{"name": "list_files", "arguments": {"path": "."}}</tool_call>`},
		{Expect: "README.md", Text: "There is a README."},
	}})
	defer srv.Close()
	e, store := engineOver(t, srv, func(c *agentcore.Config) {
		c.ToolCalls = agentcore.ToolCallsNative
		c.LLM = agentcore.WithToolCalls(c.LLM, agentcore.ToolCallsAuto)
	})
	if err := runTurn(t, e, "c1", "what is there?"); err != nil {
		t.Fatal(err)
	}
	bodies := srv.Bodies()
	if len(bodies) != 2 {
		t.Fatalf("%d requests, want 2", len(bodies))
	}
	var first map[string]json.RawMessage
	json.Unmarshal(bodies[0], &first)
	if _, ok := first["tools"]; !ok {
		t.Error("auto mode sent no tools field")
	}
	msgs := bodyMessages(t, bodies[1])
	var role string
	json.Unmarshal(msgs[len(msgs)-1]["role"], &role)
	if _, ok := msgs[len(msgs)-2]["tool_calls"]; !ok || role != "tool" {
		t.Errorf("the second request ends with %v, %v; want the call and its result as native messages", msgs[len(msgs)-2], msgs[len(msgs)-1])
	}
	if out := eventsOf[map[string]string](t, store, "c1", agentcore.EventToolOutput); len(out) != 1 || !strings.Contains(out[0]["output"], "README.md") {
		t.Errorf("tool outputs %v; want list_files run", out)
	}
}
