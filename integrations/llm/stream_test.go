package llm

import (
	"context"
	"errors"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// Item 5: a tool call's arguments in n deltas assemble with O(log n)
// allocations, not one growing copy per delta (which is O(n²) bytes).
func TestArgumentsAssembleLinearly(t *testing.T) {
	const n = 4096
	deltas := make([]openai.ToolCall, n)
	zero := 0
	for i := range deltas {
		deltas[i] = openai.ToolCall{Index: &zero, Function: openai.FunctionCall{Arguments: "01234567"}}
	}
	deltas[0].ID = "call_1"
	for i := range deltas { // a name in pieces too, as a hostile endpoint may send it
		deltas[i].Function.Name = string(rune('a' + i%26))
	}
	var got, name string
	allocs := testing.AllocsPerRun(3, func() {
		s := &stream{}
		s.resetCalls()
		for _, d := range deltas {
			s.addDelta(d)
		}
		s.complete()
		got = s.pending[0].ToolCall.Arguments
		name = s.pending[0].ToolCall.Name
	})
	if got != strings.Repeat("01234567", n) || len(name) != n {
		t.Fatalf("arguments of %d bytes, want %d; name of %d, want %d", len(got), 8*n, len(name), n)
	}
	if allocs > 64 {
		t.Errorf("%v allocations for %d deltas, want O(log n)", allocs, n)
	}
}

// Item 5: once the caller's context ends, Next returns its error, even
// when more of the reply is already buffered.
func TestNextHonoursCancel(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: strings.Repeat("buffered text ", 100), Stall: true}}})
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL(), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	s, err := c.Stream(ctx, agentcore.Request{Messages: []agentcore.Message{{Role: agentcore.RoleUser, Content: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if ch, err := s.Next(); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after cancel: %+v, %v; want context.Canceled", ch, err)
	}
}

// Tool calls count towards the reply's size even when their deltas carry
// nothing but an index, so their number is bounded too.
func TestEmptyToolCallsCount(t *testing.T) {
	s := &stream{c: &Client{maxReply: 100 * callSize}}
	s.resetCalls()
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		idx := i
		err = s.absorb(openai.ChatCompletionStreamResponse{Choices: []openai.ChatCompletionStreamChoice{{Delta: openai.ChatCompletionStreamChoiceDelta{ToolCalls: []openai.ToolCall{{Index: &idx}}}}}})
	}
	if !errors.Is(err, ErrTooLarge) || len(s.calls) > 101 {
		t.Errorf("after %d calls: %v, want ErrTooLarge by 101", len(s.calls), err)
	}
}
