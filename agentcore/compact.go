package agentcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// window returns the context window of the turn's model: what the LLM
// says (WindowedLLM), else Config.ContextWindow.
func (e *Engine) window(ctx context.Context, llm LLM) ContextWindow {
	var cw ContextWindow
	if w, ok := inner(llm).(WindowedLLM); ok {
		var err error
		if cw, err = w.ContextWindow(ctx); err != nil {
			e.log.Warn("the model's context window is unknown; using the configured one", "err", err)
			cw = ContextWindow{Model: cw.Model}
		}
	}
	if cw.Tokens <= 0 {
		cw.Tokens = e.cfg.ContextWindow
	}
	return e.calib.windowOf(cw)
}

// loadSummaries returns the compactions of the conversation's own
// history (context_compacted events of no agent), oldest first, read
// from the Store once and then kept.
func (e *Engine) loadSummaries(ctx context.Context, c *conv) ([]*ContextCompacted, error) {
	c.sumMu.Lock()
	defer c.sumMu.Unlock()
	if c.sumLoaded {
		return c.sums, nil
	}
	var all []*ContextCompacted
	for after := int64(0); ; {
		evs, err := e.cfg.Store.Events(ctx, c.id, after, subscribeBatch)
		if err != nil {
			return nil, fmt.Errorf("reading the conversation's compactions: %w", err)
		}
		for _, ev := range evs {
			after = ev.Seq
			if ev.Type != EventContextCompacted {
				continue
			}
			var s ContextCompacted
			if json.Unmarshal(ev.Data, &s) == nil && s.Agent == "" {
				all = append(all, &s)
			}
		}
		if len(evs) < subscribeBatch {
			break
		}
	}
	c.sums, c.sumLoaded = all, true
	return all, nil
}

// summary is the compaction in effect for t's history hist: the newest
// that stands for a part of this branch of it (an edited or regenerated
// message leaves the summaries of the old branch behind).
func (e *Engine) summary(t *Turn, hist []Message) (*ContextCompacted, error) {
	if t.sub != nil {
		return t.sum, nil
	}
	sums, err := e.loadSummaries(t.ctx, t.c)
	if err != nil {
		return nil, err
	}
	for i := len(sums) - 1; i >= 0; i-- {
		if sums[i].covers(hist) {
			return sums[i], nil
		}
	}
	return nil, nil
}

func (e *Engine) contextInput(t *Turn, msgs []Message, sys string, specs []ToolSpec) (contextInput, error) {
	sum, err := e.summary(t, msgs)
	if err != nil {
		return contextInput{}, err
	}
	ratio, learnt := e.calib.get(t.window.Model)
	in := contextInput{system: sys, tools: specs, history: msgs, summary: sum, window: t.window, ratio: ratio, learnt: learnt}
	if r, ok := t.hist.(*readOnce); ok && r.read {
		in.buf, in.histGen = &t.reqBuf, r.reads
	}
	return in, nil
}

// request makes the step's request within the model's context window:
// buildContext's, after one compaction when that helps and after
// eliding even the latest step's outputs when nothing else does. force
// compacts even a request estimated to fit (the endpoint refused it).
func (e *Engine) request(t *Turn, msgs []Message, sys string, specs []ToolSpec, force string) (Request, error) {
	in, err := e.contextInput(t, msgs, sys, specs)
	if err != nil {
		return Request{}, err
	}
	in.requestOnly, in.forced = true, force != ""
	cv := buildContext(in)
	if force != "" && cv.compactTo == 0 {
		cv.compactTo = cv.furthest
	}
	if (!cv.Fits || force != "") && cv.compactTo > 0 {
		reason := force
		if reason == "" {
			reason = "budget"
		}
		if err := e.compact(t, &in, cv, reason); err != nil {
			return Request{}, err
		}
		cv = buildContext(in)
	}
	if !cv.Fits || force != "" {
		in.elideAll = true
		cv = buildContext(in)
	}
	if !cv.Fits {
		return Request{}, fmt.Errorf("%w: it needs about %d tokens with the system prompt and tools, and the model's window of %d tokens leaves %d for a request (%d kept for the reply); send a shorter message, or split it", ErrContextTooSmall, cv.Tokens, cv.Window, cv.Budget, cv.ReplyReserve)
	}
	return cv.req, nil
}

// recover prepares the retry of a request the endpoint refused as too
// long (err wraps ErrContextLength): it learns the window and the token
// ratio from what the endpoint said, compacts, and rebuilds the request.
// A rebuilt request no smaller than the refused one is not sent.
func (e *Engine) recover(t *Turn, refused Request, msgs []Message, sys string, specs []ToolSpec, err error) (Request, error) {
	var cle *ContextLengthError
	bytes := requestBytes(refused)
	if errors.As(err, &cle) && cle.Prompt > 0 {
		e.calib.observe(t.window.Model, bytes, cle.Prompt)
	} else {
		e.calib.scale(t.window.Model, 1.25)
	}
	if cle != nil && cle.Window > 0 {
		e.calib.learnWindow(t.window.Model, cle.Window)
		t.window = e.calib.windowOf(t.window)
	}
	t.log.Info("the endpoint refused a request as too long for the model; compacting and retrying once", "window", t.window.Tokens, "err", err)
	if r, ok := t.hist.(*readOnce); ok && r.read && len(r.msgs) == len(msgs) {
		msgs = r.msgs // with the IDs a compaction of the refused request read
	}
	req, rerr := e.request(t, msgs, sys, specs, "context_length")
	if rerr != nil {
		return Request{}, rerr
	}
	if requestBytes(req) >= bytes {
		return Request{}, fmt.Errorf("%w: the endpoint refused the request (%v) and nothing more can be left out of it; send a shorter message", ErrContextTooSmall, err)
	}
	return req, nil
}

// compact replaces the history before cv.compactTo with a summary made by
// one model call, records it (context_compacted) and puts it into in.
func (e *Engine) compact(t *Turn, in *contextInput, cv Context, reason string) error {
	budget := cv.Budget
	if budget <= 0 {
		budget = max(cv.Tokens/2, 2048)
	}
	from := cv.from
	if in.summary != nil && in.summary.To > from {
		from = in.summary.To
	}
	req := compactionRequest(in.summary, in.history, from, cv.compactTo, budget, in.ratio)
	text, err := e.complete(t, req, summaryCap(budget, in.ratio))
	if err != nil {
		return fmt.Errorf("compacting the conversation to fit the model's context window: %w", err)
	}
	s := &ContextCompacted{Summary: text, From: cv.from, To: cv.compactTo, TokensBefore: cv.Tokens, Reason: reason}
	if s.To > 0 && s.To <= len(in.history) {
		if in.history, err = withIDs(t.ctx, t, in.history, s.To-1); err != nil {
			return err
		}
		s.Last = in.history[s.To-1].ID
	}
	if t.sub != nil {
		s.Agent = t.sub.id
	}
	in.summary = s
	s.TokensAfter = buildContext(*in).Tokens
	if t.sub != nil {
		t.sum = s
	} else {
		t.c.sumMu.Lock()
		if t.c.sumLoaded {
			t.c.sums = append(t.c.sums, s)
		}
		t.c.sumMu.Unlock()
	}
	e.emit(t.c, t.ID, t.red, t.log, EventContextCompacted, s)
	return nil
}

// complete sends req and returns the reply's text (redacted, at most max
// bytes), recording the call's usage; tool calls are ignored.
func (e *Engine) complete(t *Turn, req Request, max int) (string, error) {
	if err := e.allowCall(t); err != nil {
		return "", err
	}
	s, err := t.llm.Stream(t.ctx, req)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	defer s.Close()
	var text strings.Builder
	var usage Usage
	for {
		ch, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("model: %w", err)
		}
		if ch.Usage != nil {
			usage = *ch.Usage
		}
		if text.Len() <= max {
			text.WriteString(ch.Text)
		}
	}
	out := strings.TrimSpace(t.red.String(text.String()))
	if out == "" {
		return "", errors.New("the model wrote an empty summary")
	}
	if usage.Reported {
		e.calib.observe(t.window.Model, requestBytes(req), usage.PromptTokens)
	} else {
		usage.PromptTokens, usage.CompletionTokens = estimateTokens(req.Messages, req.Tools), estimateTokens([]Message{{Content: out}}, nil)
	}
	e.recordUsage(t, usage)
	return capError(out, max), nil
}

// Context returns what the next request of the conversation would send
// (see Context), without calling the model. The caller checks that user
// owns the conversation.
func (e *Engine) Context(ctx context.Context, user, conversation string) (Context, error) {
	t := &Turn{User: user, Conversation: conversation, c: e.conv(conversation), ctx: ctx, secrets: map[string]string{}}
	if e.cfg.Secrets != nil {
		names, err := e.cfg.Secrets.Names(ctx, user)
		if err != nil {
			return Context{}, fmt.Errorf("agentcore: listing secrets: %w", err)
		}
		for _, n := range names {
			t.secrets[n] = ""
		}
	}
	llm, err := e.model(t)
	if err != nil {
		return Context{}, err
	}
	t.llm = llm // its system prompt
	t.window = e.window(ctx, llm)
	msgs, err := e.cfg.Store.Messages(ctx, conversation)
	if err != nil {
		return Context{}, fmt.Errorf("reading the conversation: %w", err)
	}
	specs := e.specs(t)
	sys, err := e.systemPrompt(t, specs)
	if err != nil {
		return Context{}, err
	}
	in, err := e.contextInput(t, msgs, sys, specs)
	if err != nil {
		return Context{}, err
	}
	cv := buildContext(in)
	if !cv.Fits {
		// As the next request would: eliding what it may (a compaction
		// needs the model, so it is not made here).
		in.elideAll = true
		cv = buildContext(in)
	}
	return cv, nil
}
