package agentcore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// chunkLLM replies with exactly the chunks of its next reply, then stop.
type chunkLLM struct {
	mu      sync.Mutex
	replies [][]agentcore.Chunk
}

func (l *chunkLLM) Stream(ctx context.Context, req agentcore.Request) (agentcore.Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var chunks []agentcore.Chunk
	if len(l.replies) > 0 {
		chunks, l.replies = l.replies[0], l.replies[1:]
	} else {
		chunks = []agentcore.Chunk{{Text: "done"}}
	}
	return &sliceStream{ctx: ctx, chunks: append(chunks, agentcore.Chunk{FinishReason: "stop"})}, nil
}

// stall, as a chunk's FinishReason, makes the stream wait for its
// context there.
const stall = "test-stall"

type sliceStream struct {
	ctx    context.Context
	chunks []agentcore.Chunk
}

func (s *sliceStream) Next() (agentcore.Chunk, error) {
	if err := s.ctx.Err(); err != nil {
		return agentcore.Chunk{}, err
	}
	if len(s.chunks) == 0 {
		return agentcore.Chunk{}, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	if c.FinishReason == stall {
		<-s.ctx.Done()
		return agentcore.Chunk{}, s.ctx.Err()
	}
	return c, nil
}

func (s *sliceStream) Close() error { return nil }

func textPieces(pieces ...string) []agentcore.Chunk {
	var cs []agentcore.Chunk
	for _, p := range pieces {
		cs = append(cs, agentcore.Chunk{Text: p})
	}
	return cs
}

// deltas returns conv's text_delta events' texts, joined, and their count.
func deltas(t *testing.T, h *harness, conv string) (string, int) {
	t.Helper()
	var b strings.Builder
	n := 0
	for _, ev := range h.store.AllEvents(conv) {
		if ev.Type != agentcore.EventTextDelta {
			continue
		}
		var d struct{ Text string }
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		b.WriteString(d.Text)
		n++
	}
	return b.String(), n
}

// A secret the model streams split across pieces, at every position, and
// one byte a piece, is redacted in the text_delta events as in the stored
// reply.
func TestSplitSecretRedacted(t *testing.T) {
	const v = "s3cr3t-Value-0123456789"
	var pieces []string
	for k := 1; k < len(v); k++ {
		pieces = append(pieces, "<"+v[:k], v[k:]+">")
	}
	for i := range len(v) {
		pieces = append(pieces, v[i:i+1])
	}
	pieces = append(pieces, " ünïcödé end")
	model := &chunkLLM{replies: [][]agentcore.Chunk{textPieces(pieces...)}}
	h := newHarness(t, nil, func(c *agentcore.Config) {
		c.LLM = model
		c.Secrets = secrets{"alice": {"PW": v}}
	})
	if err := h.wait(h.start("c", "tell me")); err != nil {
		t.Fatal(err)
	}
	got, _ := deltas(t, h, "c")
	want := strings.Repeat("<[secret:PW]>", len(v)-1) + "[secret:PW] ünïcödé end"
	if got != want {
		t.Errorf("text deltas joined:\n%q\nwant\n%q", got, want)
	}
	msgs, _ := h.store.Messages(t.Context(), "c")
	if last := msgs[len(msgs)-1]; last.Content != want {
		t.Errorf("stored reply %q", last.Content)
	}
	all, _ := json.Marshal(h.store.AllEvents("c"))
	if strings.Contains(string(all), v[:len(v)/2]) || strings.Contains(string(all), v[len(v)/2:]) {
		t.Error("the events hold half of the value")
	}
}

// 100k one-byte pieces do not make 100k events (one store transaction
// each): text deltas are coalesced.
func TestTextDeltasCoalesced(t *testing.T) {
	text := strings.Repeat("abcdefghij", 10_000)
	pieces := make([]string, len(text))
	for i := range text {
		pieces[i] = text[i : i+1]
	}
	model := &chunkLLM{replies: [][]agentcore.Chunk{textPieces(pieces...)}}
	h := newHarness(t, nil, func(c *agentcore.Config) { c.LLM = model })
	if err := h.wait(h.start("c", "talk")); err != nil {
		t.Fatal(err)
	}
	got, n := deltas(t, h, "c")
	if got != text {
		t.Fatalf("text deltas joined: %d bytes, want the %d of the reply", len(got), len(text))
	}
	if n > 200 {
		t.Errorf("%d text_delta events for %d one-byte pieces", n, len(pieces))
	}
}

// Text that arrives in a burst before the model pauses (as it does while
// it writes a tool call's arguments) is shown during the pause, not held
// until the next piece.
func TestTextDeltaBeforePause(t *testing.T) {
	model := &chunkLLM{replies: [][]agentcore.Chunk{append(textPieces("Let", " me", " think", " about it."), agentcore.Chunk{FinishReason: stall})}}
	h := newHarness(t, nil, func(c *agentcore.Config) {
		c.LLM = model
		c.Secrets = secrets{"alice": {"PW": "a-secret-value"}}
	})
	turn := h.start("c", "think")
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if got, _ := deltas(t, h, "c"); got != "Let me think about it." {
			return fmt.Errorf("during the pause the deltas show %q", got)
		}
		return nil
	})
	turn.Cancel()
	h.wait(turn)
}
