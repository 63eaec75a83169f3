package agentcore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/randid"
)

// pending is an approval a turn waits on.
type pending struct {
	t    *Turn
	mu   sync.Mutex // guards a.Status and the decision fields
	a    Approval
	done chan struct{} // closed once settled
}

// errDenied and friends are what the model reads when a command did not
// run; they are not errors of the engine.
var (
	errDenied  = errors.New("the user denied this command; it was not run. Ask the user or try another approach")
	errExpired = errors.New("the approval request expired without a decision; the command was not run")
)

// gate asks for approval of a before anything is executed and returns nil
// once it is approved, or the reason it is not.
func (e *Engine) gate(t *Turn, call *Call, a Action) error {
	if e.cfg.ShellAlwaysAllow && call.Name == "shell" {
		return nil
	}
	allow, err := e.alwaysAllowed(t.ctx, t.c, call.Name)
	if err != nil {
		return err
	}
	if allow {
		return nil
	}
	now := time.Now().UTC()
	p := &pending{t: t, done: make(chan struct{}), a: Approval{
		ID: randid.New("appr_"), User: t.User, Conversation: t.Conversation, Turn: t.ID, ToolCallID: call.ID,
		Tool: call.Name, Agent: t.agent(), Command: a.Command, Kind: a.Kind, Cwd: a.Cwd, Background: a.Background,
		Created: now, Expires: now.Add(e.cfg.ApprovalTimeout), Status: ApprovalPending,
	}}
	p.a.Invisible, p.a.CommandShown = invisibleChars(a.Command)
	if e.cfg.Approver != nil {
		v, err := e.cfg.Approver.Review(t.ctx, p.a)
		switch {
		case err != nil:
			t.log.Warn("approver failed; asking the user", "err", err)
		case v.Decision != "":
			if !v.Decision.valid() {
				return fmt.Errorf("the approver's decision %q is unknown, so the command was not run", v.Decision)
			}
			p.a.Status, p.a.Decision, p.a.DecidedBy, p.a.Decided, p.a.Rule = ApprovalDecided, v.Decision, "approver", now, v.Rule
			if err := e.cfg.Store.SaveApproval(t.ctx, p.a); err != nil {
				return fmt.Errorf("recording the approval failed, so the command was not run: %w", err)
			}
			e.emit(t.c, t.ID, t.red, t.log, EventApprovalDecided, p.a)
			return e.decided(t, call, p.a)
		default:
			p.a.ProposedRule = v.ProposedRule
		}
	}
	if err := e.cfg.Store.SaveApproval(t.ctx, p.a); err != nil {
		return fmt.Errorf("recording the approval request failed, so the command was not run: %w", err)
	}
	// Once p is in awaiting, Decide may change p.a: use this copy.
	asked := p.a
	e.mu.Lock()
	e.awaiting[p.a.ID] = p
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.awaiting, asked.ID)
		e.mu.Unlock()
	}()
	e.emit(t.c, t.ID, t.red, t.log, EventApprovalPending, asked)

	timer := time.NewTimer(time.Until(asked.Expires))
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		e.settle(p, ApprovalExpired, "", "")
	case <-t.ctx.Done():
		e.settle(p, ApprovalCancelled, "", "")
	}
	p.mu.Lock()
	res := p.a
	p.mu.Unlock()
	return e.decided(t, call, res)
}

// decided is the gate's answer for the settled approval res.
func (e *Engine) decided(t *Turn, call *Call, res Approval) error {
	switch {
	case res.Status == ApprovalExpired:
		return errExpired
	case res.Status == ApprovalCancelled:
		return context.Cause(t.ctx)
	case res.Decision == DecisionDeny:
		return errDenied
	case res.Decision == DecisionAlwaysAllow:
		t.c.mu.Lock()
		t.c.alwaysAllow[call.Name] = true
		t.c.mu.Unlock()
	}
	return nil
}

// alwaysAllowed reports whether the conversation's owner chose "always
// allow" for the tool, reading the stored decisions once.
func (e *Engine) alwaysAllowed(ctx context.Context, c *conv, tool string) (bool, error) {
	c.mu.Lock()
	loaded := c.alwaysAllow != nil
	allow := c.alwaysAllow[tool]
	c.mu.Unlock()
	if loaded {
		return allow, nil
	}
	as, err := e.cfg.Store.Approvals(ctx, c.id)
	if err != nil {
		return false, fmt.Errorf("reading the conversation's approvals failed, so the command was not run: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.alwaysAllow == nil {
		c.alwaysAllow = map[string]bool{}
	}
	for _, a := range as {
		if a.Status == ApprovalDecided && a.Decision == DecisionAlwaysAllow {
			c.alwaysAllow[a.Tool] = true
		}
	}
	return c.alwaysAllow[tool], nil
}

// settle moves p out of pending, once: it stores and emits the outcome
// and wakes the gate. A decision after the expiry time counts as expiry.
func (e *Engine) settle(p *pending, status ApprovalStatus, d Decision, by string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.a.Status != ApprovalPending {
		return fmt.Errorf("%w: it is %s", ErrApprovalDecided, describe(p.a))
	}
	now := time.Now().UTC()
	late := status == ApprovalDecided && now.After(p.a.Expires)
	if late {
		status, d, by = ApprovalExpired, "", ""
	}
	p.a.Status, p.a.Decision, p.a.DecidedBy, p.a.Decided = status, d, by, now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.cfg.Store.SaveApproval(ctx, p.a); err != nil {
		// The decision still holds in memory; the audit record is what
		// is missing.
		p.t.log.Error("storing the approval decision failed", "approval", p.a.ID, "err", err)
	}
	e.emit(p.t.c, p.t.ID, p.t.red, p.t.log, EventApprovalDecided, p.a)
	close(p.done)
	if late {
		return fmt.Errorf("%w: it expired at %s", ErrApprovalDecided, p.a.Expires.Format(time.RFC3339))
	}
	return nil
}

func describe(a Approval) string {
	if a.Status == ApprovalDecided {
		return "decided (" + string(a.Decision) + ")"
	}
	return string(a.Status)
}

// Decide records user's decision on the pending approval id of
// conversation, and the waiting command runs (approve, always_allow) or
// is refused (deny). An unknown approval, or one of another user or
// conversation, is the same error wrapping ErrNotFound. An approval that
// was already decided, expired or withdrawn (its turn ended) fails with
// ErrApprovalDecided: approvals are single-use.
func (e *Engine) Decide(ctx context.Context, user, conversation, id string, d Decision) error {
	if !d.valid() {
		return fmt.Errorf("agentcore: unknown decision %q (want %q, %q or %q)", d, DecisionApprove, DecisionDeny, DecisionAlwaysAllow)
	}
	notFound := fmt.Errorf("agentcore: approval %q: %w", id, ErrNotFound)
	e.mu.Lock()
	p := e.awaiting[id]
	e.mu.Unlock()
	if p != nil {
		p.mu.Lock()
		mine := p.a.User == user && p.a.Conversation == conversation
		p.mu.Unlock()
		if !mine {
			return notFound
		}
		return e.settle(p, ApprovalDecided, d, user)
	}
	a, err := e.cfg.Store.Approval(ctx, id)
	if errors.Is(err, ErrNotFound) || err == nil && (a.User != user || a.Conversation != conversation) {
		return notFound
	}
	if err != nil {
		return fmt.Errorf("agentcore: approval %q: %w", id, err)
	}
	if a.Status == ApprovalPending {
		// Stored as pending but no turn waits: its server stopped.
		return fmt.Errorf("%w: no turn waits for it any more (the server restarted)", ErrApprovalDecided)
	}
	return fmt.Errorf("%w: it is %s", ErrApprovalDecided, describe(a))
}
