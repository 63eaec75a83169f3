package agentcore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
)

// The model-visible history. A model's context window holds the request
// (system prompt, tools, messages) and the reply; a long conversation
// outgrows it. buildContext is the one place that decides what the next
// request sends: the stored history, with old tool outputs elided and
// older turns replaced by a summary (a compaction) when it would not fit.
// The stored messages never change; the route GET …/context shows what
// buildContext made of them.

var (
	// ErrContextLength is wrapped by an LLM's error when the endpoint
	// refused a request longer than the model's context window (vLLM's
	// 400 "maximum context length", llama.cpp's "exceeds the available
	// context size"); see ContextLengthError.
	ErrContextLength = errors.New("the request exceeds the model's context window")
	// ErrContextTooSmall fails a turn whose newest message, with what
	// must go with it (system prompt, tools, the tool calls it answers),
	// does not fit the model's context window even after every elision
	// and compaction: the message must be shorter.
	ErrContextTooSmall = errors.New("agentcore: the newest message does not fit the model's context window")
)

// ContextLengthError is an endpoint's refusal of a request too long for
// the model; it wraps ErrContextLength. The sizes are what the endpoint
// said, 0 when it did not say.
type ContextLengthError struct {
	// Window is the model's context length in tokens.
	Window int
	// Prompt is the tokens of the refused request's messages and tools.
	Prompt int
}

func (e *ContextLengthError) Error() string {
	switch {
	case e.Window > 0 && e.Prompt > 0:
		return fmt.Sprintf("%v (%d tokens of %d)", ErrContextLength, e.Prompt, e.Window)
	case e.Window > 0:
		return fmt.Sprintf("%v of %d tokens", ErrContextLength, e.Window)
	}
	return ErrContextLength.Error()
}

func (e *ContextLengthError) Unwrap() error { return ErrContextLength }

// ContextWindow is what a model can take: its context length and the
// part of it kept for the reply.
type ContextWindow struct {
	// Tokens is the model's context length (prompt and reply); 0:
	// unknown, requests are not budgeted.
	Tokens int
	// Reply is the tokens kept for the reply (the request's max_tokens);
	// 0: a default share of Tokens.
	Reply int
	// Model names the model for the calibration of token estimates
	// (e.g. endpoint and model name); models with the same Model share
	// it.
	Model string
}

// WindowedLLM is an LLM that knows its model's context window, from
// configuration or from the endpoint. An error is logged and the turn
// goes on with Config.ContextWindow.
type WindowedLLM interface {
	LLM
	ContextWindow(ctx context.Context) (ContextWindow, error)
}

// Context is what the next request to the model sends and why: the
// answer of Engine.Context and of GET /api/v1/conversations/{id}/context.
type Context struct {
	// Window is the model's context length in tokens; 0: unknown, so
	// nothing is budgeted.
	Window int `json:"window"`
	// ReplyReserve is the part of Window kept for the reply, and Budget
	// what the request may take (Window - ReplyReserve).
	ReplyReserve int `json:"reply_reserve"`
	Budget       int `json:"budget"`
	// Tokens is the request's estimated prompt tokens, messages and
	// tools.
	Tokens int `json:"tokens"`
	// ToolTokens are the tools' part of Tokens.
	ToolTokens int `json:"tool_tokens"`
	// TokensPerByte is the estimate's ratio; Calibrated: learnt from the
	// endpoint's usage reports rather than the default.
	TokensPerByte float64 `json:"tokens_per_byte"`
	Calibrated    bool    `json:"calibrated"`
	// Fits: Tokens is within Budget (always, without a budget).
	Fits bool `json:"fits"`
	// Summary, if set, is the compaction the system message carries.
	Summary *ContextSummary `json:"summary,omitempty"`
	// Elided counts the tool outputs replaced by a stub, and the
	// assistant messages whose large tool call arguments were.
	Elided int `json:"elided"`
	// Messages are the request's messages, in order.
	Messages []ContextMessage `json:"messages"`

	req Request
	// compactTo is where a compaction would end: a user message's
	// index, after which the kept history fits comfortably (or the
	// newest user message); 0 when no compaction can help.
	compactTo int
	// furthest is the latest end a compaction can have (see
	// compactionEnd); 0: none.
	furthest int
	// from is the first history index a compaction covers.
	from int
}

// ContextSummary says what a compaction in effect covers.
type ContextSummary struct {
	From   int `json:"from"`
	To     int `json:"to"`
	Tokens int `json:"tokens"`
}

// ContextMessage is one message of the next request.
type ContextMessage struct {
	Role Role `json:"role"`
	// Index is the message's index in the stored history; -1 for the
	// system message.
	Index  int `json:"index"`
	Bytes  int `json:"bytes"`
	Tokens int `json:"tokens"`
	// ToolCalls are the names of the calls an assistant message makes.
	ToolCalls  []string `json:"tool_calls,omitempty"`
	ToolCallID string   `json:"tool_call_id,omitempty"`
	// Elided: a tool output replaced by a stub of Bytes, or an
	// assistant message's large tool call arguments by stubs;
	// ElidedBytes were left out.
	Elided      bool `json:"elided,omitempty"`
	ElidedBytes int  `json:"elided_bytes,omitempty"`
	// Summary: the system message carries the compaction's summary.
	Summary bool `json:"summary,omitempty"`
}

// Token estimates. A request's bytes are counted with an overhead per
// message and per tool (the chat template's markers) and multiplied by a
// ratio: defaultTokensPerByte until an endpoint reported a prompt's
// tokens, then the reports' ratio with a margin, within safe bounds.
const (
	defaultTokensPerByte = 1.0 / 3 // tokenizers of code average 3 to 4 bytes a token
	minTokensPerByte     = 1.0 / 6
	maxTokensPerByte     = 1.0
	calibrationMargin    = 1.1
	messageOverhead      = 16
	toolOverhead         = 32
)

// calibrations are the learnt tokens-per-byte ratios and context
// windows, by model.
type calibrations struct {
	mu    sync.Mutex
	ratio map[string]float64
	// window: a refusal named a window smaller than the one configured
	// or reported (or the only one known).
	window map[string]int
}

// learnWindow notes that model's endpoint said its window is n tokens.
func (c *calibrations) learnWindow(model string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.window == nil {
		c.window = map[string]int{}
	}
	if w, ok := c.window[model]; !ok || n < w {
		c.window[model] = n
	}
}

// windowOf is cw with a smaller window an endpoint said replacing its
// own.
func (c *calibrations) windowOf(cw ContextWindow) ContextWindow {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w, ok := c.window[cw.Model]; ok && (cw.Tokens <= 0 || w < cw.Tokens) {
		cw.Tokens = w
	}
	return cw
}

// get returns model's ratio, with its margin, and whether it was learnt.
func (c *calibrations) get(model string) (float64, bool) {
	c.mu.Lock()
	r, ok := c.ratio[model]
	c.mu.Unlock()
	if !ok {
		return defaultTokensPerByte, false
	}
	return min(max(r*calibrationMargin, minTokensPerByte), maxTokensPerByte), true
}

// observe learns from a report that bytes of request were tokens: a
// larger ratio at once, a smaller one slowly, so the estimate stays on
// the safe side of a conversation whose content changes.
func (c *calibrations) observe(model string, bytes, tokens int) {
	if bytes <= 0 || tokens <= 0 {
		return
	}
	obs := float64(tokens) / float64(bytes)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ratio == nil {
		c.ratio = map[string]float64{}
	}
	r, ok := c.ratio[model]
	switch {
	case !ok || obs > r:
		r = obs
	default:
		r = 0.8*r + 0.2*obs
	}
	c.ratio[model] = r
}

// scale raises model's ratio by f: a request estimated to fit was refused
// and the endpoint did not say by how much.
func (c *calibrations) scale(model string, f float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ratio == nil {
		c.ratio = map[string]float64{}
	}
	r, ok := c.ratio[model]
	if !ok {
		r = defaultTokensPerByte / calibrationMargin
	}
	c.ratio[model] = min(r*f, maxTokensPerByte)
}

// messageBytes is what msg counts for the estimate.
func messageBytes(m Message) int {
	n := messageOverhead + len(m.Role) + len(m.Content) + len(m.ToolCallID)
	for _, tc := range m.ToolCalls {
		n += messageOverhead + len(tc.ID) + len(tc.Name) + len(tc.Arguments)
	}
	return n
}

func toolBytes(tools []ToolSpec) int {
	n := 0
	for _, s := range tools {
		n += toolOverhead + len(s.Name) + len(s.Description) + len(s.Parameters)
	}
	return n
}

// requestBytes is what req counts for the estimate.
func requestBytes(req Request) int {
	n := toolBytes(req.Tools)
	for _, m := range req.Messages {
		n += messageBytes(m)
	}
	return n
}

// maxKeptArguments is the size of tool call arguments never elided.
const maxKeptArguments = 1024

func tokensOf(bytes int, ratio float64) int { return int(math.Ceil(float64(bytes) * ratio)) }

// defaultReplyReserve is the share of a window kept for the reply when
// the request sets no max_tokens.
func defaultReplyReserve(window int) int { return min(max(window/8, 256), 4096, window/2) }

// contextInput is everything buildContext decides from.
type contextInput struct {
	system  string
	tools   []ToolSpec
	history []Message
	// summary, if set, stands for history[summary.From:summary.To].
	summary *ContextCompacted
	window  ContextWindow
	ratio   float64
	learnt  bool
	// elideAll elides even the outputs of the latest step.
	elideAll bool
	// requestOnly leaves Context.Messages empty: a step needs only the
	// request and its fit, not the account of each message.
	requestOnly bool
	// forced: a compaction is asked for even if the request fits, so
	// its end is wanted (without it, a request only step that fits
	// skips compactionEnd).
	forced bool
	// buf, if set, is the turn's requests' buffer: history is the one of
	// generation histGen of its reads, which only grows within one.
	buf     *requestBuf
	histGen int
}

// requestBuf keeps the messages of a turn's last request, so that the
// next one, whose history only grew, appends what is new to them in
// place of a copy of the whole history (a long conversation's is large).
// A request's messages are a capped view of its buffer: what is appended
// after it lies beyond its length, and nothing before is written again.
type requestBuf struct {
	ok  bool
	gen int
	// msgs is the system message and history[start:hist] as they were
	// sent, room to append after them.
	msgs        []Message
	sys         string
	start, hist int
	// bytes are messageBytes of each of msgs; sizes and idx are
	// scratch, written anew by each build.
	bytes, sizes, idx []int
	// sent is the last request built without elisions, and its
	// requestBytes.
	sent      Request
	sentBytes int
}

// requestBytes is requestBytes(req), known without counting if req is
// the buffer's last request.
func (b *requestBuf) requestBytes(req Request) int {
	s := b.sent
	if len(req.Messages) > 0 && len(req.Messages) == len(s.Messages) && &req.Messages[0] == &s.Messages[0] &&
		len(req.Tools) == len(s.Tools) && (len(req.Tools) == 0 || &req.Tools[0] == &s.Tools[0]) {
		return b.sentBytes
	}
	return requestBytes(req)
}

// buildContext makes the next request from in: system message (with the
// summary of a compaction in effect), the history after the compaction,
// and, when that exceeds the budget, old tool outputs replaced by stubs,
// oldest first. It never drops the system prompt, the newest user
// message or an assistant's tool call without its answer. When the
// request still does not fit, Context.compactTo says up to where a
// compaction would help.
func buildContext(in contextInput) Context {
	c := Context{Window: in.window.Tokens, TokensPerByte: in.ratio, Calibrated: in.learnt}
	if c.Window > 0 {
		c.ReplyReserve = in.window.Reply
		if c.ReplyReserve <= 0 || c.ReplyReserve >= c.Window {
			c.ReplyReserve = defaultReplyReserve(c.Window)
		}
		c.Budget = c.Window - c.ReplyReserve
	}
	hist := in.history
	sys := in.system
	first := 0
	if len(hist) > 0 && hist[0].Role == RoleSystem {
		// A subagent's own instructions: part of the system message.
		sys, first = withSystem(sys, hist[:1])[0].Content, 1
	}
	// The newest user message is always shown, also when a compaction
	// within its turn covers it.
	newest := -1
	for i := len(hist) - 1; i >= first; i-- {
		if hist[i].Role == RoleUser {
			newest = i
			break
		}
	}
	start := first
	if s := in.summary; s != nil && s.To > first && s.covers(hist) {
		sys += "\n\nSummary of the earlier part of this conversation (those messages are no longer shown to you; ask the user or re-run a tool if you need their details):\n" + s.Summary
		start = s.To
		c.Summary = &ContextSummary{From: s.From, To: s.To, Tokens: tokensOf(len(s.Summary), in.ratio)}
	}
	c.from = first
	b := in.buf
	if b == nil {
		b = &requestBuf{}
	}
	inserted := newest >= 0 && newest < start
	var msgs []Message
	mb := b.bytes[:0] // messageBytes of each of msgs
	if b.ok && b.gen == in.histGen && b.start == start && b.sys == sys && b.hist <= len(hist) && !inserted {
		msgs, mb = append(b.msgs, hist[b.hist:]...), b.bytes
	} else {
		room := 0
		if in.buf != nil {
			room = len(hist)/8 + 16 // for the turn's next steps
		}
		msgs = make([]Message, 0, len(hist)-start+2+room)
		msgs = append(msgs, Message{Role: RoleSystem, Content: sys})
		if inserted {
			msgs = append(msgs, hist[newest])
		}
		msgs = append(msgs, hist[start:]...) // one copy: a history is long
	}
	for _, m := range msgs[len(mb):] {
		mb = append(mb, messageBytes(m))
	}
	b.ok, b.gen, b.msgs, b.bytes, b.sys, b.start, b.hist = !inserted, in.histGen, msgs, mb, sys, start, len(hist)
	msgs = msgs[:len(msgs):len(msgs)] // what is appended next is not this request's
	idx := append(b.idx[:0], -1)      // history index of each of msgs
	if inserted {
		idx = append(idx, newest)
	}
	for i := start; i < len(hist); i++ {
		idx = append(idx, i)
	}
	c.ToolTokens = tokensOf(toolBytes(in.tools), in.ratio)
	sizes := slices.Grow(b.sizes[:0], len(msgs))[:len(msgs)]
	b.idx, b.sizes = idx, sizes
	total := c.ToolTokens
	for i, n := range mb {
		sizes[i] = tokensOf(n, in.ratio)
		total += sizes[i]
	}
	var elided []int // bytes left out, once any is
	if c.Budget > 0 && total > c.Budget {
		msgs = slices.Clone(msgs) // the buffer's stay as they were sent
		elided = make([]int, len(msgs))
		// The latest step's outputs are what the model asked for just
		// now: elided only when asked to (elideAll).
		latest := len(msgs)
		for latest > 1 && msgs[latest-1].Role == RoleTool {
			latest--
		}
		calls := map[string]ToolCall{}
		for _, m := range msgs {
			for _, tc := range m.ToolCalls {
				calls[tc.ID] = tc
			}
		}
		for pass := 0; pass < 2 && total > c.Budget; pass++ {
			end := latest
			if pass == 1 {
				if !in.elideAll {
					break
				}
				end = len(msgs)
			}
			for i := 1; i < end && total > c.Budget; i++ {
				m := msgs[i]
				if m.Role != RoleTool || elided[i] > 0 {
					continue
				}
				stub := elisionStub(calls[m.ToolCallID], len(m.Content))
				if len(stub) >= len(m.Content) {
					continue
				}
				elided[i] = len(m.Content)
				msgs[i].Content = stub
				n := tokensOf(messageBytes(msgs[i]), in.ratio)
				total -= sizes[i] - n
				sizes[i] = n
				c.Elided++
			}
			if pass == 1 {
				continue
			}
			// Then large arguments of older calls (a write_file's
			// content): their results say what happened.
			for i := 1; i < latest-1 && total > c.Budget; i++ {
				m := msgs[i]
				if m.Role != RoleAssistant {
					continue
				}
				tcs, cut := m.ToolCalls, 0
				for j, tc := range tcs {
					if len(tc.Arguments) <= maxKeptArguments {
						continue
					}
					if cut == 0 {
						tcs = slices.Clone(tcs) // the history's own must not change
					}
					cut += len(tc.Arguments)
					tcs[j].Arguments = fmt.Sprintf(`{"elided":"%d bytes of arguments left out to fit the context window"}`, len(tc.Arguments))
				}
				if cut == 0 {
					continue
				}
				msgs[i].ToolCalls = tcs
				elided[i] += cut
				n := tokensOf(messageBytes(msgs[i]), in.ratio)
				total -= sizes[i] - n
				sizes[i] = n
				c.Elided++
			}
		}
	}
	c.Tokens = total
	c.Fits = c.Budget == 0 || total <= c.Budget
	c.req = Request{Messages: msgs, Tools: in.tools}
	if in.buf != nil && elided == nil {
		n := toolBytes(in.tools)
		for _, x := range mb {
			n += x
		}
		b.sent, b.sentBytes = c.req, n
	}
	if !in.requestOnly {
		c.Messages = make([]ContextMessage, len(msgs))
		for i, m := range msgs {
			cm := ContextMessage{Role: m.Role, Index: idx[i], Bytes: len(m.Content), Tokens: sizes[i], ToolCallID: m.ToolCallID}
			if elided != nil {
				cm.Elided, cm.ElidedBytes = elided[i] > 0, elided[i]
			}
			if i == 0 {
				cm.Summary = c.Summary != nil
			}
			for _, tc := range m.ToolCalls {
				cm.ToolCalls = append(cm.ToolCalls, tc.Name)
			}
			c.Messages[i] = cm
		}
	}
	if c.Fits && in.requestOnly && !in.forced {
		return c // no compaction is wanted
	}
	best, furthest := compactionEnd(msgs, idx, sizes, newest, start, total-sum(sizes[1:]), c.Budget)
	c.furthest = furthest
	if !c.Fits {
		c.compactTo = best
	}
	return c
}

func sum(s []int) int {
	n := 0
	for _, v := range s {
		n += v
	}
	return n
}

// compactionEnd picks where a compaction of the history before it should
// end (msgs and their history indexes idx; newest is the newest user
// message's). A compaction ends at a user message, or, within the newest
// user message's turn, at an assistant message (a step: its tool calls
// follow it with their answers); the newest user message is shown
// anyway. best is the earliest end after which the kept messages take at
// most half of what the budget leaves besides fixed (system message and
// tools), so that some recent work stays verbatim; furthest is the
// latest end. 0, 0: no end after start, so no compaction can help.
func compactionEnd(msgs []Message, idx, sizes []int, newest, start, fixed, budget int) (best, furthest int) {
	room := (budget - fixed) / 2
	newestSize := 0
	for i, x := range idx {
		if x == newest {
			newestSize = sizes[i]
		}
	}
	suffix := 0
	for i := len(msgs) - 1; i >= 1 && idx[i] > start; i-- {
		suffix += sizes[i]
		m := msgs[i]
		if m.Role != RoleUser && (m.Role != RoleAssistant || idx[i] <= newest) {
			continue
		}
		if furthest == 0 {
			furthest = idx[i]
		}
		kept := suffix
		if idx[i] > newest {
			kept += newestSize // shown before the kept messages
		}
		if kept <= room {
			best = idx[i]
		}
	}
	if best == 0 {
		best = furthest
	}
	return best, furthest
}

// elisionStub is what stands for an elided tool output of n bytes: what
// it was and how to get it again.
func elisionStub(call ToolCall, n int) string {
	name, args := call.Name, call.Arguments
	if name == "" {
		return fmt.Sprintf("[output of %d bytes elided to fit the context window]", n)
	}
	if len(args) > 512 {
		args = capError(args, 512)
	}
	again := "call it again with the same arguments if you need it"
	if name == "shell" {
		again = "run it again if you need it and it is safe to repeat"
	}
	return fmt.Sprintf("[output of %d bytes elided to fit the context window: %s %s; %s]", n, name, args, again)
}

// Compaction requests. The summarizing model call gets the messages as
// one transcript in a user message, each cut so that the whole fits the
// budget (so a message larger than the window is summarized from its
// head and tail), after the summary it replaces.
const compactionSystem = "You compact a coding assistant's conversation so that it can go on within the model's context window. Write a concise summary of the transcript you are given: the user's goals and requests, decisions made, files read or changed (with paths), commands run and their important results, errors, and what remains to do. Keep exact names, paths and numbers. Do not address the user; write only the summary."

// compactionRequest is the request that summarizes hist[from:to] after
// prev (the summary in effect, if any), within budget tokens.
func compactionRequest(prev *ContextCompacted, hist []Message, from, to, budget int, ratio float64) Request {
	head := ""
	if prev != nil {
		head = "Summary of the conversation before this transcript:\n" + prev.Summary + "\n\n"
	}
	fixed := tokensOf(len(compactionSystem)+len(head)+2*messageOverhead+256, ratio)
	// The summary itself must also fit besides the request: a quarter of
	// the budget for it.
	room := max(int(float64(budget-fixed-budget/4)/ratio), 1024)
	parts := make([]string, 0, to-from)
	for _, m := range hist[from:to] {
		var b strings.Builder
		b.WriteString("### ")
		b.WriteString(string(m.Role))
		for _, tc := range m.ToolCalls {
			fmt.Fprintf(&b, " calls %s %s", tc.Name, capError(tc.Arguments, 256))
		}
		b.WriteString("\n")
		b.WriteString(m.Content)
		b.WriteString("\n")
		parts = append(parts, b.String())
	}
	cut := fillCap(parts, room)
	var t strings.Builder
	t.WriteString(head)
	t.WriteString("Transcript:\n")
	for _, p := range parts {
		if len(p) > cut {
			p = capOutput(p, cut)
		}
		t.WriteString(p)
	}
	t.WriteString("\nWrite the summary now.")
	return Request{Messages: []Message{{Role: RoleSystem, Content: compactionSystem}, {Role: RoleUser, Content: t.String()}}}
}

// fillCap is the largest cap c such that the parts, each cut to c bytes,
// take at most room bytes in all (no cap, math.MaxInt, if they fit whole).
func fillCap(parts []string, room int) int {
	sizes := make([]int, len(parts))
	for i, p := range parts {
		sizes[i] = len(p)
	}
	if sum(sizes) <= room {
		return math.MaxInt
	}
	sort.Ints(sizes)
	left := room
	for i, s := range sizes {
		n := len(sizes) - i
		if s*n > left {
			return max(left/n, 64)
		}
		left -= s
	}
	return math.MaxInt
}

// maxSummaryShare bounds a summary: a quarter of the budget.
func summaryCap(budget int, ratio float64) int { return max(int(float64(budget/4)/ratio), 1024) }

// covers reports whether s stands for hist[s.From:s.To] of this branch
// of the history: its last message is the one it summarized. A store
// that gives no message IDs has a single branch.
func (s *ContextCompacted) covers(hist []Message) bool {
	return s.To > 0 && s.To <= len(hist) && (s.Last == "" || hist[s.To-1].ID == s.Last)
}
