package agentcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// Errors of the Engine.
var (
	// ErrTurnInProgress refuses a turn while another turn of the same
	// conversation runs: turns are refused, not queued, so the person
	// sees at once that the agent is busy and can wait or cancel it.
	ErrTurnInProgress = errors.New("agentcore: a turn of this conversation is in progress")
	// ErrApprovalDecided refuses a second decision on an approval: an
	// approval is single-use, and one that expired or whose turn ended
	// cannot be decided either.
	ErrApprovalDecided = errors.New("agentcore: approval already decided")
	// ErrBudget ends a turn that used up its step or time budget.
	ErrBudget = errors.New("agentcore: turn budget used up")
	// ErrRepeating ends a turn whose model made the same tool call with
	// the same arguments Config.RepeatLimit times in a row: a model in a
	// loop would otherwise spend the whole step budget on it.
	ErrRepeating = errors.New("agentcore: the model repeats a tool call")
	// ErrClosed is returned once Close was called.
	ErrClosed = errors.New("agentcore: engine closed")
)

// Config configures an Engine. LLM, Store, Workspaces and Layers are
// required; zero values of the rest mean the documented default.
type Config struct {
	LLM LLM
	// Model, if set, chooses the model of each turn in place of LLM (e.g.
	// the model profile its conversation was created with). It is asked
	// as the turn begins; an error fails the turn (turn_failed with the
	// error's text), with no fall-back to LLM. A nil LLM means LLM.
	Model func(ctx context.Context, user, conversation string) (LLM, error)
	Store Store
	// Workspaces gives each conversation's lower tree; Layers keeps its
	// copy-on-write upper layer (one layer per conversation ID, which must
	// therefore be a valid layer ID: A-Z a-z 0-9 . _ -).
	Workspaces Workspaces
	Layers     *overlay.Store
	// Checkpoints bound each conversation's workspace checkpoints (see
	// RevertTurn); zero values mean overlay's defaults.
	Checkpoints overlay.CheckpointLimits
	// Secrets may be nil: no secrets.
	Secrets SecretResolver
	// Approver may be nil: every approval waits for Decide.
	Approver Approver
	// Logger may be nil: no logs. Everything logged is redacted.
	Logger *slog.Logger
	// Usage, if set, records what every model call used and may refuse
	// turns and model calls (a quota); see UsageRecorder.
	Usage UsageRecorder

	// Sandbox are the settings of every sandbox of the conversations
	// (bubblewrap, seccomp mode, limits, egress caps). A filter that
	// cannot be loaded makes shell and the file tools fail closed. Its
	// Launching is told of every start in a conversation's sandboxes
	// (for an audit log) before it runs, with ctx telling LaunchOf: the
	// sandbox itself, each command in it; an error refuses the start and
	// nothing runs (errors.Is sandboxkit.ErrLaunchRefused).
	Sandbox sandboxkit.Settings
	// ShellAlwaysAllow runs shell commands without asking. Off by default:
	// every command waits for its owner's decision. Other executing tools
	// (ExecTool) are always gated.
	ShellAlwaysAllow bool
	// ApprovalTimeout is how long an approval waits (default 10 min).
	ApprovalTimeout time.Duration
	// MaxSteps bounds the model calls of a turn (default 50).
	MaxSteps int
	// TurnTimeout bounds a turn's wall-clock time (default 30 min).
	TurnTimeout time.Duration
	// CommandTimeout bounds a foreground shell command (default 10 min).
	CommandTimeout time.Duration
	// MaxCommandTimeout bounds the timeout a shell call may ask for
	// (default the larger of CommandTimeout and 30 min).
	MaxCommandTimeout time.Duration
	// OutputKeep bounds the output of one shell command kept whole for
	// read_file (default 16 MiB); OutputKeepTotal bounds a conversation's
	// kept outputs, the oldest dropped first (default 128 MiB).
	OutputKeep, OutputKeepTotal int64
	// SessionIdle closes a conversation's sandbox after this long without
	// a command (default 15 min); the next command starts a new one.
	SessionIdle time.Duration
	// MaxJobs caps a conversation's running background jobs (default
	// sandboxkit.DefaultMaxJobs, 8).
	MaxJobs int
	// MaxOutput caps the bytes of one tool result sent to the model
	// (default 32 KiB).
	MaxOutput int
	// MaxFileSize caps the files edit_file and search_files read whole,
	// and the writes of write_file and edit_file (default 1 MiB).
	// read_file reads files of any size a range of lines at a time.
	MaxFileSize int64
	// MaxToolArguments caps the bytes of one tool call's arguments: a
	// larger call is refused as it arrives, before an approval or any
	// record of its arguments exists (default 2×MaxFileSize + 64 KiB, so
	// write_file of a MaxFileSize file fits).
	MaxToolArguments int
	// MaxToolCalls caps the tool calls run per model reply (default 16);
	// the rest are answered with an error, so the next request stays
	// bounded.
	MaxToolCalls int
	// RepeatLimit stops a turn, before the calls run, when the model
	// makes the same tool calls with the same arguments (whitespace
	// aside) in this many steps in a row (default 3; at least 2).
	RepeatLimit int
	// ToolCalls is how the model calls tools (see ToolCallMode); empty
	// means ToolCallsNative. WithToolCalls sets a model's own.
	ToolCalls ToolCallMode
	// MaxReasoning caps the bytes of a reasoning model's thinking stored
	// (as reasoning_delta events) per reply (default 256 KiB); the rest
	// is counted, and the reply's last reasoning_delta says how much
	// was not kept.
	MaxReasoning int
	// ContextWindow is the model's context length in tokens when the LLM
	// does not tell it (WindowedLLM); 0: unknown, requests are not
	// budgeted until an endpoint's refusal says the length (see
	// Context).
	ContextWindow int
	// SystemPrompt is the template of the system message, the first
	// message of every request, executed with PromptData at each model
	// call (see ParsePrompt); nil means DefaultPrompt.
	SystemPrompt *template.Template
	// PromptContext, if set, tells a conversation's repository, commit
	// and network for its system prompt; an error fails the turn.
	PromptContext func(ctx context.Context, user, conversation string) (PromptContext, error)
	// Programs are host programs shown read-only in every conversation
	// sandbox (e.g. external coding agents' binaries): whatever runs there
	// can read and run them.
	Programs []sandboxkit.Bind
	// Subagents offers the delegate tool: SubagentsShared or
	// SubagentsIsolated; empty means no delegate tool.
	Subagents string
	// HostReadOnly, if set, says which conversations are host read-only
	// investigations (see hostview.go): their sandbox sees the host
	// read-only, with HostMasks hidden besides the profile's own masks.
	HostReadOnly func(ctx context.Context, user, conversation string) (bool, error)
	HostMasks    []string
	// NoWorkspaceTools leaves out the built-in shell and file tools: a
	// server without workspace isolation offers the model no way to run
	// or touch anything.
	NoWorkspaceTools bool
	// OnEgress, if set, is told of every attempt through the egress proxy
	// of a conversation's sandbox (e.g. to count it), besides the
	// conversation's egress event. It is called concurrently; keep it quick.
	OnEgress func(e egress.Event)
}

// Engine runs the turns of every user's conversations. User and
// conversation are parameters of each turn; the caller (the daemon) checks
// that the user owns the conversation before calling StartTurn, Subscribe
// or Turn. Decide checks ownership itself, from the approval.
//
// Turns of different conversations run concurrently, each in its own
// goroutine; a conversation has at most one turn at a time
// (ErrTurnInProgress). Each conversation has one sandbox Session, started
// when a tool first needs it and closed when idle.
type Engine struct {
	cfg   Config
	log   *slog.Logger
	tools registry
	calib calibrations // token estimates, by model

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// closeSession closes a sandbox for Close; tests watch it.
	closeSession func(*sandboxkit.Session) error

	// outputMu serialises making and pruning kept outputs.
	outputMu sync.Mutex

	mu       sync.Mutex
	closed   bool
	convs    map[string]*conv
	awaiting map[string]*pending // approvals waiting, by ID
	// forgotten are the conversations Forget ended, newest last: bounded,
	// because a tombstone only has to outlive the requests that checked
	// ownership before the conversation's row was deleted.
	forgotten    map[string]bool
	forgottenIDs []string
}

// forgottenKept bounds Engine.forgotten.
const forgottenKept = 4096

// conv is the engine's state of one conversation.
type conv struct {
	id string

	mu   sync.Mutex
	turn *Turn
	// gone: Forget ended the conversation; no turn starts and event
	// streams end.
	gone bool
	// held: RevertTurn works on the workspace; no turn starts.
	held bool
	// alwaysAllow: the tools the owner always allows here; nil until
	// loaded from the Store.
	alwaysAllow map[string]bool
	subs        map[chan struct{}]struct{}
	// limitSeen: background jobs whose limit has had its event.
	limitSeen map[string]bool
	// jobSeen: the output total of background jobs at shell_output's last
	// look, for its wait.
	jobSeen map[string]int64
	// jobKept: the kept outputs of background jobs.
	jobKept map[string]*jobKept

	emitMu sync.Mutex // orders appends, so Seq order is publication order

	wsMu sync.Mutex
	ws   *workspace
	// owed is the checkpoint the last turn's end is owed (see
	// endCheckpoint), "" if none; owedStop cancels Close's taking it.
	// afterOf is the last one the next turn's begin checkpoint, afterAs,
	// holds the tree of.
	owed             string
	owedStop         func() bool
	afterOf, afterAs string
	cpLayer          atomic.Pointer[overlay.Layer] // the turns' checkpoints' (see checkpoint)
	// hostNet: a host read-only investigation's network decision, once
	// known (nil: not asked yet).
	hostNet *bool

	// sums are the compactions of the conversation's history, oldest
	// first, once loaded (sumLoaded); which is in effect depends on the
	// branch (ContextCompacted.Last).
	sumMu     sync.Mutex
	sums      []*ContextCompacted
	sumLoaded bool

	prompt atomic.Pointer[promptMemo] // the last system prompt made
}

// New returns an Engine with the built-in tools registered: shell,
// shell_output, shell_kill, read_file, write_file, edit_file, list_files,
// search_files.
func New(cfg Config) (*Engine, error) {
	switch {
	case cfg.LLM == nil:
		return nil, errors.New("agentcore: Config.LLM is required")
	case cfg.Store == nil:
		return nil, errors.New("agentcore: Config.Store is required")
	case cfg.Workspaces == nil:
		return nil, errors.New("agentcore: Config.Workspaces is required")
	case cfg.Layers == nil:
		return nil, errors.New("agentcore: Config.Layers is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.ApprovalTimeout, 10*time.Minute)
	def(&cfg.TurnTimeout, 30*time.Minute)
	def(&cfg.CommandTimeout, 10*time.Minute)
	def(&cfg.SessionIdle, 15*time.Minute)
	def(&cfg.MaxCommandTimeout, max(cfg.CommandTimeout, 30*time.Minute))
	if cfg.OutputKeep <= 0 {
		cfg.OutputKeep = 16 << 20
	}
	if cfg.OutputKeepTotal < cfg.OutputKeep {
		cfg.OutputKeepTotal = max(128<<20, cfg.OutputKeep)
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 50
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = 32 << 10
	}
	if cfg.MaxFileSize <= 0 {
		cfg.MaxFileSize = 1 << 20
	}
	if cfg.MaxToolArguments <= 0 {
		cfg.MaxToolArguments = int(2*cfg.MaxFileSize) + 64<<10
	}
	if cfg.MaxToolCalls <= 0 {
		cfg.MaxToolCalls = 16
	}
	if cfg.RepeatLimit <= 0 {
		cfg.RepeatLimit = 3
	}
	if cfg.RepeatLimit < 2 {
		return nil, fmt.Errorf("agentcore: Config.RepeatLimit is %d; a call repeats from its second time, so it must be at least 2", cfg.RepeatLimit)
	}
	if cfg.MaxReasoning <= 0 {
		cfg.MaxReasoning = 256 << 10
	}
	mode, err := ParseToolCallMode(string(cfg.ToolCalls))
	if err != nil {
		return nil, fmt.Errorf("agentcore: Config.ToolCalls: %w", err)
	}
	cfg.ToolCalls = mode
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{cfg: cfg, log: log, convs: map[string]*conv{}, awaiting: map[string]*pending{}, forgotten: map[string]bool{}, closeSession: (*sandboxkit.Session).Close}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if !cfg.NoWorkspaceTools {
		for _, t := range append(e.shellTools(), e.fileTools()...) {
			if err := e.tools.add(t); err != nil {
				return nil, err
			}
		}
	}
	switch cfg.Subagents {
	case "":
	case SubagentsShared, SubagentsIsolated:
		e.tools.add(&delegateTool{e: e})
	default:
		return nil, fmt.Errorf("agentcore: Config.Subagents is %q; want %q, %q or empty", cfg.Subagents, SubagentsShared, SubagentsIsolated)
	}
	return e, nil
}

// Register adds a tool, e.g. search_code or an MCP server's tools. It
// fails with ErrToolExists for a taken name. Tools registered while turns
// run are offered from their next model call on.
func (e *Engine) Register(t Tool) error { return e.tools.add(t) }

// AddSource adds tools known only at run time (see ToolSource), offered
// from the next model call on.
func (e *Engine) AddSource(s ToolSource) { e.tools.addSource(s) }

// Close cancels every turn, waits for them to end and closes every
// sandbox, concurrently. It returns the errors of releasing the
// sandboxes' workspaces. The Engine cannot be used afterwards.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	convs := e.allConvs()
	e.cancel()
	e.wg.Wait()
	// A session's Close waits for its sandbox to be gone: in parallel and
	// outside the conversations' locks, so closing many takes about as
	// long as closing one.
	var wg sync.WaitGroup
	errs := make([]error, len(convs))
	for i, c := range convs {
		c.wsMu.Lock()
		ws := c.ws
		c.wsMu.Unlock()
		if ws == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.closeSession(ws.sess); err != nil {
				errs[i] = fmt.Errorf("closing the sandbox of conversation %s: %w", c.id, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (e *Engine) conv(id string) *conv {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.convs[id]
	if c == nil {
		c = &conv{id: id, subs: map[chan struct{}]struct{}{}, gone: e.forgotten[id]}
		e.convs[id] = c
	}
	return c
}

// emit persists one event (data redacted by red) and wakes the
// conversation's subscribers. A Store failure is logged: the turn goes on,
// and the event is missing from the log.
func (e *Engine) emit(c *conv, turn string, red *redactor, log *slog.Logger, typ string, data any) {
	if !e.appendEvent(c, turn, red, log, typ, data) {
		return
	}
	c.mu.Lock()
	c.wakeLocked()
	c.mu.Unlock()
}

// appendEvent persists one event for emit; false if the Store failed
// (logged).
func (e *Engine) appendEvent(c *conv, turn string, red *redactor, log *slog.Logger, typ string, data any) bool {
	b, err := json.Marshal(data)
	if err != nil {
		b = []byte(`{}`)
	}
	ev := Event{Type: typ, Conversation: c.id, Turn: turn, Time: time.Now().UTC(), Data: red.JSON(b)}
	// Not the turn's context: a cancelled turn still records how it ended.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.emitMu.Lock()
	_, err = e.cfg.Store.AppendEvent(ctx, ev)
	c.emitMu.Unlock()
	if err != nil {
		log.Error("storing event failed", "type", typ, "err", err)
		return false
	}
	return true
}

// wakeLocked wakes c's subscribers; c.mu is held.
func (c *conv) wakeLocked() {
	for wake := range c.subs {
		select {
		case wake <- struct{}{}:
		default: // already woken; it reads everything new
		}
	}
}

// Publish records an event of the conversation outside any turn (e.g.
// the project setup's, EventSetupStarted…) and wakes its subscribers.
// data is not redacted: it must carry no secret values.
func (e *Engine) Publish(conversation, typ string, data any) {
	e.emit(e.conv(conversation), "", nil, e.log, typ, data)
}

// Drain refuses new turns from now on (StartTurn returns ErrClosed) and
// waits until the turns running have ended, or ctx is done (then it
// returns ctx's error and the turns go on until Close). A server that
// shuts down gracefully drains first, so that no turn is cut short.
func (e *Engine) Drain(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	for {
		// A StartTurn that passed the check before closed was set
		// may register its turn after a look: look until none is left.
		var running []*Turn
		for _, c := range e.allConvs() {
			c.mu.Lock()
			if c.turn != nil {
				running = append(running, c.turn)
			}
			c.mu.Unlock()
		}
		if len(running) == 0 {
			return nil
		}
		for _, t := range running {
			select {
			case <-t.done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// allConvs returns the conversations the engine knows, for a walk that
// takes their locks (never under e.mu).
func (e *Engine) allConvs() []*conv {
	e.mu.Lock()
	defer e.mu.Unlock()
	cs := make([]*conv, 0, len(e.convs))
	for _, c := range e.convs {
		cs = append(cs, c)
	}
	return cs
}

// Wake wakes the subscribers of conversation, which read what is new in
// the Store: for events another process stored (a server beside this
// one on a shared database). A conversation nobody here follows costs
// nothing.
func (e *Engine) Wake(conversation string) {
	e.mu.Lock()
	c := e.convs[conversation]
	e.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	c.wakeLocked()
	c.mu.Unlock()
}

// WakeAll wakes every subscriber, for when events of other processes may
// have been missed (the notifications' connection was lost).
func (e *Engine) WakeAll() {
	for _, c := range e.allConvs() {
		c.mu.Lock()
		c.wakeLocked()
		c.mu.Unlock()
	}
}

// subscribeBatch is how many events a subscriber reads from the Store at
// once.
const subscribeBatch = 256

// Subscribe returns the conversation's events with Seq greater than
// after: first those already stored, then new ones as they happen, in
// order, without gaps or duplicates. The channel is closed when ctx ends
// (or the Store fails, which is logged; subscribe again from the last Seq
// received), and when Forget ends the conversation. Each subscriber reads
// from the Store at its own pace, so a slow one never holds up a turn.
func (e *Engine) Subscribe(ctx context.Context, conversation string, after int64) <-chan Event {
	c := e.conv(conversation)
	wake := make(chan struct{}, 1)
	out := make(chan Event)
	c.mu.Lock()
	gone := c.gone
	c.subs[wake] = struct{}{}
	c.mu.Unlock()
	if gone {
		close(out)
		return out
	}
	go func() {
		defer close(out)
		defer func() {
			c.mu.Lock()
			delete(c.subs, wake)
			c.mu.Unlock()
		}()
		for {
			evs, err := e.cfg.Store.Events(ctx, conversation, after, subscribeBatch)
			if err != nil {
				if ctx.Err() == nil {
					e.log.Error("reading events for a subscriber failed", "conversation", conversation, "err", err)
				}
				return
			}
			for _, ev := range evs {
				select {
				case out <- ev:
					after = ev.Seq
				case <-ctx.Done():
					return
				}
			}
			if len(evs) == subscribeBatch {
				continue
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
			c.mu.Lock()
			gone := c.gone
			c.mu.Unlock()
			if gone {
				return
			}
		}
	}()
	return out
}

// workspace is a conversation's sandbox and the view file tools read.
type workspace struct {
	view *overlay.View
	sess *sandboxkit.Session
	// host: a host read-only investigation's sandbox; no view.
	host bool
}

// workspace returns the conversation's workspace, starting its sandbox if
// none runs. When the sandbox is unavailable it returns the sandbox's
// error (errors.Is sandboxkit.ErrUnavailable) and nothing is started.
func (e *Engine) workspace(ctx context.Context, call *Call) (*workspace, error) {
	c := e.conv(call.wsKey())
	c.wsMu.Lock()
	if c.ws != nil && c.ws.sess.Err() == nil {
		defer c.wsMu.Unlock()
		return c.ws, nil
	}
	c.wsMu.Unlock()
	if err := e.awaitLayers(ctx, call); err != nil {
		return nil, err
	}
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	if c.ws != nil && c.ws.sess.Err() == nil {
		return c.ws, nil
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if host, err := e.isHostView(ctx, call); err != nil || host {
		if err != nil {
			return nil, err
		}
		return e.hostWorkspace(ctx, c, call)
	}
	sw, v, layer, lower, err := e.workspaceLayers(ctx, call)
	if err != nil {
		return nil, err
	}
	p, err := e.policy(call, sw)
	if err != nil {
		return nil, err
	}
	sess, err := e.startSession(ctx, call, p, func(err error) error { return hidePaths(err, lower, layer.Dir) })
	if err != nil {
		return nil, err
	}
	layer.Touch(time.Now())
	ws := &workspace{view: v, sess: sess}
	c.ws = ws
	go func() {
		// An ended sandbox is kept only for its jobs' output.
		<-sess.Done()
		layer.Touch(time.Now())
		c.wsMu.Lock()
		if c.ws == ws && len(sess.Jobs()) == 0 {
			c.ws = nil
		}
		c.wsMu.Unlock()
	}()
	return ws, nil
}

// startSession starts the sandbox of call's conversation under p, telling
// call's turn while it waits (sandboxWaiting). hide, if set, takes the
// host paths out of the start's error before it is worded.
func (e *Engine) startSession(ctx context.Context, call *Call, p *sandboxkit.Policy, hide func(error) error) (*sandboxkit.Session, error) {
	waited := e.sandboxWaiting(call)
	sess, err := sandboxkit.StartSession(ctx, p, sandboxkit.SessionOptions{IdleTimeout: e.cfg.SessionIdle, MaxJobs: e.cfg.MaxJobs})
	waited(err)
	if err == nil {
		return sess, nil
	}
	if hide != nil {
		err = hide(err)
	}
	if errors.Is(err, sandboxkit.ErrUnavailable) {
		return nil, fmt.Errorf("%w; nothing was run", err)
	}
	return nil, fmt.Errorf("starting the sandbox: %w", err)
}

const (
	// sandboxWaitNotice is how long a call waits for its sandbox to start
	// before its turn says so; sandboxWaitRepeat how often it says it
	// again. A start on a loaded machine is slow, not stuck: the turn's
	// own time budget bounds it.
	sandboxWaitNotice = 2 * time.Second
	sandboxWaitRepeat = 15 * time.Second
)

// sandboxWaiting tells call's turn, with sandbox_waiting events, that it
// waits for the conversation's sandbox once that takes longer than
// sandboxWaitNotice. The function it returns ends the wait with the
// start's error and, if the turn was told, says how it ended.
func (e *Engine) sandboxWaiting(call *Call) func(error) {
	t := call.turn
	if t == nil {
		return func(error) {}
	}
	begin := time.Now()
	say := func(status string) {
		e.emit(t.c, t.ID, t.red, t.log, EventSandboxWaiting, SandboxWaiting{ID: call.ID, Name: call.Name, Status: status, WaitedMS: time.Since(begin).Milliseconds()})
	}
	stop := make(chan struct{})
	told := make(chan bool, 1)
	go func() {
		said := false
		defer func() { told <- said }()
		timer := time.NewTimer(sandboxWaitNotice)
		defer timer.Stop()
		for {
			select {
			case <-stop:
				return
			case <-timer.C:
				said = true
				say("starting")
				timer.Reset(sandboxWaitRepeat)
			}
		}
	}()
	return func(err error) {
		close(stop)
		if !<-told {
			return
		}
		if err != nil {
			say("failed")
			return
		}
		say("started")
	}
}

// startIn calls start with the conversation's workspace. A session that
// ended between the check and the start (idle timeout) makes start fail
// with ErrSessionClosed before anything ran; then it is replaced and start
// is tried once more. start must only start, so nothing runs twice.
func (e *Engine) startIn(ctx context.Context, call *Call, start func(*workspace) error) error {
	for attempt := 0; ; attempt++ {
		ws, err := e.workspace(ctx, call)
		if err != nil {
			return err
		}
		err = start(ws)
		if attempt > 0 || !errors.Is(err, sandboxkit.ErrSessionClosed) {
			return err
		}
		c := e.conv(call.wsKey())
		c.wsMu.Lock()
		if c.ws == ws {
			c.ws = nil
		}
		c.wsMu.Unlock()
		// Close waits until the sandbox is gone and the layer unlocked.
		ws.sess.Close()
	}
}

// currentSession returns the conversation's last sandbox, even an ended
// one (its background jobs' output stays readable), or nil.
func (e *Engine) currentSession(conversation string) *sandboxkit.Session {
	c := e.conv(conversation)
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	if c.ws == nil {
		return nil
	}
	return c.ws.sess
}
