package agentcore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// recorder is a UsageRecorder that keeps the records; refuse, if set,
// answers the Allow calls (n counts them from 0).
type recorder struct {
	mu      sync.Mutex
	records []agentcore.UsageRecord
	allows  int
	refuse  func(n int) error
	fail    error // Record's answer
}

func (r *recorder) Allow(ctx context.Context, user string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.allows
	r.allows++
	if r.refuse != nil {
		return r.refuse(n)
	}
	return nil
}

func (r *recorder) Record(ctx context.Context, u agentcore.UsageRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, u)
	return r.fail
}

func (r *recorder) get() ([]agentcore.UsageRecord, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]agentcore.UsageRecord(nil), r.records...), r.allows
}

// errQuota is a refusal as the daemon's quota makes one.
var errQuota = fmt.Errorf("%w: 120 of 100 tokens used today", agentcore.ErrQuotaExceeded)

// events are the conversation's stored events.
func (h *harness) events(conv string) []agentcore.Event {
	h.t.Helper()
	evs, err := h.store.Events(h.t.Context(), conv, 0, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// Each model call is recorded with its user, conversation and turn (the
// in-process model reports nothing: estimates, marked so), Allow is
// asked before the turn and before each later call, and the turn's
// total is a turn_usage event just before turn_finished.
func TestUsageRecorded(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{
		{Text: "Calling.", ToolCalls: []agentcore.ToolCall{{Name: "no_such_tool"}}},
		{Text: "Done."},
	}}, func(c *agentcore.Config) { c.Usage = rec })
	turn := h.start("c", "hi")
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	rs, allows := rec.get()
	if len(rs) != 2 || allows != 2 {
		t.Fatalf("%d records, %d Allow calls; want 2 and 2", len(rs), allows)
	}
	var sum agentcore.TurnUsage
	for i, r := range rs {
		if r.User != "alice" || r.Conversation != "c" || r.Turn != turn.ID || r.Agent != "" || r.Endpoint != "" || r.Reported || r.PromptTokens == 0 || r.CompletionTokens == 0 || r.Time.IsZero() {
			t.Errorf("record %d: %+v; want alice's estimated call in turn %s", i, r, turn.ID)
		}
		sum.Calls++
		sum.PromptTokens += r.PromptTokens
		sum.CompletionTokens += r.CompletionTokens
		sum.Estimated++
	}
	evs := h.events("c")
	last, before := evs[len(evs)-1], evs[len(evs)-2]
	var tu agentcore.TurnUsage
	if err := json.Unmarshal(before.Data, &tu); err != nil || last.Type != agentcore.EventTurnFinished || before.Type != agentcore.EventTurnUsage || tu != sum {
		t.Errorf("last events %s %s %s; want turn_usage %+v, then turn_finished", before.Type, before.Data, last.Type, sum)
	}
}

// A user past a quota is refused before anything happens: StartTurn
// returns Allow's error, no message is stored, the model is not called.
func TestQuotaRefusesTurn(t *testing.T) {
	rec := &recorder{refuse: func(int) error { return errQuota }}
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{{Text: "never"}}}, func(c *agentcore.Config) { c.Usage = rec })
	_, err := h.e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: "c", Content: "hi"})
	if !errors.Is(err, agentcore.ErrQuotaExceeded) || err.Error() != errQuota.Error() {
		t.Errorf("StartTurn: %v; want the quota's refusal as is", err)
	}
	msgs, _ := h.store.Messages(t.Context(), "c")
	if len(msgs) != 0 || len(h.events("c")) != 0 || len(h.llm.requests()) != 0 {
		t.Errorf("%d messages, %d events, %d model requests after the refusal; want none", len(msgs), len(h.events("c")), len(h.llm.requests()))
	}
	if h.e.Turn("c") != nil {
		t.Error("a refused turn is the conversation's running turn")
	}
}

// A turn that crosses the quota finishes the call that crossed it (its
// tool calls answered) and fails at its next model call, with the
// reason.
func TestQuotaRefusesNextCall(t *testing.T) {
	rec := &recorder{refuse: func(n int) error {
		if n > 0 {
			return errQuota
		}
		return nil
	}}
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{{Name: "no_such_tool"}}},
		{Text: "never"},
	}}, func(c *agentcore.Config) { c.Usage = rec })
	err := h.wait(h.start("c", "hi"))
	if !errors.Is(err, agentcore.ErrQuotaExceeded) {
		t.Errorf("turn: %v; want the quota's refusal", err)
	}
	if n := len(h.llm.requests()); n != 1 {
		t.Errorf("%d model requests; want 1", n)
	}
	evs := h.events("c")
	var failed struct{ Error string }
	json.Unmarshal(evs[len(evs)-1].Data, &failed)
	if evs[len(evs)-1].Type != agentcore.EventTurnFailed || !strings.Contains(failed.Error, "120 of 100 tokens used today") {
		t.Errorf("last event %s %s; want turn_failed naming the quota", evs[len(evs)-1].Type, evs[len(evs)-1].Data)
	}
	msgs, _ := h.store.Messages(t.Context(), "c")
	if len(msgs) != 3 || msgs[2].Role != agentcore.RoleTool {
		t.Errorf("history %+v; want the question, the call and its answer", msgs)
	}
}

// A reply cut short (the turn cancelled while it streamed) is recorded
// as an estimate of what it had sent: cancelling just before the usage
// report does not make a call free.
func TestUsageOfCancelledCall(t *testing.T) {
	rec := &recorder{}
	const partial = "A partial answer"
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{{Text: partial, Stall: true}}}, func(c *agentcore.Config) { c.Usage = rec })
	turn := h.start("c", "hi")
	// The text comes in pieces: cancel once all of it was shown.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var shown strings.Builder
	for ev := range h.e.Subscribe(ctx, "c", 0) {
		if ev.Type != agentcore.EventTextDelta {
			continue
		}
		var d agentcore.TextDelta
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		if shown.WriteString(d.Text); shown.String() == partial {
			break
		}
	}
	if shown.String() != partial {
		t.Fatalf("shown %q; want %q", shown.String(), partial)
	}
	turn.Cancel()
	if err := h.wait(turn); !errors.Is(err, context.Canceled) {
		t.Fatalf("turn: %v; want cancelled", err)
	}
	rs, _ := rec.get()
	if len(rs) != 1 || rs[0].Reported || rs[0].PromptTokens == 0 || rs[0].CompletionTokens != (len("assistant")+len(partial)+2)/3 {
		t.Fatalf("records %+v; want one estimate of the partial reply", rs)
	}
	evs := h.events("c")
	if evs[len(evs)-2].Type != agentcore.EventTurnUsage || evs[len(evs)-1].Type != agentcore.EventTurnCancelled {
		t.Errorf("last events %s, %s; want turn_usage, turn_cancelled", evs[len(evs)-2].Type, evs[len(evs)-1].Type)
	}
}

// A call whose usage cannot be recorded is not followed by another.
func TestUsageRecordFailureStopsTurn(t *testing.T) {
	rec := &recorder{fail: errors.New("disk full")}
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{{Name: "no_such_tool"}}},
		{Text: "never"},
	}}, func(c *agentcore.Config) { c.Usage = rec })
	err := h.wait(h.start("c", "hi"))
	if err == nil || !strings.Contains(err.Error(), "could not be recorded") || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("turn: %v; want the recording failure", err)
	}
	if n := len(h.llm.requests()); n != 1 {
		t.Errorf("%d model requests; want 1", n)
	}
}

// A subagent's calls are recorded under its parent's turn with the
// subagent's ID, asked about before each (its first too), and counted
// in the parent turn's total.
func TestUsageOfSubagent(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, &llmtest.Script{
		Steps: []llmtest.Step{
			{ToolCalls: []agentcore.ToolCall{{Name: "delegate", Arguments: `{"task":"SUBTASK-U: say hi"}`}}},
			{Text: "Done."},
		},
		Branches: []llmtest.Branch{{Match: "SUBTASK-U", Steps: []llmtest.Step{{Text: "hi"}}}},
	}, func(c *agentcore.Config) { c.Subagents, c.Usage = agentcore.SubagentsShared, rec })
	turn := h.start("c", "delegate it")
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	rs, allows := rec.get()
	if len(rs) != 3 || allows != 3 {
		t.Fatalf("%d records, %d Allow calls; want 3 and 3", len(rs), allows)
	}
	if rs[0].Agent != "" || !strings.HasPrefix(rs[1].Agent, "sub_") || rs[2].Agent != "" || rs[1].Turn != turn.ID {
		t.Errorf("records' agents and turns: %+v; want the subagent's second, under turn %s", rs, turn.ID)
	}
	evs := h.events("c")
	var tu agentcore.TurnUsage
	json.Unmarshal(evs[len(evs)-2].Data, &tu)
	if evs[len(evs)-2].Type != agentcore.EventTurnUsage || tu.Calls != 3 {
		t.Errorf("turn_usage %s %+v; want 3 calls", evs[len(evs)-2].Type, tu)
	}
}
