package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/codumentor/codumentor/agentcore"
)

var (
	errClosed    = errors.New("llm: stream closed")
	errTruncated = errors.New("the reply ended before its finish_reason")
)

// Stream sends req to the chat model and returns its reply as it
// arrives: Reasoning chunks (a reasoning model's reasoning_content or
// reasoning deltas) and Text chunks as the model writes, then, when the reply is
// complete, each tool call in index order (an empty ID becomes
// "call_<index>", empty arguments "{}"), then the FinishReason, then a
// Usage (the configured model; Reported when the endpoint sent its token
// counts, as include_usage asks), then io.EOF. Failures before the reply
// begins are retried, see Config.
func (c *Client) Stream(ctx context.Context, req agentcore.Request) (agentcore.Stream, error) {
	s := &stream{c: c, parent: ctx, req: c.chatRequest(req), endpoint: c.base + "/chat/completions"}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

// stream is one reply; as agentcore.Stream allows, one goroutine uses it.
type stream struct {
	c        *Client
	parent   context.Context
	req      openai.ChatCompletionRequest
	endpoint string
	attempts int // requests sent

	// The current attempt.
	ctx    context.Context // parent, plus the idle timer's cancel
	cancel context.CancelCauseFunc
	idle   *time.Timer // cancels ctx with ErrTimeout while waiting too long
	oas    *openai.ChatCompletionStream

	delivered bool          // a chunk reached the caller: no more retries
	calls     map[int]*call // by the stream's index
	size      int           // bytes of text and tool calls so far, see Config.MaxReplyBytes
	pending   []agentcore.Chunk
	finish    string
	usage     agentcore.Usage // the endpoint's report, once it came
	done      bool            // every chunk is in pending
	err       error           // sticky: returned by every later Next
}

// callSize is what a tool call counts towards Config.MaxReplyBytes
// besides its id, name and arguments: roughly what keeping it costs.
const callSize = 64

// call is a tool call being assembled: builders, since its name and
// arguments can arrive in a great many deltas.
type call struct {
	id         string
	name, args strings.Builder
}

// open sends the request, with retries, until a reply begins.
func (s *stream) open() error {
	return s.c.retry(s.parent, &s.attempts, func(actx context.Context) (bool, error) {
		ctx, cancel := context.WithCancelCause(actx)
		idle := time.AfterFunc(s.c.timeout, func() { cancel(ErrTimeout) })
		oas, err := s.c.oa.CreateChatCompletionStream(ctx, s.req)
		idle.Stop()
		if err != nil {
			cancel(nil)
			return s.c.classify(s.parent, s.endpoint, s.attempts, timedOut(ctx, err))
		}
		s.ctx, s.cancel, s.idle, s.oas = ctx, cancel, idle, oas
		s.resetCalls()
		return false, nil
	})
}

// resetCalls forgets the tool calls of an earlier attempt.
func (s *stream) resetCalls() {
	s.calls, s.finish, s.size, s.usage = map[int]*call{}, "", 0, agentcore.Usage{}
}

// timedOut is err, or ErrTimeout when the idle timer caused it.
func timedOut(ctx context.Context, err error) error {
	if context.Cause(ctx) == ErrTimeout {
		return ErrTimeout
	}
	return err
}

// release ends the current attempt's request.
func (s *stream) release() {
	if s.oas != nil {
		s.idle.Stop()
		s.oas.Close()
		s.cancel(nil)
		s.oas = nil
	}
}

func (s *stream) Next() (agentcore.Chunk, error) {
	for {
		if err := s.parent.Err(); err != nil && s.err == nil {
			// Checked every round: the reply may be buffered already, and
			// tool call deltas can be many without a chunk to return.
			s.release()
			s.err, s.pending = err, nil
		}
		if len(s.pending) > 0 {
			ch := s.pending[0]
			s.pending = s.pending[1:]
			s.delivered = true
			return ch, nil
		}
		if s.err != nil {
			return agentcore.Chunk{}, s.err
		}
		if s.done {
			return agentcore.Chunk{}, io.EOF
		}
		s.idle.Reset(s.c.timeout) // only the endpoint's silence counts, not the caller's pace
		resp, err := s.recv()
		s.idle.Stop()
		if err == io.EOF && s.finish != "" {
			s.release()
			s.complete()
			continue
		}
		if err == io.EOF {
			err = errTruncated
		}
		if err != nil {
			s.fail(err)
			continue
		}
		if err := s.absorb(resp); err != nil {
			s.fail(err)
		}
	}
}

// fail ends the current attempt with err; it retries when nothing of the
// reply reached the caller yet, else makes err the stream's end.
func (s *stream) fail(err error) {
	retryable, err := s.c.classify(s.parent, s.endpoint, s.attempts, timedOut(s.ctx, err))
	s.release()
	if !retryable || s.delivered || s.attempts > s.c.maxRetries {
		s.err = err
		return
	}
	if err := sleep(s.parent, s.c.backoff(s.attempts, "")); err != nil {
		s.err = err
		return
	}
	s.pending = nil
	if err := s.open(); err != nil {
		s.err = err
	}
}

// recv reads the next chunk of the stream. go-openai reads a delta's
// reasoning_content (DeepSeek, llama.cpp, older vLLM) but not reasoning
// (vLLM since 0.11), which is taken into ReasoningContent here.
func (s *stream) recv() (openai.ChatCompletionStreamResponse, error) {
	var resp openai.ChatCompletionStreamResponse
	raw, err := s.oas.RecvRaw()
	if err != nil {
		return resp, err
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return resp, err
	}
	if !bytes.Contains(raw, []byte(`"reasoning"`)) {
		return resp, nil
	}
	var alt struct {
		Choices []struct {
			Delta struct {
				Reasoning string `json:"reasoning"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &alt); err != nil || len(alt.Choices) != len(resp.Choices) {
		return resp, err
	}
	for i, c := range alt.Choices {
		if d := &resp.Choices[i].Delta; d.ReasoningContent == "" {
			d.ReasoningContent = c.Delta.Reasoning
		}
	}
	return resp, nil
}

// absorb takes one chunk of the reply: text becomes pending chunks, tool
// call deltas are assembled by index until the reply is complete. It
// fails when the reply outgrows Config.MaxReplyBytes.
func (s *stream) absorb(resp openai.ChatCompletionStreamResponse) error {
	if u := resp.Usage; u != nil {
		// The last chunk of an include_usage stream (vLLM's has no
		// choices; some servers put it on the finish_reason chunk).
		s.usage = agentcore.Usage{PromptTokens: max(u.PromptTokens, 0), CompletionTokens: max(u.CompletionTokens, 0), Reported: true}
	}
	for _, ch := range resp.Choices {
		if ch.Index != 0 { // only one choice is asked for
			continue
		}
		// Every field counts, also those not passed on (a reasoning
		// model's thinking, a refusal, a legacy function call): the cap
		// bounds what the endpoint makes us read, not only what we keep.
		s.size += len(ch.Delta.Content) + len(ch.Delta.ReasoningContent) + len(ch.Delta.Refusal)
		if fc := ch.Delta.FunctionCall; fc != nil {
			s.size += len(fc.Name) + len(fc.Arguments)
		}
		for _, d := range ch.Delta.ToolCalls {
			s.size += len(d.ID) + len(d.Function.Name) + len(d.Function.Arguments)
		}
		if s.size > s.c.maxReply {
			return &replyError{err: ErrTooLarge, msg: "reply longer than " + size(s.c.maxReply)}
		}
		if ch.Delta.ReasoningContent != "" {
			s.pending = append(s.pending, agentcore.Chunk{Reasoning: ch.Delta.ReasoningContent})
		}
		if ch.Delta.Content != "" {
			s.pending = append(s.pending, agentcore.Chunk{Text: ch.Delta.Content})
		}
		for _, d := range ch.Delta.ToolCalls {
			s.addDelta(d)
		}
		if ch.FinishReason != "" {
			s.finish = string(ch.FinishReason)
		}
	}
	return nil
}

func (s *stream) addDelta(d openai.ToolCall) {
	var idx int
	switch {
	case d.Index != nil:
		idx = *d.Index
	case d.ID != "" || len(s.calls) == 0:
		// A server that sends no index starts a call with its id.
		idx = len(s.calls)
	default:
		idx = len(s.calls) - 1
	}
	tc := s.calls[idx]
	if tc == nil {
		tc = &call{}
		s.calls[idx] = tc
		s.size += callSize // deltas of only an index would cost nothing else
	}
	if d.ID != "" {
		tc.id = d.ID
	}
	if d.Function.Name != "" && d.Function.Name != tc.name.String() {
		tc.name.WriteString(d.Function.Name) // some servers split a name, none should repeat part of one
	}
	tc.args.WriteString(d.Function.Arguments)
}

// complete queues the assembled tool calls, in index order, and the
// finish reason.
func (s *stream) complete() {
	idxs := make([]int, 0, len(s.calls))
	for i := range s.calls {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for _, i := range idxs {
		if s.calls[i].name.Len() == 0 {
			s.err = &Error{Endpoint: s.endpoint, Attempts: s.attempts, Message: fmt.Sprintf("tool call %d of the reply has no name", i)}
			return
		}
	}
	for _, i := range idxs {
		c := s.calls[i]
		tc := agentcore.ToolCall{ID: c.id, Name: c.name.String(), Arguments: c.args.String()}
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d", i)
		}
		if tc.Arguments == "" {
			tc.Arguments = "{}"
		}
		s.pending = append(s.pending, agentcore.Chunk{ToolCall: &tc})
	}
	s.pending = append(s.pending, agentcore.Chunk{FinishReason: s.finish})
	u := s.usage
	u.Model = s.req.Model
	s.pending = append(s.pending, agentcore.Chunk{Usage: &u})
	s.done = true
}

func (s *stream) Close() error {
	s.release()
	if !s.done && s.err == nil {
		s.err = errClosed
	}
	s.pending = nil
	return nil
}
