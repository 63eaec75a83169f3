package agentcore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/randid"
)

// Subagent modes of Config.Subagents.
const (
	// SubagentsShared: a subagent works in its parent's workspace; what
	// it writes is there at once.
	SubagentsShared = "shared"
	// SubagentsIsolated: a subagent has its own sandbox and its own upper
	// layer over its parent's view; it returns a summary and its diff,
	// and nothing it wrote reaches the parent's workspace unless the
	// parent applies that diff.
	SubagentsIsolated = "isolated"
)

// history is where a turn's loop reads and writes its messages: the
// conversation in the Store, or a subagent's own.
type history interface {
	messages(ctx context.Context) ([]Message, error)
	append(ctx context.Context, msgs ...Message) error
}

type storeHistory struct {
	s    Store
	conv string
	turn string // set on each message appended
}

func (h storeHistory) messages(ctx context.Context) ([]Message, error) {
	return h.s.Messages(ctx, h.conv)
}

func (h storeHistory) append(ctx context.Context, msgs ...Message) error {
	msgs = slices.Clone(msgs)
	for i := range msgs {
		msgs[i].Turn = h.turn
	}
	return h.s.AppendMessages(ctx, h.conv, msgs...)
}

// memHistory is a subagent's history, kept for the length of its
// delegate call (bounded by the step budget and the output caps).
type memHistory struct {
	mu   sync.Mutex
	msgs []Message
}

func (h *memHistory) messages(context.Context) ([]Message, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Message(nil), h.msgs...), nil
}

func (h *memHistory) append(_ context.Context, msgs ...Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, msgs...)
	return nil
}

// subagent is what makes a Turn a subagent's.
type subagent struct {
	// id names it in its approvals and events and prefixes its tool call
	// IDs.
	id       string
	isolated bool
}

// wsKey is the key of the workspace c's tools work in: the
// conversation's, or an isolated subagent's own.
func (c *Call) wsKey() string {
	if t := c.turn; t != nil && t.sub != nil && t.sub.isolated {
		return c.Conversation + "." + t.sub.id
	}
	return c.Conversation
}

// workspaceLayers returns the sandbox workspace of call, the view its
// file tools read, its upper layer and the project tree. An isolated
// subagent's workspace stacks its own upper layer on its parent's upper
// layer and project tree.
func (e *Engine) workspaceLayers(ctx context.Context, call *Call) (*sandboxkit.Workspace, *overlay.View, *overlay.Layer, string, error) {
	lower, err := e.cfg.Workspaces.Lower(ctx, call.User, call.Conversation)
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("workspace of this conversation: %w", err)
	}
	layer, err := e.layer(call.Conversation)
	if err != nil {
		return nil, nil, nil, "", err
	}
	mid, err := e.midLayers(ctx, call.User, call.Conversation)
	if err != nil {
		return nil, nil, nil, "", err
	}
	if key := call.wsKey(); key != call.Conversation {
		own, err := e.layer(key)
		if err != nil {
			return nil, nil, nil, "", err
		}
		mid = append(mid, layer.Upper)
		return &sandboxkit.Workspace{Lower: lower, Layers: mid, Upper: own.Upper, Work: own.Work},
			newView(lower, own.Upper, reversed(mid)), own, lower, nil
	}
	return &sandboxkit.Workspace{Lower: lower, Layers: mid, Upper: layer.Upper, Work: layer.Work}, newView(lower, layer.Upper, reversed(mid)), layer, lower, nil
}

// midLayers are the conversation's read-only layers over its lower tree,
// bottom first (LayeredWorkspaces), or none.
func (e *Engine) midLayers(ctx context.Context, user, conversation string) ([]string, error) {
	lw, ok := e.cfg.Workspaces.(LayeredWorkspaces)
	if !ok {
		return nil, nil
	}
	l, err := lw.Layers(ctx, user, conversation)
	if err != nil {
		return nil, fmt.Errorf("workspace of this conversation: %w", err)
	}
	return l, nil
}

// awaitLayers waits for call's conversation's read-only layers (a
// project setup may take half an hour) before its workspace lock is
// taken: workspaceLayers then finds them made.
func (e *Engine) awaitLayers(ctx context.Context, call *Call) error {
	_, err := e.midLayers(ctx, call.User, call.Conversation)
	return err
}

// reversed returns a copy of l in reverse order (view.mid is top first).
func reversed(l []string) []string {
	r := make([]string, len(l))
	for i, s := range l {
		r[len(l)-1-i] = s
	}
	return r
}

// maxTask bounds a delegated task's bytes.
const maxTask = 64 << 10

// subagentPrompt starts a subagent's history.
const subagentPrompt = "You are a subagent: another agent delegated the task below to you. You have your own history and the same tools; your commands need the same approvals. When you are done, reply with a short summary of what you did and found: that reply is all the delegating agent sees"

// delegateTool is the delegate tool: a subagent turn.
type delegateTool struct{ e *Engine }

func (d *delegateTool) Spec() ToolSpec {
	desc := "Delegate a self-contained task to a subagent with its own history and the same tools (its commands need the user's approval too); it returns its summary."
	if d.e.cfg.Subagents == SubagentsIsolated {
		desc += " It works in a copy of your workspace: its changes come back as a unified diff and reach your workspace only if you apply them (e.g. write the diff with write_file and run patch -p1 with shell)."
	} else {
		desc += " It works in your workspace: its changes are there when it returns."
	}
	return ToolSpec{Name: "delegate", Description: desc, Parameters: schema([]string{"task"}, map[string]any{
		"task": prop("string", "the task, complete in itself: the subagent sees nothing of this conversation"),
	})}
}

func (d *delegateTool) Run(ctx context.Context, c *Call) (string, error) {
	e, parent := d.e, c.turn
	if parent == nil {
		return "", errors.New("delegate runs only in a turn")
	}
	if parent.sub != nil {
		return "", errors.New("a subagent cannot delegate")
	}
	var a struct{ Task string }
	if err := c.Args(&a); err != nil {
		return "", err
	}
	if strings.TrimSpace(a.Task) == "" {
		return "", errors.New("task is empty")
	}
	if len(a.Task) > maxTask {
		return "", fmt.Errorf("task is %d bytes; at most %d", len(a.Task), maxTask)
	}
	sub := &subagent{id: randid.New("sub_"), isolated: e.cfg.Subagents == SubagentsIsolated}
	t := &Turn{ID: parent.ID, User: parent.User, Conversation: parent.Conversation, c: parent.c, sub: sub,
		secrets: parent.secrets, llm: parent.llm, mode: parent.mode, red: parent.red, log: parent.log.With("subagent", sub.id), done: make(chan struct{}), usage: parent.usage}
	t.ctx, t.cancel = context.WithCancelCause(ctx)
	defer t.cancel(nil)
	t.hist = &memHistory{msgs: []Message{{Role: RoleSystem, Content: subagentPrompt}, {Role: RoleUser, Content: t.red.String(a.Task)}}}
	mode := SubagentsShared
	// The subagent's own workspace (isolated) is keyed by its calls.
	self := &Call{User: t.User, Conversation: t.Conversation, Turn: t.ID, turn: t}
	if sub.isolated {
		mode = SubagentsIsolated
		defer e.endIsolated(self)
		// The parent's upper layer becomes a lower layer of the
		// subagent's overlay, and overlayfs leaves changes to a lower
		// layer of a mounted overlay undefined: the parent's sandbox
		// (blocked in this call but for its background jobs) is closed.
		pc := e.conv(c.wsKey())
		pc.wsMu.Lock()
		err := pc.closeIdleLocked("an isolated subagent reads your workspace's layer, which must not change meanwhile")
		pc.wsMu.Unlock()
		if err != nil {
			return "", err
		}
		// Its sandbox first: without one, the subagent does not start
		// (fail closed; the error wraps sandboxkit.ErrUnavailable).
		if _, err := e.workspace(ctx, self); err != nil {
			return "", fmt.Errorf("the isolated subagent needs its own sandbox: %w", err)
		}
	}
	e.emit(t.c, t.ID, t.red, t.log, EventSubagentStarted, SubagentStarted{ID: c.ID, Subagent: sub.id, Task: a.Task, Isolation: mode})
	err := e.loop(t)
	fin := SubagentFinished{ID: c.ID, Subagent: sub.id}
	if err != nil {
		fin.Error = capError(err.Error(), maxErrorText)
	}
	e.emit(t.c, t.ID, t.red, t.log, EventSubagentFinished, fin)
	if ctx.Err() != nil {
		return "", context.Cause(ctx)
	}
	msgs, _ := t.hist.messages(ctx)
	summary := ""
	if last := msgs[len(msgs)-1]; last.Role == RoleAssistant {
		summary = last.Content
	}
	var out strings.Builder
	fmt.Fprintf(&out, "subagent %s ", sub.id)
	switch {
	case errors.Is(err, ErrBudget):
		fmt.Fprintf(&out, "stopped: %v\n", err)
	case err != nil:
		fmt.Fprintf(&out, "failed: %v\n", err)
	default:
		out.WriteString("finished.\n")
	}
	fmt.Fprintf(&out, "Summary:\n%s\n", summary)
	if sub.isolated {
		diff, derr := e.subagentDiff(ctx, self)
		switch {
		case derr != nil:
			fmt.Fprintf(&out, "Its changes could not be read: %v\n", derr)
		case diff == "":
			out.WriteString("It changed no files.\n")
		default:
			out.WriteString("Its changes, NOT applied to your workspace (apply them yourself if you want them):\n" + diff)
		}
	}
	return out.String(), nil
}

// subagentDiff is the unified diff of an isolated subagent's upper layer
// against its parent's view. The changed paths are read from its layer
// host-side; the diff itself runs in a sandbox, which sees the parent's
// view read-only at /base and the subagent's at /workspace.
func (e *Engine) subagentDiff(ctx context.Context, c *Call) (string, error) {
	if c.wsKey() == c.Conversation {
		return "", errors.New("internal: not an isolated subagent's workspace")
	}
	e.closeWorkspace(c.wsKey())
	sw, _, own, lower, err := e.workspaceLayers(ctx, c)
	if err != nil {
		return "", err
	}
	changes, err := overlay.Diff(lower, own.Upper)
	if err != nil {
		e.log.Error("reading a subagent's changes failed", "conversation", c.Conversation, "err", err)
		return "", errors.New("the subagent's layer could not be read; the server log has the details")
	}
	var paths []string
	for _, ch := range changes {
		if !ch.Dir {
			paths = append(paths, ch.Path)
		}
	}
	if len(paths) == 0 {
		return "", nil
	}
	p, err := e.policy(c, sw)
	if err != nil {
		return "", err
	}
	p.ReadOnlyOverlays = []sandboxkit.ReadOnlyOverlay{{Layers: append([]string{sw.Lower}, sw.Layers...), Dst: "/base"}}
	const script = `for p; do diff -uN --label "a/$p" --label "b/$p" -- "/base/$p" "/workspace/$p"; done; exit 0`
	// The head and the real tail, as shell shows a command's output.
	out := e.newOutput()
	cmd := sandboxkit.Command(ctx, p, append([]string{"sh", "-c", script, "sh"}, paths...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Timeout = e.cfg.CommandTimeout
	if err := cmd.Run(); err != nil {
		return "", hidePaths(err, lower, own.Dir)
	}
	margin := 0
	if c.turn != nil {
		margin = c.turn.red.longestSpan()
	}
	return out.text(margin), nil
}

// closeWorkspace closes the sandbox of workspace key, if one runs.
func (e *Engine) closeWorkspace(key string) {
	c := e.conv(key)
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	if c.ws != nil {
		c.ws.sess.Close()
		c.ws = nil
	}
}

// endIsolated removes the sandbox, layer and state of the isolated
// subagent whose call c is.
func (e *Engine) endIsolated(c *Call) {
	key := c.wsKey()
	if key == c.Conversation {
		return // not a subagent's: never remove a conversation's layer here
	}
	e.closeWorkspace(key)
	if err := e.cfg.Layers.Remove(key); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.log.Error("removing a subagent's layer failed (workspace GC collects it)", "layer", key, "err", err)
	}
	e.mu.Lock()
	delete(e.convs, key)
	e.mu.Unlock()
}

// agent is the name approvals give the turn's agent: "" for the
// conversation's own, the subagent's ID for a subagent.
func (t *Turn) agent() string {
	if t.sub == nil {
		return ""
	}
	return t.sub.id
}
