package agentcore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/randid"
)

// TurnRequest starts a turn: the user's message in a conversation.
type TurnRequest struct {
	User         string
	Conversation string
	Content      string
	// From, if set, is the ID of a user message of the conversation's
	// active history (a BranchStore's): the turn answers Content in its
	// place, on a new branch that leaves that message and what followed
	// it readable, and the workspace goes back to the checkpoint taken as
	// that message's turn began (see RevertTurn).
	From string
}

// Turn is a running turn: the model answering one user message, calling
// tools until it stops or the turn's budget ends.
type Turn struct {
	ID           string
	User         string
	Conversation string

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	err    error

	c    *conv
	hist history
	// sub is set for a subagent's turn (see delegate).
	sub     *subagent
	secrets map[string]string // the user's secrets, name → value
	llm     LLM               // the turn's model, chosen as it begins (Config.Model)
	mode    ToolCallMode      // how llm calls tools
	window  ContextWindow     // llm's, known once llm is chosen
	winSet  bool
	sum     *ContextCompacted // a subagent's compaction in effect
	red     *redactor
	log     *slog.Logger
	usage   *turnUsage // shared with its subagents
	// specs are the tools offered at the turn's last step, made from the
	// registry's generation specsGen (0: not kept).
	specs    []ToolSpec
	specsGen uint64
	reqBuf   requestBuf // the messages of its requests
}

// errCancelled is the cause of a turn cancelled by Cancel.
var errCancelled = errors.New("turn cancelled")

// Done is closed when the turn has ended and its last event is stored.
func (t *Turn) Done() <-chan struct{} { return t.done }

// Err is nil while the turn runs and when the model finished; otherwise
// why it ended: context.Canceled (Cancel), ErrClosed, an error wrapping
// ErrBudget (steps or time), or the model's or Store's error.
func (t *Turn) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// Wait waits for the turn to end and returns Err, or ctx's error.
func (t *Turn) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cancel ends the turn: the model stream and running shell commands are
// killed, a pending approval is withdrawn, and turn_cancelled is emitted.
func (t *Turn) Cancel() { t.cancel(errCancelled) }

// Turn returns the conversation's running turn, or nil.
func (e *Engine) Turn(conversation string) *Turn {
	c := e.conv(conversation)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.turn
}

// StartTurn stores the user's message and starts the turn in its own
// goroutine. It returns ErrTurnInProgress while the conversation has a
// running turn, and an error wrapping ErrNotFound once Forget ended it. ctx bounds only the start; the turn runs until it ends,
// is cancelled, or Close.
func (e *Engine) StartTurn(ctx context.Context, r TurnRequest) (*Turn, error) {
	if r.User == "" || r.Conversation == "" {
		return nil, errors.New("agentcore: a turn needs a user and a conversation")
	}
	c := e.conv(r.Conversation)
	e.mu.Lock()
	closed := e.closed
	if !closed {
		e.wg.Add(1)
	}
	e.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		e.wg.Done()
		return nil, fmt.Errorf("agentcore: conversation %q is deleted: %w", r.Conversation, ErrNotFound)
	}
	if c.turn != nil || c.held {
		c.mu.Unlock()
		e.wg.Done()
		return nil, ErrTurnInProgress
	}
	t := &Turn{ID: randid.New("turn_"), User: r.User, Conversation: r.Conversation, c: c, done: make(chan struct{}), usage: &turnUsage{}}
	t.hist = storeHistory{e.cfg.Store, r.Conversation, t.ID}
	c.turn = t
	c.mu.Unlock()

	started := false
	defer func() {
		if !started {
			c.mu.Lock()
			c.turn = nil
			c.mu.Unlock()
			close(t.done)
			e.wg.Done()
		}
	}()
	if e.cfg.Usage != nil {
		// Before the message is stored: a refused turn leaves no trace.
		if err := e.cfg.Usage.Allow(ctx, r.User); err != nil {
			return nil, err
		}
	}
	secrets, err := e.loadSecrets(ctx, r.User)
	if err != nil {
		return nil, err
	}
	t.secrets, t.red = secrets, newRedactor(secrets)
	t.log = slog.New(lazy(redactHandler{e.log.Handler(), t.red})).With("conversation", r.Conversation, "turn", t.ID, "user", r.User)
	content := t.red.String(r.Content)
	if err := e.beginCheckpoint(ctx, t, r.From); err != nil {
		return nil, err
	}
	if err := e.cfg.Store.AppendMessages(ctx, r.Conversation, Message{Role: RoleUser, Content: content, Turn: t.ID}); err != nil {
		return nil, fmt.Errorf("agentcore: storing the message: %w", err)
	}
	tctx, cancelTimeout := context.WithTimeoutCause(e.ctx, e.cfg.TurnTimeout, fmt.Errorf("%w: the turn ran longer than %v", ErrBudget, e.cfg.TurnTimeout))
	t.ctx, t.cancel = context.WithCancelCause(tctx)
	started = true
	e.emit(c, t.ID, t.red, t.log, EventTurnStarted, TurnStarted{User: r.User, Content: content})
	go func() {
		defer e.wg.Done()
		defer cancelTimeout()
		e.run(t)
	}()
	return t, nil
}

// loadSecrets returns all of user's secrets: they are all redacted from
// the turn's output, whichever a command uses.
func (e *Engine) loadSecrets(ctx context.Context, user string) (map[string]string, error) {
	secrets := map[string]string{}
	if e.cfg.Secrets == nil {
		return secrets, nil
	}
	names, err := e.cfg.Secrets.Names(ctx, user)
	if err != nil {
		return nil, fmt.Errorf("agentcore: listing secrets: %w", err)
	}
	for _, n := range names {
		v, err := e.cfg.Secrets.Value(ctx, user, n)
		if err != nil {
			return nil, fmt.Errorf("agentcore: secret %q: %w", n, err)
		}
		secrets[n] = v
	}
	return secrets, nil
}

// run is the turn loop.
func (e *Engine) run(t *Turn) {
	e.turnCheckpoint(t)
	err := e.loop(t)
	e.endCheckpoint(t)
	cause := context.Cause(t.ctx)
	var rep repeating
	t.cancel(nil)
	e.emitTurnUsage(t)
	switch {
	case err == nil:
		e.endTurn(t, EventTurnFinished, TurnFinished{Reason: "stop"})
	case errors.As(err, &rep) && cause == nil:
		e.endTurn(t, EventTurnFinished, TurnFinished{Reason: "repeating", Message: "Stopped: " + rep.what() + ". Send a message to tell the assistant what to do instead."})
	case errors.Is(err, ErrBudget) && cause == nil:
		// Step budget.
		e.endTurn(t, EventTurnFinished, TurnFinished{Reason: "max_steps", Message: fmt.Sprintf("Stopped after %d model calls, the most one turn may make. Send a message to let the assistant go on.", e.cfg.MaxSteps)})
	case errors.Is(cause, errCancelled):
		err = context.Canceled
		e.endTurn(t, EventTurnCancelled, TurnCancelled{})
	case cause != nil && errors.Is(e.ctx.Err(), context.Canceled):
		err = ErrClosed
		e.endTurn(t, EventTurnCancelled, TurnCancelled{Reason: "server shutting down"})
	default:
		if cause != nil {
			err = cause // the time budget
		}
		t.log.Warn("turn failed", "err", err)
		e.endTurn(t, EventTurnFailed, TurnFailed{Error: capError(t.red.String(err.Error()), maxErrorText)})
	}
	t.err = err
	close(t.done)
}

// endTurn stores the turn's last event and clears the conversation's
// turn under c.mu, then wakes subscribers: whoever sees that event (a
// subscriber woken earlier reads the Store at any time) and sends the
// next message finds no turn running, or waits for c.mu until none is.
func (e *Engine) endTurn(t *Turn, typ string, data any) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	e.appendEvent(t.c, t.ID, t.red, t.log, typ, data)
	t.c.turn = nil
	t.c.wakeLocked()
}

// loop calls the model and runs its tool calls until it stops.
func (e *Engine) loop(t *Turn) error {
	ctx := t.ctx
	if t.llm == nil {
		llm, err := e.model(t)
		if err != nil {
			return err
		}
		t.llm, t.mode = llm, e.cfg.ToolCalls
		if m, ok := llm.(modeLLM); ok && m.mode != "" {
			t.mode = m.mode
		}
	}
	if !t.winSet {
		t.window, t.winSet = e.window(ctx, t.llm), true
	}
	t.hist = readingOnce(t.hist)
	// The last step's calls' key and how often they came in a row
	// (RepeatLimit).
	var last callKey
	repeats := 0
	for step := 0; ; step++ {
		if step == e.cfg.MaxSteps {
			return fmt.Errorf("%w: %d model calls", ErrBudget, e.cfg.MaxSteps)
		}
		msgs, err := t.hist.messages(ctx)
		if err != nil {
			return fmt.Errorf("reading the conversation: %w", err)
		}
		specs := e.specs(t)
		sys, err := e.systemPrompt(t, specs)
		if err != nil {
			return err
		}
		if step > 0 || t.sub != nil { // StartTurn asked for the first
			if err := e.allowCall(t); err != nil {
				return err
			}
		}
		req, err := e.request(t, msgs, sys, specs, "")
		if err != nil {
			return err
		}
		reply, refused, keys, err := e.stream(t, t.inMode(req))
		if errors.Is(err, ErrContextLength) {
			// One compaction and one retry; a second refusal fails the
			// turn.
			if req, err = e.recover(t, req, msgs, sys, specs, err); err != nil {
				return err
			}
			if err := e.allowCall(t); err != nil {
				return err
			}
			reply, refused, keys, err = e.stream(t, t.inMode(req))
			if errors.Is(err, ErrContextLength) {
				err = fmt.Errorf("the endpoint refused the request as too long for the model's context window again, after the conversation was compacted; send a shorter message or start a new conversation: %w", err)
			}
		}
		if err != nil {
			return err
		}
		if err := t.hist.append(ctx, reply); err != nil {
			return fmt.Errorf("storing the reply: %w", err)
		}
		if len(reply.ToolCalls) == 0 {
			return nil
		}
		// A step repeats the last one when it makes the same calls with
		// the same arguments, in the same order.
		h := sha256.New()
		for _, c := range reply.ToolCalls {
			k := keys[c.ID]
			h.Write(k[:])
		}
		var k callKey
		h.Sum(k[:0])
		if repeats > 0 && k == last {
			repeats++
		} else {
			last, repeats = k, 1
		}
		if repeats >= e.cfg.RepeatLimit {
			var answers []Message
			for _, c := range reply.ToolCalls {
				answers = append(answers, Message{Role: RoleTool, ToolCallID: c.ID, Content: fmt.Sprintf("error: not run: the same call with the same arguments %d times in a row; the turn is stopped", repeats)})
			}
			if err := t.hist.append(ctx, answers...); err != nil {
				return fmt.Errorf("storing a tool result: %w", err)
			}
			return repeating{capError(reply.ToolCalls[0].Name, maxToolName), repeats}
		}
		for i, call := range reply.ToolCalls {
			if i == e.cfg.MaxToolCalls {
				// The rest are answered, not run, in one write.
				var answers []Message
				for _, rest := range reply.ToolCalls[i:] {
					answers = append(answers, Message{Role: RoleTool, ToolCallID: rest.ID, Content: fmt.Sprintf("error: not run: a step may make at most %d tool calls; make the rest in your next step", e.cfg.MaxToolCalls)})
				}
				if err := t.hist.append(ctx, answers...); err != nil {
					return fmt.Errorf("storing a tool result: %w", err)
				}
				break
			}
			result := e.runTool(t, call, refused[call.ID])
			if ctx.Err() != nil {
				// The model's history must answer every call it made.
				var answers []Message
				for _, rest := range reply.ToolCalls[i:] {
					answers = append(answers, Message{Role: RoleTool, ToolCallID: rest.ID, Content: "error: the turn was cancelled before this call finished"})
				}
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := t.hist.append(sctx, answers...)
				cancel()
				if err != nil {
					t.log.Error("storing the answers of cancelled tool calls failed", "err", err)
				}
				return ctx.Err()
			}
			if err := t.hist.append(ctx, Message{Role: RoleTool, ToolCallID: call.ID, Content: result}); err != nil {
				return fmt.Errorf("storing a tool result: %w", err)
			}
		}
	}
}

// model is the turn's model: Config.Model's choice, else Config.LLM.
func (e *Engine) model(t *Turn) (LLM, error) {
	if e.cfg.Model == nil {
		return e.cfg.LLM, nil
	}
	llm, err := e.cfg.Model(t.ctx, t.User, t.Conversation)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if llm == nil {
		return e.cfg.LLM, nil
	}
	return llm, nil
}

// maxToolName bounds a tool call's name: no tool has a longer one.
const maxToolName = 128

// repeating ends a turn stopped by Config.RepeatLimit.
type repeating struct {
	name string // of the first call repeated
	n    int
}

func (r repeating) what() string {
	return fmt.Sprintf("the model called %s with the same arguments %d times in a row", r.name, r.n)
}
func (r repeating) Error() string { return ErrRepeating.Error() + ": " + r.what() }
func (r repeating) Unwrap() error { return ErrRepeating }

// callKey identifies a tool call by its name and arguments as the model
// wrote them (whitespace aside), for Config.RepeatLimit.
type callKey [sha256.Size]byte

func keyOf(name, args string) callKey {
	h := sha256.New()
	io.WriteString(h, name)
	h.Write([]byte{0})
	var b bytes.Buffer
	if json.Compact(&b, []byte(args)) == nil {
		h.Write(b.Bytes())
	} else {
		io.WriteString(h, args)
	}
	var k callKey
	h.Sum(k[:0])
	return k
}

// stream receives one model reply, emitting its text and reasoning as
// they arrive. It returns the calls refused before anything about them
// is stored (their arguments over MaxToolArguments or not a JSON object,
// a name no tool can have, a call written as text that is not one) by
// ID: their arguments are stored as {}. keys are the calls' callKeys.
func (e *Engine) stream(t *Turn, req Request) (Message, map[string]error, map[string]callKey, error) {
	s, err := t.llm.Stream(t.ctx, req)
	if err != nil {
		return Message{}, nil, nil, fmt.Errorf("model: %w", err)
	}
	refused := map[string]error{}
	keys := map[string]callKey{}
	defer s.Close()
	reply := Message{Role: RoleAssistant}
	var usage Usage
	var text strings.Builder
	deltas := deltaWriter{red: t.red}
	thoughts := deltaWriter{red: t.red}
	kept, omitted := 0, 0 // reasoning bytes stored and not
	emitText := func(s string) {
		if s != "" {
			e.emit(t.c, t.ID, t.red, t.log, EventTextDelta, TextDelta{Text: s})
		}
	}
	emitThought := func(s string) {
		if s != "" {
			e.emit(t.c, t.ID, t.red, t.log, EventReasoningDelta, ReasoningDelta{Text: s})
		}
	}
	flush := func() {
		emitThought(thoughts.flush())
		emitText(deltas.flush())
	}
	addText := func(s string) {
		emitThought(thoughts.flush()) // in order
		text.WriteString(s)
		if d, ok := deltas.write(s, time.Now()); ok {
			emitText(d)
		}
	}
	addCall := func(tc ToolCall, refusal error) {
		flush()
		if tc.ID == "" || len(tc.ID) > maxToolName {
			tc.ID = fmt.Sprintf("call_%s_%d", t.ID, len(reply.ToolCalls))
		}
		if t.sub != nil {
			tc.ID = t.sub.id + "." + tc.ID
		}
		keys[tc.ID] = keyOf(tc.Name, tc.Arguments)
		switch {
		case refusal != nil:
			refused[tc.ID] = refusal
			tc.Arguments = "{}"
		case len(tc.Name) > maxToolName:
			refused[tc.ID] = fmt.Errorf("a tool name of %d bytes: no tool has a name longer than %d", len(tc.Name), maxToolName)
			tc.Name, tc.Arguments = capError(tc.Name, maxToolName), "{}"
		case len(tc.Arguments) > e.cfg.MaxToolArguments:
			refused[tc.ID] = fmt.Errorf("the arguments are %d bytes; the limit is %d: nothing was run. Split the work into smaller calls (e.g. write a large file in parts)", len(tc.Arguments), e.cfg.MaxToolArguments)
			tc.Arguments = "{}"
		default:
			if err := checkObject(tc.Arguments); err != nil {
				// Stored as {}: endpoints that parse the history's
				// arguments (older vLLM) would fail every later request.
				refused[tc.ID] = fmt.Errorf("invalid arguments for %s: want a JSON object: %v", tc.Name, err)
				tc.Arguments = "{}"
			}
		}
		tc.Arguments = t.red.String(tc.Arguments)
		if len(reply.ToolCalls) >= e.cfg.MaxToolCalls {
			// Not run (see loop): neither stored nor announced.
			tc.Arguments = "{}"
		} else {
			e.emit(t.c, t.ID, t.red, t.log, EventToolCallRequested, ToolCallRequested(tc))
		}
		reply.ToolCalls = append(reply.ToolCalls, tc)
	}
	var scan *callScanner
	if t.mode == ToolCallsText || t.mode == ToolCallsAuto {
		// A block's body: a call's arguments and a little more.
		scan = &callScanner{max: e.cfg.MaxToolArguments + 4<<10}
	}
	scanned := func(parts []scanned) {
		for _, p := range parts {
			if p.call != nil {
				// Its own ID: a model writing calls as text gives none,
				// and an index would repeat in its next reply.
				c := *p.call
				c.ID = randid.New("call_")
				addCall(c, p.err)
				continue
			}
			addText(p.text)
		}
	}
	// Once text is held for coalescing, Next runs in its own goroutine,
	// so that the text is shown while the model pauses; it ends at
	// Next's first error, which the loop below always waits for, so
	// Close follows it. Until then nothing waits to be shown, and Next
	// is called here: a goroutine's hand-offs cost more than a reply of
	// a few chunks.
	type next struct {
		ch  Chunk
		err error
	}
	var chunks chan next
	var pause *time.Timer // made once text is held
	defer func() {
		if pause != nil {
			pause.Stop()
		}
	}()
	for {
		if chunks == nil && (deltas.waiting() || thoughts.waiting()) {
			if pause == nil {
				pause = time.NewTimer(deltaInterval)
			}
			chunks = make(chan next)
			go func() {
				for {
					ch, err := s.Next()
					chunks <- next{ch, err}
					if err != nil {
						return
					}
				}
			}()
		}
		var ch Chunk
		if chunks == nil {
			ch, err = s.Next()
		} else {
			select {
			case n := <-chunks:
				ch, err = n.ch, n.err
			case <-pause.C:
				if d, ok := thoughts.write("", time.Now()); ok {
					emitThought(d)
				}
				if d, ok := deltas.write("", time.Now()); ok {
					emitText(d)
				}
				continue
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			flush()
			e.cutUsage(t, req, text.String(), reply.ToolCalls, usage)
			return Message{}, nil, nil, fmt.Errorf("model: %w", err)
		}
		switch {
		case ch.Usage != nil:
			usage = *ch.Usage
		case ch.Reasoning != "":
			emitText(deltas.flush()) // in order
			p := ch.Reasoning
			if room := e.cfg.MaxReasoning - kept; len(p) > room {
				cut := max(room, 0)
				for cut > 0 && !utf8.RuneStart(p[cut]) {
					cut--
				}
				omitted += len(p) - cut
				p = p[:cut]
			}
			kept += len(p)
			if p != "" {
				if d, ok := thoughts.write(p, time.Now()); ok {
					emitThought(d)
				}
			}
		case ch.Text != "" && scan != nil:
			scanned(scan.write(ch.Text))
		case ch.Text != "":
			addText(ch.Text)
		case ch.ToolCall != nil:
			addCall(*ch.ToolCall, nil)
		}
		if deltas.waiting() || thoughts.waiting() {
			if pause == nil {
				pause = time.NewTimer(deltaInterval)
			} else {
				pause.Reset(deltaInterval)
			}
		}
	}
	if scan != nil {
		scanned(scan.end())
	}
	flush()
	if omitted > 0 {
		e.emit(t.c, t.ID, t.red, t.log, EventReasoningDelta, ReasoningDelta{Omitted: omitted})
	}
	reply.Content = t.red.String(text.String())
	if usage.Reported {
		e.calib.observe(t.window.Model, t.reqBuf.requestBytes(req), usage.PromptTokens)
	} else {
		usage.PromptTokens, usage.CompletionTokens = estimateTokens(req.Messages, req.Tools), estimateTokens([]Message{reply}, nil)
	}
	e.recordUsage(t, usage)
	return reply, refused, keys, nil
}

// estimateTokens over-estimates the tokens of msgs and tools as one per 3
// bytes, rounded up: tokenizers of code average 3 to 4 bytes a token.
func estimateTokens(msgs []Message, tools []ToolSpec) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Role) + len(m.Content) + len(m.ToolCallID)
		for _, tc := range m.ToolCalls {
			n += len(tc.ID) + len(tc.Name) + len(tc.Arguments)
		}
	}
	for _, s := range tools {
		n += len(s.Name) + len(s.Description) + len(s.Parameters)
	}
	return (n + 2) / 3
}

// specs lists the tools for the model; shell's description names the
// user's secrets (names only).
func (e *Engine) specs(t *Turn) []ToolSpec {
	tools, gen := e.tools.sorted(t.ctx)
	if gen != 0 && gen == t.specsGen {
		return t.specs // the same tools, and a turn's secrets do not change
	}
	var specs []ToolSpec
	for _, tool := range tools {
		s := tool.Spec()
		if t.sub != nil && s.Name == "delegate" {
			continue // one level: a subagent does not delegate
		}
		if s.Name == "shell" {
			names := slices.Sorted(maps.Keys(t.secrets))
			s.Description += " Secrets available to you (write {{secret:NAME}} in the command, unquoted or inside double quotes, not in single quotes, backquotes or here-documents; the value reaches the command as one word through its environment, never through your context): " + nameList(names) + "."
		}
		specs = append(specs, s)
	}
	t.specs, t.specsGen = specs, gen
	return specs
}

// runTool runs one call through the approval gate and returns what the
// model sees: redacted and capped. A call refused while it streamed
// (refusal) is answered with its reason and nothing else happens.
func (e *Engine) runTool(t *Turn, tc ToolCall, refusal error) string {
	ctx := t.ctx
	call := &Call{ID: tc.ID, Name: tc.Name, Arguments: []byte(tc.Arguments), User: t.User, Conversation: t.Conversation, Turn: t.ID, turn: t}
	out, err := "", refusal
	if refusal == nil {
		out, err = e.execute(ctx, t, call)
	}
	errText := ""
	if err != nil {
		errText = capError(err.Error(), maxErrorText)
	}
	if err != nil && errors.Is(err, sandboxkit.ErrUnavailable) {
		e.emit(t.c, t.ID, t.red, t.log, EventSandboxUnavailable, SandboxUnavailable{Error: errText})
		// The text names no host path; the log keeps what the check found.
		t.log.Warn("sandbox unavailable", "tool", tc.Name, "detail", capError(sandboxkit.UnavailableDetail(err), maxErrorText))
	}
	if err != nil {
		t.log.Info("tool failed", "tool", tc.Name, "err", errText)
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		out += "error: " + errText
	}
	out = capOutput(t.red.String(out), e.cfg.MaxOutput)
	e.emit(t.c, t.ID, t.red, t.log, EventToolOutput, ToolOutput{ID: tc.ID, Name: tc.Name, Output: out})
	e.emit(t.c, t.ID, t.red, t.log, EventToolFinished, ToolFinished{ID: tc.ID, Name: tc.Name, Error: errText})
	return out
}

func (e *Engine) execute(ctx context.Context, t *Turn, call *Call) (string, error) {
	tool := e.tools.get(ctx, call.Name)
	if tool == nil {
		var names []string
		tools, _ := e.tools.sorted(ctx)
		for _, t := range tools {
			names = append(names, t.Spec().Name)
		}
		return "", fmt.Errorf("unknown tool %q; the tools are: %s", call.Name, strings.Join(names, ", "))
	}
	if err := checkArgs(tool.Spec(), call.Arguments); err != nil {
		return "", err
	}
	if x, ok := tool.(ExecTool); ok {
		a, err := x.Prepare(ctx, call)
		if err != nil {
			return "", err
		}
		if err := e.gate(t, call, a); err != nil {
			return "", err
		}
		call.Action = &a
	}
	return tool.Run(ctx, call)
}

// maxErrorText bounds an error's text in events and tool results.
const maxErrorText = 1 << 10

// capError makes s valid UTF-8 and cuts it to at most max bytes (plus a
// note of what was cut), at a character boundary.
func capError(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… [%d bytes cut]", s[:cut], len(s)-cut)
}

// capOutput keeps the head and tail of long output.
func capOutput(s string, max int) string {
	if len(s) <= max {
		return s
	}
	half := max / 2
	return fmt.Sprintf("%s\n[… %d bytes omitted …]\n%s", s[:half], len(s)-2*half, s[len(s)-half:])
}
