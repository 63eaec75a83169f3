package agentcore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit"
)

// instantLLM replies at once, in process: a shell call of `true` to a
// user message, then "ok" once the result is in, each with the usage an
// endpoint reports. (llmtest's Script picks a step by the number of
// assistant messages, which grows without end over the turns of one
// conversation; its HTTP server would be measured with the engine.)
type instantLLM struct{}

func (instantLLM) Stream(ctx context.Context, req agentcore.Request) (agentcore.Stream, error) {
	// What vLLM would report, about a token per 4 bytes.
	n := 0
	for _, m := range req.Messages {
		n += len(m.Content) + len(m.ToolCallID)
		for _, tc := range m.ToolCalls {
			n += len(tc.ID) + len(tc.Name) + len(tc.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	usage := &agentcore.Usage{Model: "bench", PromptTokens: n/4 + 8*len(req.Messages), CompletionTokens: 10, Reported: true}
	if len(req.Tools) == 0 { // a compaction
		return &chunks{c: []agentcore.Chunk{{Text: "summary"}, {FinishReason: "stop"}, {Usage: usage}}}, nil
	}
	if req.Messages[len(req.Messages)-1].Role == agentcore.RoleUser {
		return &chunks{c: []agentcore.Chunk{{ToolCall: &agentcore.ToolCall{ID: "c", Name: "shell", Arguments: `{"command":"true"}`}}, {FinishReason: "tool_calls"}, {Usage: usage}}}, nil
	}
	return &chunks{c: []agentcore.Chunk{{Text: "ok"}, {FinishReason: "stop"}, {Usage: usage}}}, nil
}

type chunks struct{ c []agentcore.Chunk }

func (s *chunks) Next() (agentcore.Chunk, error) {
	if len(s.c) == 0 {
		return agentcore.Chunk{}, io.EOF
	}
	ch := s.c[0]
	s.c = s.c[1:]
	return ch, nil
}

func (s *chunks) Close() error { return nil }

// BenchmarkToolRoundTrip measures a turn with one tool round trip
// (model → shell `true` → model → text, always-allow) against the bare
// exec of `true` in a warm Session of the same conversation, and reports
// the medians and their difference: the engine's overhead (target ≤ 250
// µs p50, issue 28), with accounting and budgeting on.
func BenchmarkToolRoundTrip(b *testing.B) {
	h := newHarness(b, &llmtest.Script{}, func(c *agentcore.Config) {
		c.LLM, c.ShellAlwaysAllow = instantLLM{}, true
		c.ContextWindow = 32000 // budgeting on: the conversation grows with every turn
		c.Usage = &recorder{}   // accounting on: Allow before and Record after each model call
	})
	// The bare exec runs in a Session of its own over the same kind of
	// layer, as the engine's is.
	layer, err := h.layers.Create("bare")
	if err != nil {
		b.Fatal(err)
	}
	p, err := agentcore.WorkspacePolicy(sandboxkit.Settings{}, &sandboxkit.Workspace{Lower: h.lower, Upper: layer.Upper, Work: layer.Work})
	if err != nil {
		b.Fatal(err)
	}
	sess, err := sandboxkit.StartSession(b.Context(), p, sandboxkit.SessionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()

	var execP50 time.Duration
	b.Run("session-exec", func(b *testing.B) {
		var d []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if err := bareExec(b.Context(), sess); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(t0))
		}
		execP50 = p50(d)
		b.ReportMetric(float64(execP50.Microseconds()), "p50-µs")
	})
	runs := 0
	b.Run("turn-roundtrip", func(b *testing.B) {
		// Each run (-count) has a conversation of its own, which grows
		// by a turn at each iteration: the runs measure the same.
		runs++
		conv := fmt.Sprintf("bench%d", runs)
		defer h.e.Forget(conv)
		// Warm: the first turn starts the conversation's sandbox.
		if err := h.wait(h.start(conv, "go")); err != nil {
			b.Fatal(err)
		}
		// A bare exec is timed next to each turn too (outside the
		// benchmark's clock), so the difference compares the same moments
		// of a machine whose load changes.
		var turns, execs []time.Duration
		for b.Loop() {
			b.StopTimer()
			t0 := time.Now()
			if err := bareExec(b.Context(), sess); err != nil {
				b.Fatal(err)
			}
			execs = append(execs, time.Since(t0))
			b.StartTimer()
			t0 = time.Now()
			if err := h.wait(h.start(conv, "go")); err != nil {
				b.Fatal(err)
			}
			turns = append(turns, time.Since(t0))
		}
		turnP50, pairedP50 := p50(turns), p50(execs)
		b.ReportMetric(float64(turnP50.Microseconds()), "p50-µs")
		b.ReportMetric(float64((turnP50 - pairedP50).Microseconds()), "overhead-p50-µs")
		b.Logf("turn p50 %v − session exec p50 %v (session-exec run: %v) = overhead %v (target ≤ 250µs)", turnP50, pairedP50, execP50, turnP50-pairedP50)
	})
}

// bareExec runs what the shell tool runs for `true`, output captured as
// the tool captures it, without the engine.
func bareExec(ctx context.Context, sess *sandboxkit.Session) error {
	var out bytes.Buffer
	c := sess.Command(ctx, "sh", "-c", "true")
	c.Stdout, c.Stderr = &out, &out
	return c.Run()
}

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
