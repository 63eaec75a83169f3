package agentcore

import (
	"context"
	"errors"
	"fmt"
)

// A host read-only investigation (Config.HostReadOnly) runs its commands
// in sandboxkit's host-readonly profile instead of a workspace: the host
// filesystem read-only, the data directories, credentials and UNIX
// sockets masked, nothing writable. Its network is the user's choice,
// asked once, before the first command starts its sandbox.

// errHostFiles is the file tools' answer in an investigation.
var errHostFiles = errors.New("this conversation is a host read-only investigation: it has no workspace, so the file tools are off; read files with shell (cat, ls, grep), which sees the host read-only")

// hostNetworkQuestion is what the host_network approval asks.
const hostNetworkQuestion = "Share the host's network with this investigation's sandbox? Approve: its commands can reach the network and services listening on this host (127.0.0.1). Deny, or no answer: it stays without network."

func (e *Engine) isHostView(ctx context.Context, call *Call) (bool, error) {
	if e.cfg.HostReadOnly == nil {
		return false, nil
	}
	host, err := e.cfg.HostReadOnly(ctx, call.User, call.Conversation)
	if err != nil {
		return false, fmt.Errorf("reading the conversation's mode failed, so nothing was run: %w", err)
	}
	return host, nil
}

// hostWorkspace starts an investigation's sandbox; the caller holds
// c.wsMu.
func (e *Engine) hostWorkspace(ctx context.Context, c *conv, call *Call) (*workspace, error) {
	share, err := e.hostNetwork(ctx, c, call)
	if err != nil {
		return nil, err
	}
	p, err := InvestigationPolicy(e.sandbox(call), e.cfg.HostMasks, share)
	if err != nil {
		return nil, err
	}
	sess, err := e.startSession(ctx, call, p, nil)
	if err != nil {
		return nil, err
	}
	ws := &workspace{sess: sess, host: true}
	c.ws = ws
	go func() {
		<-sess.Done()
		c.wsMu.Lock()
		if c.ws == ws && len(sess.Jobs()) == 0 {
			c.ws = nil
		}
		c.wsMu.Unlock()
	}()
	return ws, nil
}

// hostNetwork is the conversation's network decision: the one stored, or
// the user's answer to a host_network approval asked now. Approved: the
// host network; denied or expired: none. A turn cancelled before an
// answer decides nothing (the next command asks again).
func (e *Engine) hostNetwork(ctx context.Context, c *conv, call *Call) (bool, error) {
	c.mu.Lock()
	known := c.hostNet
	c.mu.Unlock()
	if known != nil {
		return *known, nil
	}
	decide := func(v bool) (bool, error) {
		c.mu.Lock()
		c.hostNet = &v
		c.mu.Unlock()
		return v, nil
	}
	as, err := e.cfg.Store.Approvals(ctx, c.id)
	if err != nil {
		return false, fmt.Errorf("reading the conversation's approvals failed, so nothing was run: %w", err)
	}
	for _, a := range as {
		switch {
		case a.Kind != ApprovalHostNetwork:
		case a.Status == ApprovalDecided:
			return decide(a.Decision != DecisionDeny)
		case a.Status == ApprovalExpired:
			return decide(false)
		}
	}
	t := call.turn
	if t == nil {
		return false, nil // not asked outside a turn: isolated
	}
	ask := &Call{ID: call.ID, Name: ApprovalHostNetwork, User: call.User, Conversation: call.Conversation, Turn: call.Turn, turn: t}
	switch err := e.gate(t, ask, Action{Command: hostNetworkQuestion, Kind: ApprovalHostNetwork}); {
	case err == nil:
		return decide(true)
	case errors.Is(err, errDenied), errors.Is(err, errExpired):
		return decide(false)
	default:
		return false, err
	}
}
