package agentcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// WorkspaceCommand is a program that a tool (e.g. an external coding
// agent) runs in a conversation's workspace with Engine.RunInWorkspace.
type WorkspaceCommand struct {
	// Argv is the command line inside the sandbox, as a list (no shell).
	Argv []string
	// Env adds "KEY=value" entries to the sandbox's minimal environment.
	Env []string
	// Egress lists the destinations the command may reach (see
	// egress.ParseAllow), through an egress proxy on the host: its
	// sandbox keeps a network of its own with only loopback, and each
	// attempt becomes an egress event of the call. The conversation's
	// sandbox has no proxy, so the command then runs in a sandbox of its
	// own (profile external-agent) over the same layer: the
	// conversation's sandbox is closed first, which is refused while it
	// runs background jobs. Empty: no network.
	Egress []string
	// Output receives stdout and stderr together, at most OutputLimit
	// bytes (default 1 MiB; the rest is dropped with a note).
	Output      io.Writer
	OutputLimit int64
	// Timeout kills the command once it has run this long (default
	// Config.CommandTimeout).
	Timeout time.Duration
}

// RunInWorkspace runs w in the workspace of c's conversation, the same
// copy-on-write overlay as the shell tool's: its writes land in the
// conversation's upper layer. It is for tools whose Run was approved
// (ExecTool): it asks no approval itself. The error is nil for exit
// status 0, a *sandboxkit.ExitError for another status, a
// *sandboxkit.LimitError when a limit stopped it, or why it did not run
// (errors.Is sandboxkit.ErrUnavailable: no sandbox here, and nothing ran).
func (e *Engine) RunInWorkspace(ctx context.Context, c *Call, w WorkspaceCommand) error {
	if len(w.Argv) == 0 {
		return errors.New("agentcore: RunInWorkspace: empty command")
	}
	if w.OutputLimit <= 0 {
		w.OutputLimit = 1 << 20
	}
	if w.Timeout <= 0 {
		w.Timeout = e.cfg.CommandTimeout
	}
	var cmd *sandboxkit.Cmd
	var err error
	if len(w.Egress) > 0 {
		var release func()
		cmd, release, err = e.startNetworked(ctx, c, w)
		if err == nil {
			defer release()
		}
	} else {
		err = e.startIn(ctx, c, func(ws *workspace) error {
			cmd = ws.sess.Command(ctx, w.Argv...)
			return e.startWorkspaceCommand(cmd, w)
		})
	}
	if err == nil {
		err = cmd.Wait()
	}
	if cmd != nil && cmd.State != nil && cmd.State.Limit != "" {
		e.limitHit(c, cmd.State.Limit, "sandbox limit: "+cmd.State.LimitMessage)
	}
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

func (e *Engine) startWorkspaceCommand(cmd *sandboxkit.Cmd, w WorkspaceCommand) error {
	cmd.Env, cmd.Dir = w.Env, sandboxkit.WorkspaceDir
	cmd.Stdout, cmd.Stderr = w.Output, w.Output
	cmd.OutputLimit, cmd.Timeout = w.OutputLimit, w.Timeout
	return cmd.Start()
}

// startNetworked starts w in a one-shot sandbox with an egress proxy
// over the conversation's layer. The conversation's sandbox is closed
// (an upper layer is mounted by one sandbox at a time) and no other
// starts until w ends: the conversation's workspace lock is held.
// The returned release ends that, once the command was waited for.
func (e *Engine) startNetworked(ctx context.Context, c *Call, w WorkspaceCommand) (*sandboxkit.Cmd, func(), error) {
	if err := e.awaitLayers(ctx, c); err != nil {
		return nil, nil, err
	}
	cv := e.conv(c.wsKey())
	cv.wsMu.Lock()
	started := false
	defer func() {
		if !started {
			cv.wsMu.Unlock()
		}
	}()
	if err := cv.closeIdleLocked("a command with network runs in a sandbox of its own over the same workspace"); err != nil {
		return nil, nil, err
	}
	sw, _, layer, lower, err := e.workspaceLayers(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	p, err := ExternalAgentPolicy(e.sandbox(c), sw, w.Egress)
	if err != nil {
		return nil, nil, err
	}
	p.Egress.OnEvent = e.egressEvents(c)
	p.ReadOnly = append(p.ReadOnly, e.cfg.Programs...)
	cmd := sandboxkit.Command(ctx, p, w.Argv...)
	if err := e.startWorkspaceCommand(cmd, w); err != nil {
		err = hidePaths(err, lower, layer.Dir)
		if errors.Is(err, sandboxkit.ErrUnavailable) {
			return nil, nil, fmt.Errorf("%w; nothing was run", err)
		}
		return nil, nil, fmt.Errorf("starting the sandbox: %w", err)
	}
	started = true
	layer.Touch(time.Now())
	return cmd, func() {
		layer.Touch(time.Now())
		cv.wsMu.Unlock()
	}, nil
}

// StreamOutput returns a writer whose bytes become call c's
// tool_output_delta events while the tool runs: redacted of the user's
// secrets (also across writes), coalesced, and at most maxStreamed bytes
// in all. Close it to emit what is held back.
func (e *Engine) StreamOutput(c *Call) io.WriteCloser {
	t := c.turn
	if t == nil {
		return nopWriteCloser{io.Discard}
	}
	return &outputStream{e: e, c: c, d: deltaWriter{red: t.red}}
}

// maxStreamed bounds the output one call streams as events.
const maxStreamed = 1 << 20

type outputStream struct {
	e    *Engine
	c    *Call
	mu   sync.Mutex
	d    deltaWriter
	sent int
}

func (o *outputStream) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sent >= maxStreamed {
		return len(p), nil
	}
	if d, ok := o.d.write(string(p), time.Now()); ok {
		o.emit(d)
	}
	return len(p), nil
}

func (o *outputStream) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sent < maxStreamed {
		o.emit(o.d.flush())
	}
	return nil
}

func (o *outputStream) emit(s string) {
	if s == "" {
		return
	}
	o.sent += len(s)
	if o.sent >= maxStreamed {
		s += fmt.Sprintf("\n[output streaming stopped after %d bytes; the tool result has the end]", o.sent)
	}
	t := o.c.turn
	o.e.emit(t.c, t.ID, t.red, t.log, EventToolOutputDelta, ToolOutputDelta{ID: o.c.ID, Name: o.c.Name, Text: s})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// policy is the sandbox Policy of call's conversation over ws (the
// shell's), with the configured read-only programs.
func (e *Engine) policy(call *Call, ws *sandboxkit.Workspace) (*sandboxkit.Policy, error) {
	p, err := WorkspacePolicy(e.sandbox(call), ws)
	if err != nil {
		return nil, err
	}
	p.ReadOnly = append(p.ReadOnly, e.cfg.Programs...)
	return p, nil
}

// closeIdleLocked closes the workspace's sandbox unless a background job
// runs in it, which is an error saying why (reason) it must stop. The
// caller holds c.wsMu.
func (c *conv) closeIdleLocked(reason string) error {
	if c.ws == nil {
		return nil
	}
	for _, j := range c.ws.sess.Jobs() {
		if j.Running {
			return fmt.Errorf("background job %d runs in this workspace's sandbox and %s, so stop the job first (shell_kill)", j.ID, reason)
		}
	}
	c.ws.sess.Close()
	c.ws = nil
	return nil
}

// maxEgressEvents bounds the egress events one call records: a command
// that tries thousands of destinations does not flood the conversation
// (Config.OnEgress still hears of every attempt).
const maxEgressEvents = 200

// egressEvents returns the egress.Options.OnEvent of call c's sandbox.
func (e *Engine) egressEvents(c *Call) func(egress.Event) {
	var mu sync.Mutex
	n := 0
	return func(ev egress.Event) {
		if e.cfg.OnEgress != nil {
			e.cfg.OnEgress(ev)
		}
		t := c.turn
		if t == nil {
			return
		}
		mu.Lock()
		n++
		over := n > maxEgressEvents
		last := n == maxEgressEvents
		mu.Unlock()
		if over {
			return
		}
		d := NewEgress(c.ID, c.Name, ev)
		if last {
			d.Reason = strings.TrimPrefix(d.Reason+"; ", "; ") + fmt.Sprintf("further attempts of this call are not recorded (%d at most)", maxEgressEvents)
		}
		e.emit(t.c, t.ID, t.red, t.log, EventEgress, d)
	}
}
