package agentcore

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// turnMsgs is one turn of a conversation: a user message, a read_file
// call and its output of out bytes, a reply.
func turnMsgs(i, out int) []Message {
	id := fmt.Sprintf("c%d", i)
	return []Message{
		{Role: RoleUser, Content: fmt.Sprintf("turn %d", i)},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: id, Name: "read_file", Arguments: fmt.Sprintf(`{"path":"f%d.go"}`, i)}}},
		{Role: RoleTool, ToolCallID: id, Content: strings.Repeat("x", out)},
		{Role: RoleAssistant, Content: "done"},
	}
}

func turns(n, out int) []Message {
	var h []Message
	for i := range n {
		h = append(h, turnMsgs(i, out)...)
	}
	return h
}

// checkPairs fails unless every tool call of req is answered right after
// its assistant message, and every answer follows its call.
func checkPairs(t *testing.T, req Request) {
	t.Helper()
	open := map[string]bool{}
	for i, m := range req.Messages {
		switch {
		case m.Role == RoleTool && !open[m.ToolCallID]:
			t.Errorf("message %d answers %q, which no earlier assistant message called", i, m.ToolCallID)
		case m.Role == RoleTool:
			delete(open, m.ToolCallID)
		case len(open) > 0:
			t.Errorf("message %d (%s) follows unanswered calls %v", i, m.Role, open)
		}
		for _, tc := range m.ToolCalls {
			open[tc.ID] = true
		}
	}
}

func TestBuildContext(t *testing.T) {
	in := contextInput{system: "sys", history: turns(6, 3000), ratio: defaultTokensPerByte}
	t.Run("unbudgeted", func(t *testing.T) {
		c := buildContext(in)
		if !c.Fits || c.Elided != 0 || len(c.req.Messages) != 1+len(in.history) || c.req.Messages[0].Content != "sys" {
			t.Fatalf("without a window: fits %v, %d elided, %d messages; want the history as is", c.Fits, c.Elided, len(c.req.Messages))
		}
	})
	t.Run("old outputs elided first", func(t *testing.T) {
		in := in
		in.history = append(in.history[:len(in.history)-1:len(in.history)-1], Message{Role: RoleUser, Content: "newest"},
			Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "n", Name: "read_file", Arguments: `{"path":"new.go"}`}}},
			Message{Role: RoleTool, ToolCallID: "n", Content: strings.Repeat("y", 3000)})
		in.window = ContextWindow{Tokens: 4000, Reply: 500}
		c := buildContext(in)
		if !c.Fits || c.Tokens > c.Budget || c.Budget != 3500 {
			t.Fatalf("fits %v, %d tokens of %d", c.Fits, c.Tokens, c.Budget)
		}
		checkPairs(t, c.req)
		msgs := c.req.Messages
		if last := msgs[len(msgs)-1]; last.Content != strings.Repeat("y", 3000) {
			t.Errorf("the latest step's output was elided: %q", last.Content)
		}
		// Oldest first: the first output is a stub naming how to get it.
		stub := msgs[3].Content
		if !c.Messages[3].Elided || c.Messages[3].ElidedBytes != 3000 || !strings.Contains(stub, `read_file {"path":"f0.go"}`) || !strings.Contains(stub, "3000 bytes") {
			t.Errorf("message 3 %+v %q; want the first output elided with a stub naming read_file and its arguments", c.Messages[3], stub)
		}
		if c.Elided == 0 || c.Elided >= 6 {
			t.Errorf("%d elided; want only as many old outputs as needed", c.Elided)
		}
		for i, m := range c.Messages {
			if i > 0 && m.Index != i-1 {
				t.Errorf("message %d has history index %d", i, m.Index)
			}
		}
	})
	t.Run("compaction needed", func(t *testing.T) {
		in := in
		in.history = turns(30, 50)
		in.window = ContextWindow{Tokens: 2000, Reply: 200}
		c := buildContext(in)
		if c.Fits || c.compactTo == 0 || in.history[c.compactTo].Role != RoleUser {
			t.Fatalf("fits %v, compactTo %d; want a compaction that ends at a user message", c.Fits, c.compactTo)
		}
		// A compaction in effect: its summary in the system message, the
		// history after it.
		in.summary = &ContextCompacted{Summary: "SUMMARY", From: 0, To: c.compactTo}
		c2 := buildContext(in)
		if !c2.Fits || !strings.Contains(c2.req.Messages[0].Content, "SUMMARY") || c2.Summary == nil || !c2.Messages[0].Summary {
			t.Fatalf("after compaction: fits %v, system %q", c2.Fits, c2.req.Messages[0].Content)
		}
		if len(c2.req.Messages) != 1+len(in.history)-c.compactTo || c2.Messages[1].Index != c.compactTo {
			t.Errorf("%d messages from index %d; want the history from %d", len(c2.req.Messages), c2.Messages[1].Index, c.compactTo)
		}
		checkPairs(t, c2.req)
	})
	t.Run("old large arguments elided", func(t *testing.T) {
		in := in
		big := `{"path":"x","content":"` + strings.Repeat("w", 20000) + `"}`
		in.history = []Message{{Role: RoleUser, Content: "write it"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "w", Name: "write_file", Arguments: big}}},
			{Role: RoleTool, ToolCallID: "w", Content: "wrote 20000 bytes"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "r", Name: "read_file", Arguments: `{"path":"x"}`}}},
			{Role: RoleTool, ToolCallID: "r", Content: "short"}}
		in.window = ContextWindow{Tokens: 4000, Reply: 500}
		c := buildContext(in)
		args := c.req.Messages[2].ToolCalls[0].Arguments
		if !c.Fits || !strings.Contains(args, "20025 bytes of arguments left out") || !c.Messages[2].Elided {
			t.Fatalf("fits %v, arguments %.80q; want them elided", c.Fits, args)
		}
		if in.history[1].ToolCalls[0].Arguments != big {
			t.Error("the history's own tool call changed")
		}
		checkPairs(t, c.req)
	})
	t.Run("within one turn", func(t *testing.T) {
		// One user message and many steps (a long turn, a subagent): the
		// compaction ends at a step, and the user message stays shown.
		in := in
		in.history = []Message{{Role: RoleUser, Content: "the task"}}
		for i := range 8 {
			id := fmt.Sprintf("s%d", i)
			in.history = append(in.history, Message{Role: RoleAssistant, Content: strings.Repeat("t", 1500), ToolCalls: []ToolCall{{ID: id, Name: "read_file", Arguments: "{}"}}}, Message{Role: RoleTool, ToolCallID: id, Content: "out"})
		}
		in.window = ContextWindow{Tokens: 4000, Reply: 500}
		c := buildContext(in)
		if c.Fits || c.compactTo <= 0 || in.history[c.compactTo].Role != RoleAssistant {
			t.Fatalf("fits %v, compactTo %d; want a compaction ending at a step", c.Fits, c.compactTo)
		}
		in.summary = &ContextCompacted{Summary: "S", To: c.compactTo}
		c = buildContext(in)
		if !c.Fits || c.req.Messages[1].Content != "the task" || c.Messages[1].Index != 0 || c.Messages[2].Index != in.summary.To {
			t.Fatalf("after it: fits %v, messages %+v; want the task, then the history from %d", c.Fits, c.Messages[:3], in.summary.To)
		}
		checkPairs(t, c.req)
	})
	t.Run("newest message alone too large", func(t *testing.T) {
		in := in
		in.history = []Message{{Role: RoleUser, Content: strings.Repeat("z", 30000)}}
		in.window = ContextWindow{Tokens: 4000}
		in.elideAll = true
		c := buildContext(in)
		if c.Fits || c.compactTo != 0 || c.req.Messages[1].Content != in.history[0].Content {
			t.Fatalf("fits %v, compactTo %d; want no fit, nothing to compact, the message unchanged", c.Fits, c.compactTo)
		}
	})
	t.Run("subagent instructions kept", func(t *testing.T) {
		in := in
		in.history = append([]Message{{Role: RoleSystem, Content: "SUB"}}, turns(3, 10)...)
		c := buildContext(in)
		if c.req.Messages[0].Role != RoleSystem || !strings.HasSuffix(c.req.Messages[0].Content, "SUB") || c.req.Messages[1].Role != RoleUser {
			t.Errorf("messages %+v; want one system message holding both", c.req.Messages[:2])
		}
	})
}

func TestCalibration(t *testing.T) {
	var c calibrations
	if r, ok := c.get("m"); ok || r != defaultTokensPerByte {
		t.Fatalf("uncalibrated: %v %v", r, ok)
	}
	c.observe("m", 1000, 250)
	r, ok := c.get("m")
	if !ok || r < 0.25*calibrationMargin-1e-9 || r > 0.25*calibrationMargin+1e-9 {
		t.Fatalf("after a report of 0.25: %v; want it with its margin", r)
	}
	c.observe("m", 1000, 500) // up at once
	if r, _ := c.get("m"); r < 0.5*calibrationMargin-1e-9 {
		t.Errorf("a larger ratio is taken at once: %v", r)
	}
	c.observe("m", 1000, 100) // down slowly
	if r, _ := c.get("m"); r < 0.4*calibrationMargin {
		t.Errorf("a smaller ratio is taken slowly: %v", r)
	}
	c.observe("tiny", 100000, 1)
	if r, _ := c.get("tiny"); r != minTokensPerByte {
		t.Errorf("an absurdly small ratio is clamped to %v: %v", minTokensPerByte, r)
	}
	c.learnWindow("m", 12000)
	if cw := c.windowOf(ContextWindow{Model: "m", Tokens: 16000}); cw.Tokens != 12000 {
		t.Errorf("a learnt smaller window: %+v", cw)
	}
	if cw := c.windowOf(ContextWindow{Model: "m", Tokens: 8000}); cw.Tokens != 8000 {
		t.Errorf("a configured smaller window stays: %+v", cw)
	}
}

// The compaction request fits its budget even when the messages it
// summarizes are far larger, each cut to its head and tail.
func TestCompactionRequestFits(t *testing.T) {
	h := []Message{{Role: RoleUser, Content: strings.Repeat("a", 200000)}, {Role: RoleAssistant, Content: "short reply"}, {Role: RoleUser, Content: "next"}}
	prev := &ContextCompacted{Summary: "PREVIOUS"}
	req := compactionRequest(prev, h, 0, 2, 8000, defaultTokensPerByte)
	if n := tokensOf(requestBytes(req), defaultTokensPerByte); n > 8000*3/4 {
		t.Errorf("the compaction request is %d tokens; the budget is 8000 and a quarter is for the summary", n)
	}
	text := req.Messages[1].Content
	if !strings.Contains(text, "PREVIOUS") || !strings.Contains(text, "short reply") || strings.Contains(text, "next") || len(req.Tools) != 0 {
		t.Errorf("the transcript %q…; want the previous summary and messages [0,2) only, no tools", text[:min(len(text), 200)])
	}
}

// BenchmarkContextBudget is the budget check of a 500-message
// conversation, old outputs elided to fit: at most 1 ms.
func BenchmarkContextBudget(b *testing.B) {
	in := contextInput{system: strings.Repeat("s", 4000), history: turns(125, 4000), ratio: defaultTokensPerByte, window: ContextWindow{Tokens: 32000}}
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		c := buildContext(in)
		d = append(d, time.Since(t0))
		if !c.Fits || c.Elided == 0 {
			b.Fatalf("fits %v, %d elided", c.Fits, c.Elided)
		}
	}
	p := p50Internal(d)
	b.ReportMetric(float64(p.Microseconds()), "p50-µs")
	if p > time.Millisecond {
		b.Errorf("the budget check of 500 messages takes %v (p50); the target is ≤ 1ms", p)
	}
}

func p50Internal(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// A summary stands only for the branch of the history it summarized:
// after an edit of an earlier message the new branch is shown whole.
func TestSummaryOfAnotherBranch(t *testing.T) {
	var hist []Message
	for i := range 3 {
		hist = append(hist, turnMsgs(i, 100)...)
	}
	for i := range hist {
		hist[i].ID = fmt.Sprintf("m%d", i)
	}
	sum := &ContextCompacted{Summary: "SUMMARY-OF-OLD", From: 0, To: 8, Last: "m7"}
	in := contextInput{system: "sys", history: hist, summary: sum, ratio: 1.0 / 3}
	if cv := buildContext(in); cv.Summary == nil || !strings.Contains(cv.req.Messages[0].Content, "SUMMARY-OF-OLD") {
		t.Fatalf("the summary of this branch is not used: %+v", cv.Summary)
	}
	// The same length, another branch from message 4 on.
	other := slices.Clone(hist)
	for i := 4; i < len(other); i++ {
		other[i].ID = fmt.Sprintf("b%d", i)
	}
	in.history = other
	if cv := buildContext(in); cv.Summary != nil || strings.Contains(cv.req.Messages[0].Content, "SUMMARY-OF-OLD") {
		t.Fatalf("another branch's summary is used: %+v", cv.Summary)
	}
	// A store without message IDs has one branch.
	for i := range other {
		other[i].ID = ""
	}
	sum.Last = ""
	if cv := buildContext(in); cv.Summary == nil {
		t.Fatal("the summary is not used without message IDs")
	}
}

// A turn's requests share a buffer (requestBuf): each must be what a
// build from scratch makes, and stay as it was sent while later ones
// append to the buffer, whatever changed between them.
func TestRequestBuf(t *testing.T) {
	steps := []struct {
		name   string
		add    int // turns appended to the history before the build
		sys    string
		window int
		gen    int
		sum    bool // a summary of the first 8 messages in effect
	}{
		{"first", 2, "sys", 0, 1, false},
		{"grown", 1, "sys", 0, 1, false},
		{"same", 0, "sys", 0, 1, false},
		{"elided", 1, "sys", 1000, 1, false},
		{"after elision", 1, "sys", 0, 1, false},
		{"other system", 0, "sys2", 0, 1, false},
		{"read again", 1, "sys2", 0, 2, false},
		{"summary", 1, "sys2", 0, 2, true},
		{"summary grown", 1, "sys2", 0, 2, true},
		{"summary gone", 0, "sys2", 0, 2, false},
	}
	var hist []Message
	var buf requestBuf
	type sent struct {
		name string
		req  Request
		was  []Message
	}
	var sents []sent
	for _, s := range steps {
		for range s.add {
			hist = append(hist, turnMsgs(len(hist)/4, 1000)...)
		}
		in := contextInput{system: s.sys, history: hist, ratio: defaultTokensPerByte, window: ContextWindow{Tokens: s.window}, requestOnly: true}
		if s.sum {
			in.summary = &ContextCompacted{Summary: "SUMMARY", From: 0, To: 8}
		}
		want := buildContext(in)
		in.buf, in.histGen = &buf, s.gen
		got := buildContext(in)
		if !reflect.DeepEqual(got.req, want.req) || got.Tokens != want.Tokens || got.Elided != want.Elided || got.compactTo != want.compactTo || got.furthest != want.furthest {
			t.Fatalf("%s: with the buffer the request differs from one built anew (%d vs %d messages, %d vs %d tokens)", s.name, len(got.req.Messages), len(want.req.Messages), got.Tokens, want.Tokens)
		}
		if n, want := buf.requestBytes(got.req), requestBytes(got.req); n != want {
			t.Fatalf("%s: the buffer counts %d bytes of the request; it has %d", s.name, n, want)
		}
		if s.window > 0 && got.Elided == 0 {
			t.Fatalf("%s: nothing elided; the step tests elision", s.name)
		}
		// An LLM may append to what it was given and keep it: the next
		// requests write nothing of it, nor it of theirs.
		kept := append(got.req.Messages, Message{Role: RoleUser, Content: "appended by the LLM"})
		sents = append(sents, sent{s.name, Request{Messages: kept}, slices.Clone(kept)})
	}
	for _, s := range sents {
		if !reflect.DeepEqual(s.req.Messages, s.was) {
			t.Errorf("request %q changed after it was sent", s.name)
		}
	}
}
