package agentcore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// Each turn checkpoints the conversation's upper layer as it begins
// (named by the turn's ID: what RevertTurn and a branch from the turn's
// user message go back to) and is owed one of the tree it leaves, once no
// command runs in the sandbox (ID + ".after": what a fork from the turn's
// reply starts from). That one is taken only when needed: nothing writes
// the layer between turns but a background job (with one running none is
// owed) and a restore, so the next turn's begin checkpoint is the same
// tree (Fork names it instead), and a restore, a Fork from the reply and
// Close take the owed one first. A checkpoint that nothing changed since
// the last one costs a walk of the upper layer and no copy. The one as a
// turn begins is taken even while a background job of an earlier turn
// runs: then each file is consistent, not the tree as a whole.

// BranchStore is a Store whose history branches: a turn started From an
// earlier user message continues from the message before it, and the old
// branch stays readable. Messages returns the active branch only, and
// sets each message's ID and Parent.
type BranchStore interface {
	Store
	// Rewind makes the active branch end just before message id, which
	// must be on it (else an error wrapping ErrNotFound): the next
	// AppendMessages starts a new branch there. Nothing is deleted.
	Rewind(ctx context.Context, conversation, id string) error
	// AllMessages returns the messages of every branch of the
	// conversation in the order they were written, with ID and Parent.
	AllMessages(ctx context.Context, conversation string) ([]Message, error)
}

// Errors of checkpoints.
var (
	// ErrNoCheckpoint: the workspace has no checkpoint for that point (a
	// turn that never ran here, one from before checkpoints were kept,
	// or one dropped as the oldest past the limits). Nothing changed.
	ErrNoCheckpoint = errors.New("agentcore: no checkpoint of the workspace for that point")
	// ErrNotUserMessage refuses a branch from a message that is not the
	// user's: regenerate a reply by naming the user message it answers.
	ErrNotUserMessage = errors.New("agentcore: a branch starts at a user message")
)

const afterSuffix = ".after"

// checkpoint records the conversation's upper layer as name, logging a
// failure: a turn goes on without its checkpoint (reverting to it will
// say there is none).
func (e *Engine) checkpoint(c *conv, name string) error {
	// The layer of the last checkpoint, unless it was removed since
	// (then it is made again, as for the first): Layers.Get would only
	// check that its directories exist.
	if l := c.cpLayer.Load(); l != nil {
		_, err := l.Checkpoint(name, e.cfg.Checkpoints)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			if err != nil {
				e.log.Error("checkpointing a workspace failed", "conversation", c.id, "checkpoint", name, "err", err)
			}
			return err
		}
	}
	l, err := e.layer(c.id)
	if err == nil {
		_, err = l.Checkpoint(name, e.cfg.Checkpoints)
	}
	if err != nil {
		e.log.Error("checkpointing a workspace failed", "conversation", c.id, "checkpoint", name, "err", err)
		return err
	}
	c.cpLayer.Store(l)
	return nil
}

// turnCheckpoint checkpoints the workspace as turn t begins, under the
// turn's ID. The tree is the one the last turn was owed a checkpoint of,
// if it is: Fork names this one for it.
func (e *Engine) turnCheckpoint(t *Turn) {
	c := t.c
	c.wsMu.Lock()
	owed := e.takeOwed(c)
	if owed == "" {
		c.wsMu.Unlock()
		e.checkpoint(c, t.ID)
		return
	}
	// Held: a Fork from the last reply waits for the name.
	defer c.wsMu.Unlock()
	if e.checkpoint(c, t.ID) == nil {
		c.afterOf, c.afterAs = owed, t.ID
	}
}

// owe records that the workspace as it is now is checkpoint name, to be
// taken when needed (see above). The caller holds c.wsMu and the Engine
// (a turn's count of e.wg): Close takes it.
func (e *Engine) owe(c *conv, name string) {
	e.takeOwed(c)
	e.wg.Add(1)
	c.owed = name
	c.owedStop = context.AfterFunc(e.ctx, func() {
		defer e.wg.Done()
		c.wsMu.Lock()
		defer c.wsMu.Unlock()
		e.payOwed(c)
	})
}

// takeOwed returns the name of the checkpoint owed, if any, and clears
// it. The caller holds c.wsMu.
func (e *Engine) takeOwed(c *conv) string {
	name := c.owed
	if name != "" && c.owedStop() {
		e.wg.Done() // Close will not take it
	}
	c.owed, c.owedStop = "", nil
	return name
}

// payOwed takes the checkpoint owed, if any, before something changes the
// workspace or names it. The caller holds c.wsMu. A layer removed since
// is not made again: its checkpoints went with it.
func (e *Engine) payOwed(c *conv) {
	name := e.takeOwed(c)
	if name == "" {
		return
	}
	l, err := e.cfg.Layers.Get(c.id)
	if err == nil {
		_, err = l.Checkpoint(name, e.cfg.Checkpoints)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.log.Error("checkpointing a workspace failed", "conversation", c.id, "checkpoint", name, "err", err)
	}
}

// dropOwed forgets the checkpoint owed and what names it: the workspace
// is discarded. The caller holds c.wsMu.
func (e *Engine) dropOwed(c *conv) {
	e.takeOwed(c)
	c.afterOf, c.afterAs = "", ""
}

// afterName returns the checkpoint that holds conversation's tree named
// name (a turn's ".after"), taking it if it is owed.
func (e *Engine) afterName(conversation, name string) string {
	e.mu.Lock()
	c := e.convs[conversation]
	e.mu.Unlock()
	if c == nil {
		return name
	}
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	if c.afterOf == name {
		return c.afterAs
	}
	if c.owed == name {
		e.payOwed(c)
	}
	return name
}

// beginCheckpoint runs as turn t begins, before its user message is
// stored: it branches from message from, if set. The turn's own
// goroutine then checkpoints the workspace under the turn's ID before
// its first step (so that StartTurn does not wait for the walk).
func (e *Engine) beginCheckpoint(ctx context.Context, t *Turn, from string) error {
	if from != "" {
		bs, ok := e.cfg.Store.(BranchStore)
		if !ok {
			return errors.New("agentcore: this Store keeps no branches, so a message cannot be edited or regenerated")
		}
		m, _, err := e.findMessage(ctx, t.Conversation, from)
		if err != nil {
			return err
		}
		if m.Role != RoleUser {
			return fmt.Errorf("%w: message %s is a %s message", ErrNotUserMessage, from, m.Role)
		}
		if err := e.restoreWorkspace(t.c, m.Turn); err != nil {
			return err
		}
		if err := bs.Rewind(ctx, t.Conversation, from); err != nil {
			return err
		}
		e.emit(t.c, t.ID, t.red, t.log, EventWorkspaceReverted, WorkspaceReverted{Turn: m.Turn, Reason: "branch"})
	}
	return nil
}

// endCheckpoint owes turn t its checkpoint as it ends, unless a
// background job still runs in its sandbox (its writes would tear the
// checkpoint; the next turn's begins after them).
func (e *Engine) endCheckpoint(t *Turn) {
	if t.sub != nil {
		return
	}
	c := t.c
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	if c.ws != nil && c.ws.host {
		return
	}
	if c.ws != nil {
		for _, j := range c.ws.sess.Jobs() {
			if j.Running {
				return
			}
		}
	}
	e.owe(c, t.ID+afterSuffix)
}

// findMessage returns message id of the conversation's active history and
// its index there.
func (e *Engine) findMessage(ctx context.Context, conversation, id string) (Message, []Message, error) {
	msgs, err := e.cfg.Store.Messages(ctx, conversation)
	if err != nil {
		return Message{}, nil, fmt.Errorf("agentcore: reading the conversation: %w", err)
	}
	for i, m := range msgs {
		if m.ID == id {
			return m, msgs[i:], nil
		}
	}
	return Message{}, nil, fmt.Errorf("agentcore: message %q is not in the conversation's active history: %w", id, ErrNotFound)
}

// restoreWorkspace puts the workspace back to checkpoint name: the
// sandbox is closed first (the next command starts one that mounts the
// restored layer). It refuses with ErrWorkspaceBusy while a background job
// runs. The caller holds off turns.
func (e *Engine) restoreWorkspace(c *conv, name string) error {
	if name == "" {
		return fmt.Errorf("%w: the message was written before checkpoints were kept", ErrNoCheckpoint)
	}
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	if err := c.closeSandbox(); err != nil {
		return err
	}
	e.payOwed(c)
	l, err := e.cfg.Layers.Get(c.id)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: the workspace was discarded since", ErrNoCheckpoint)
	}
	if err != nil {
		e.log.Error("opening a workspace layer failed", "conversation", c.id, "err", err)
		return errors.New("the conversation's workspace layer could not be opened; the server log has the details")
	}
	unlock, err := overlay.Lock(l.Upper)
	if errors.Is(err, overlay.ErrInUse) {
		return fmt.Errorf("%w: another sandbox has it mounted", ErrWorkspaceBusy)
	}
	if err != nil {
		e.log.Error("locking a workspace layer failed", "conversation", c.id, "err", err)
		return errors.New("the conversation's workspace could not be locked; the server log has the details")
	}
	defer unlock()
	err = l.Restore(name)
	if errors.Is(err, overlay.ErrNoCheckpoint) {
		return fmt.Errorf("%w: it was dropped as the oldest, or never taken", ErrNoCheckpoint)
	}
	if err != nil {
		e.log.Error("restoring a workspace checkpoint failed", "conversation", c.id, "checkpoint", name, "err", err)
		return errors.New("the workspace could not be restored; the server log has the details")
	}
	return nil
}

// hold reserves the conversation against turns (ErrTurnInProgress while
// one runs) for the length of f.
func (e *Engine) hold(conversation string, f func(c *conv) error) error {
	c := e.conv(conversation)
	c.mu.Lock()
	switch {
	case c.gone:
		c.mu.Unlock()
		return fmt.Errorf("agentcore: conversation %q is deleted: %w", conversation, ErrNotFound)
	case c.turn != nil || c.held:
		c.mu.Unlock()
		return ErrTurnInProgress
	}
	c.held = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.held = false
		c.mu.Unlock()
	}()
	return f(c)
}

// RevertTurn puts the conversation's workspace back to what it was when
// turn began, undoing that turn's changes and every later one, and emits
// workspace_reverted. The history is left as it is. It refuses with
// ErrTurnInProgress while a turn runs, ErrWorkspaceBusy while a
// background job does, and ErrNoCheckpoint for a turn it has no
// checkpoint of (one of another conversation included). The caller
// checks that user owns the conversation.
func (e *Engine) RevertTurn(ctx context.Context, user, conversation, turn string) error {
	return e.hold(conversation, func(c *conv) error {
		if err := e.restoreWorkspace(c, turn); err != nil {
			return err
		}
		e.emit(c, "", nil, e.log, EventWorkspaceReverted, WorkspaceReverted{Turn: turn, Reason: "revert"})
		return nil
	})
}

// Fork copies conversation src's history up to message id, with the
// workspace as it was there, into conversation dst, which must have no
// messages and no workspace changes yet. From a user message, dst's
// history ends just before it and its workspace is the one that message's
// turn began with; from any other message, dst has the whole of that
// message's turn and the workspace as the turn left it. It refuses with
// ErrNoCheckpoint where there is no checkpoint of that point. The caller
// checks that user owns both conversations.
func (e *Engine) Fork(ctx context.Context, user, src, id, dst string) error {
	m, rest, err := e.findMessage(ctx, src, id)
	if err != nil {
		return err
	}
	all, err := e.cfg.Store.Messages(ctx, src)
	if err != nil {
		return fmt.Errorf("agentcore: reading the conversation: %w", err)
	}
	end := len(all) - len(rest) // index of m
	var name string
	if m.Role == RoleUser {
		name = m.Turn
	} else {
		end++
		for end < len(all) && all[end].Role != RoleUser {
			end++
		}
		name = m.Turn + afterSuffix
		if end < len(all) && all[end].Turn != "" {
			name = all[end].Turn // the same tree, and kept longer
		}
	}
	if m.Turn == "" {
		return fmt.Errorf("%w: the message was written before checkpoints were kept", ErrNoCheckpoint)
	}
	if name == m.Turn+afterSuffix {
		name = e.afterName(src, name)
	}
	from, err := e.cfg.Layers.Get(src)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: the workspace was discarded since", ErrNoCheckpoint)
	}
	if err != nil {
		e.log.Error("opening a workspace layer failed", "conversation", src, "err", err)
		return errors.New("the conversation's workspace layer could not be opened; the server log has the details")
	}
	to, err := e.layer(dst)
	if err != nil {
		return err
	}
	err = from.Fork(name, to)
	if errors.Is(err, overlay.ErrNoCheckpoint) {
		return fmt.Errorf("%w: it was dropped as the oldest, or never taken", ErrNoCheckpoint)
	}
	if err != nil {
		e.log.Error("forking a workspace checkpoint failed", "conversation", src, "checkpoint", name, "err", err)
		return errors.New("the workspace could not be copied; the server log has the details")
	}
	msgs := make([]Message, end)
	for i, m := range all[:end] {
		m.ID, m.Parent = "", ""
		msgs[i] = m
	}
	if err := e.cfg.Store.AppendMessages(ctx, dst, msgs...); err != nil {
		return fmt.Errorf("agentcore: storing the forked history: %w", err)
	}
	return nil
}
