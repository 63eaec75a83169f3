package agentcore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrQuotaExceeded is wrapped by the errors of a UsageRecorder's Allow
// that refuse a user's turn or model call because a quota of theirs is
// used up.
var ErrQuotaExceeded = errors.New("agentcore: usage quota exceeded")

// UsageRecorder accounts for what model calls use, and may refuse them
// (a quota). Both methods are called from the turns' goroutines,
// concurrently; they must be safe for that and quick.
type UsageRecorder interface {
	// Allow is asked before a turn starts (before its message is
	// stored: StartTurn returns the error as is) and before each later
	// model call of the turn and its subagents (the turn fails with the
	// error's text). A nil error allows; a refusal should wrap
	// ErrQuotaExceeded and say when the user may go on.
	Allow(ctx context.Context, user string) error
	// Record is told what one model call used once it ended: the
	// endpoint's numbers, or the engine's estimate (Reported false),
	// also for a call cut short after its reply began (cancelled, broken
	// off). An error is logged and refuses the turn's later model calls:
	// a call that cannot be accounted for is not followed by more.
	Record(ctx context.Context, r UsageRecord) error
}

// UsageRecord is one model call's usage and what it belongs to.
type UsageRecord struct {
	User         string
	Conversation string
	Turn         string
	// Agent names the subagent whose call it was; empty for the
	// conversation's own agent.
	Agent string
	// Endpoint is the model's endpoint, if its LLM names it with an
	// Endpoint() string method (integrations/llm's Client does: its base
	// URL without credentials); empty otherwise.
	Endpoint string
	Usage
	// Time is when the call ended.
	Time time.Time
}

// turnUsage sums a turn's usage; a subagent adds to its parent's.
type turnUsage struct {
	mu  sync.Mutex
	sum TurnUsage
	// err is Record's first failure: it refuses the turn's later calls.
	err error
}

// endpointNamer is an LLM that names its endpoint (UsageRecord.Endpoint);
// modelNamer one that names its model, for a call cut short before the
// Usage chunk that names it.
type (
	endpointNamer interface{ Endpoint() string }
	modelNamer    interface{ Model() string }
)

// recordUsage emits a model call's usage event, adds it to its turn's
// total and tells Config.Usage.
func (e *Engine) recordUsage(t *Turn, u Usage) {
	e.emit(t.c, t.ID, t.red, t.log, EventUsage, u)
	tu := t.usage
	tu.mu.Lock()
	tu.sum.Calls++
	tu.sum.PromptTokens += u.PromptTokens
	tu.sum.CompletionTokens += u.CompletionTokens
	if !u.Reported {
		tu.sum.Estimated++
	}
	tu.mu.Unlock()
	if e.cfg.Usage == nil {
		return
	}
	r := UsageRecord{User: t.User, Conversation: t.Conversation, Turn: t.ID, Usage: u, Time: time.Now().UTC()}
	if t.sub != nil {
		r.Agent = t.sub.id
	}
	if n, ok := inner(t.llm).(endpointNamer); ok {
		r.Endpoint = n.Endpoint()
	}
	// Not the turn's context: a cancelled call is accounted for too.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 10*time.Second)
	defer cancel()
	if err := e.cfg.Usage.Record(ctx, r); err != nil {
		t.log.Error("recording a model call's usage failed; the turn makes no more model calls", "err", err)
		tu.mu.Lock()
		if tu.err == nil {
			tu.err = err
		}
		tu.mu.Unlock()
	}
}

// cutUsage records the estimated usage of a call whose reply broke off
// after it began (text or a tool call arrived): the endpoint did the
// work, and a turn cancelled just before the usage report must not go
// unaccounted.
func (e *Engine) cutUsage(t *Turn, req Request, text string, calls []ToolCall, u Usage) {
	if text == "" && len(calls) == 0 {
		return
	}
	if !u.Reported {
		u.PromptTokens, u.CompletionTokens = estimateTokens(req.Messages, req.Tools), estimateTokens([]Message{{Role: RoleAssistant, Content: text, ToolCalls: calls}}, nil)
	}
	if n, ok := inner(t.llm).(modelNamer); ok && u.Model == "" {
		u.Model = n.Model()
	}
	e.recordUsage(t, u)
}

// allowCall asks Config.Usage whether the turn may call the model again.
func (e *Engine) allowCall(t *Turn) error {
	tu := t.usage
	tu.mu.Lock()
	err := tu.err
	tu.mu.Unlock()
	if err != nil {
		return fmt.Errorf("the usage of the last model call could not be recorded, so no more model calls are made: %w", err)
	}
	if e.cfg.Usage == nil {
		return nil
	}
	return e.cfg.Usage.Allow(t.ctx, t.User)
}

// emitTurnUsage emits the turn's total, if it called the model.
func (e *Engine) emitTurnUsage(t *Turn) {
	t.usage.mu.Lock()
	sum := t.usage.sum
	t.usage.mu.Unlock()
	if sum.Calls > 0 {
		e.emit(t.c, t.ID, t.red, t.log, EventTurnUsage, sum)
	}
}
