// Package llmtest is the one fake in Codumentor's tests: a scripted chat
// model with two faces, an in-process agentcore.LLM and an OpenAI-compatible
// HTTP server (SSE streaming, tool calls split across chunks, embeddings).
//
// A Script is a list of Steps. Step N answers the request whose conversation
// already holds N assistant messages, so the choice depends only on the
// request: one Script serves any number of concurrent conversations, and a
// retried request gets the same answer.
//
//	s := &llmtest.Script{Steps: []llmtest.Step{
//		{ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: `{"command":"echo hi"}`}}},
//		{Expect: "hi", Text: "The command printed hi."},
//	}}
//	srv := llmtest.NewServer(s) // or s.LLM() to skip HTTP
//	defer srv.Close()
//	// point the client at srv.URL(); assert on srv.Requests()
//
// A request the script cannot answer (a failed Expect, or more assistant
// messages than steps) gets an error, never a made-up reply, so a test that
// drifts from its transcript fails where it drifted.
package llmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/codumentor/codumentor/agentcore"
)

// Step is one scripted model reply.
type Step struct {
	// Text is the reply's text, streamed in small pieces.
	Text string `json:"text,omitempty"`
	// Reasoning is a reasoning model's thinking, streamed before the
	// text in small pieces the way vLLM's reasoning parsers and
	// llama.cpp's --reasoning-format stream it: deltas of
	// reasoning_content (or the field Options.ReasoningField names)
	// without content. Clients must not send it back.
	Reasoning string `json:"reasoning,omitempty"`
	// ToolCalls are the calls the reply makes, after the text. An empty ID
	// becomes "call_<step>_<i>"; empty Arguments become "{}".
	ToolCalls []agentcore.ToolCall `json:"tool_calls,omitempty"`
	// Expect, when set, must be a substring of the content of the
	// request's last message; otherwise the request fails with ErrMismatch.
	Expect string `json:"expect,omitempty"`
	// Stall makes the reply stop after its text and send nothing more
	// until the request is cancelled (or the Server closes): for tests of
	// cancellation mid-stream.
	Stall bool `json:"stall,omitempty"`
	// Abort makes the reply break off after its text: the Server drops
	// the connection, the in-process stream returns ErrAborted. For tests
	// that a half-received reply is not replayed.
	Abort bool `json:"abort,omitempty"`
	// PromptTokens and CompletionTokens, when set, are the numbers the
	// Server's usage report for this reply gives instead of its rough
	// counts (for tests of accounting that assert exact numbers).
	PromptTokens     int `json:"prompt_tokens,omitempty"`
	CompletionTokens int `json:"completion_tokens,omitempty"`
}

// Script is a transcript of model replies; see the package comment for
// how a request picks its Step. A Script must not be changed while in use.
type Script struct {
	Steps []Step `json:"steps"`
	// Branches answer other conversations held in the same requests'
	// stream, e.g. a subagent's own history: a request whose first user
	// message contains a Branch's Match is answered from its Steps (the
	// first matching Branch; counted the same way) instead of Steps.
	Branches []Branch `json:"branches,omitempty"`
	// Reply, when set, answers every request in place of Steps and
	// Branches: for conversations whose requests do not hold every
	// earlier reply (a compacted history). Its error fails the request.
	Reply func(req agentcore.Request) (Step, error) `json:"-"`
}

// Branch is a separate transcript within a Script; see Script.Branches.
type Branch struct {
	Match string `json:"match"`
	Steps []Step `json:"steps"`
}

var (
	// ErrExhausted is returned for a request with as many assistant
	// messages as the script has steps, or more.
	ErrExhausted = errors.New("script exhausted")
	// ErrMismatch is returned when a request's last message does not
	// contain its step's Expect.
	ErrMismatch = errors.New("request does not match the script")
	// ErrAborted ends the in-process stream of a Step with Abort.
	ErrAborted = errors.New("llmtest: reply aborted by the script")
)

// LoadScript reads a Script from a JSON file ({"steps": [...]}, with the
// json names of Step's fields) and checks it.
func LoadScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("llmtest: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a misspelt "expect" would silently match everything
	var s Script
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("llmtest: %s: %w", path, err)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("llmtest: %s: %w", path, err)
	}
	return &s, nil
}

// check reports the first step a model could not have sent.
func (s *Script) check() error {
	if len(s.Steps) == 0 {
		return errors.New("script has no steps")
	}
	for i, st := range s.Steps {
		if st.Text == "" && len(st.ToolCalls) == 0 && !st.Stall && !st.Abort {
			return fmt.Errorf("step %d: neither text nor tool calls", i)
		}
		if st.Stall && st.Abort {
			return fmt.Errorf("step %d: both stall and abort", i)
		}
		for j, tc := range st.ToolCalls {
			if tc.Name == "" {
				return fmt.Errorf("step %d: tool call %d: no name", i, j)
			}
			if tc.Arguments != "" && !json.Valid([]byte(tc.Arguments)) {
				return fmt.Errorf("step %d: tool call %d (%s): arguments are not JSON", i, j, tc.Name)
			}
		}
	}
	return nil
}

// reply picks the step that answers req and returns it with its tool call
// IDs and arguments filled in, and its index. The Script is not changed.
func (s *Script) reply(req agentcore.Request) (Step, int, error) {
	n := 0
	first := ""
	for _, m := range req.Messages {
		if m.Role == agentcore.RoleAssistant {
			n++
		}
		if m.Role == agentcore.RoleUser && first == "" {
			first = m.Content
		}
	}
	if s.Reply != nil {
		st, err := s.Reply(req)
		if err != nil {
			return Step{}, n, err
		}
		return st.filled(n), n, nil
	}
	steps := s.Steps
	for _, b := range s.Branches {
		if b.Match != "" && strings.Contains(first, b.Match) {
			steps = b.Steps
			break
		}
	}
	if n >= len(steps) {
		return Step{}, n, fmt.Errorf("%w: the conversation holds %d assistant messages, the script has %d steps", ErrExhausted, n, len(steps))
	}
	st := steps[n]
	if st.Expect != "" {
		last := ""
		if len(req.Messages) > 0 {
			last = req.Messages[len(req.Messages)-1].Content
		}
		if !strings.Contains(last, st.Expect) {
			return Step{}, n, fmt.Errorf("%w: step %d expects the last message to contain %q, got %q", ErrMismatch, n, st.Expect, last)
		}
	}
	return st.filled(n), n, nil
}

// filled is st, step n, with its tool call IDs and arguments filled in.
func (st Step) filled(n int) Step {
	var calls []agentcore.ToolCall
	if len(st.ToolCalls) > 0 {
		calls = make([]agentcore.ToolCall, len(st.ToolCalls))
	}
	for i, tc := range st.ToolCalls {
		if tc.ID == "" {
			tc.ID = fmt.Sprintf("call_%d_%d", n, i)
		}
		if tc.Arguments == "" {
			tc.Arguments = "{}"
		}
		calls[i] = tc
	}
	st.ToolCalls = calls
	return st
}

// finishReason is OpenAI's finish_reason for a reply.
func (st Step) finishReason() string {
	if len(st.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// pieces splits s into pieces of at most n runes, the way a model streams
// tokens; never inside a rune, so every piece is valid UTF-8 in JSON.
func pieces(s string, n int) []string {
	var out []string
	for s != "" {
		i, runes := 0, 0
		for i < len(s) && runes < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			runes++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// textPiece and argPiece are the sizes, in runes, of streamed text and of
// streamed tool call arguments.
const (
	textPiece = 4
	argPiece  = 8
)

// LLM returns the in-process face of the script: the same step choice and
// errors as the Server, without HTTP. Reasoning arrives in several
// Reasoning chunks, text in several Text chunks,
// then each tool call as one chunk, then the FinishReason.
func (s *Script) LLM() agentcore.LLM { return scriptLLM{s} }

type scriptLLM struct{ s *Script }

func (l scriptLLM) Stream(ctx context.Context, req agentcore.Request) (agentcore.Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, _, err := l.s.reply(req)
	if err != nil {
		return nil, fmt.Errorf("llmtest: %w", err)
	}
	var chunks []agentcore.Chunk
	for _, p := range pieces(st.Reasoning, textPiece) {
		chunks = append(chunks, agentcore.Chunk{Reasoning: p})
	}
	for _, p := range pieces(st.Text, textPiece) {
		chunks = append(chunks, agentcore.Chunk{Text: p})
	}
	if !st.Stall && !st.Abort {
		for i := range st.ToolCalls {
			chunks = append(chunks, agentcore.Chunk{ToolCall: &st.ToolCalls[i]})
		}
		chunks = append(chunks, agentcore.Chunk{FinishReason: st.finishReason()})
	}
	return &chunkStream{ctx: ctx, chunks: chunks, stall: st.Stall, abort: st.Abort}, nil
}

var errClosed = errors.New("llmtest: stream closed")

// chunkStream is used by one goroutine, as agentcore.Stream allows.
type chunkStream struct {
	ctx    context.Context
	chunks []agentcore.Chunk
	stall  bool
	abort  bool
	closed bool
}

func (c *chunkStream) Next() (agentcore.Chunk, error) {
	if c.closed {
		return agentcore.Chunk{}, errClosed
	}
	if err := c.ctx.Err(); err != nil {
		return agentcore.Chunk{}, err
	}
	if len(c.chunks) == 0 {
		if c.stall {
			<-c.ctx.Done()
			return agentcore.Chunk{}, c.ctx.Err()
		}
		if c.abort {
			return agentcore.Chunk{}, ErrAborted
		}
		return agentcore.Chunk{}, io.EOF
	}
	ch := c.chunks[0]
	c.chunks = c.chunks[1:]
	return ch, nil
}

func (c *chunkStream) Close() error {
	c.closed = true
	return nil
}
