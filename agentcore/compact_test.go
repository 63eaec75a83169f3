package agentcore_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// compactions are conv's context_compacted events.
func compactionsOf(t *testing.T, h *harness, conv string) []agentcore.ContextCompacted {
	t.Helper()
	var out []agentcore.ContextCompacted
	for _, ev := range h.store.AllEvents(conv) {
		if ev.Type == agentcore.EventContextCompacted {
			var c agentcore.ContextCompacted
			if err := json.Unmarshal(ev.Data, &c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
	}
	return out
}

// A subagent's history is compacted on its own (its event names it, and
// the conversation's history is not summarized by it); the
// conversation's compaction is read back from the Store by a new Engine,
// as after a restart.
func TestCompactionSubagentAndRestart(t *testing.T) {
	talk := strings.Repeat("Explaining what I found in the file, at length. ", 40) // ~2 KB: never elided
	s := &llmtest.Script{Reply: func(req agentcore.Request) (llmtest.Step, error) {
		if len(req.Tools) == 0 {
			return llmtest.Step{Text: "SUMMARY of the earlier work."}, nil
		}
		last := 0
		for i, m := range req.Messages {
			if m.Role == agentcore.RoleUser {
				last = i
			}
		}
		after := len(req.Messages) - 1 - last
		if strings.Contains(req.Messages[0].Content, "You are a subagent") {
			if after < 8 {
				return llmtest.Step{Text: talk, ToolCalls: []agentcore.ToolCall{{ID: fmt.Sprintf("s%d", after), Name: "read_file", Arguments: `{"path":"big.txt"}`}}}, nil
			}
			return llmtest.Step{Text: "sub done"}, nil
		}
		if after == 0 && strings.Contains(req.Messages[last].Content, "delegate") {
			return llmtest.Step{ToolCalls: []agentcore.ToolCall{{ID: "d1", Name: "delegate", Arguments: `{"task":"read big.txt again and again"}`}}}, nil
		}
		return llmtest.Step{Text: "main done. " + talk}, nil
	}}
	cfg := func(c *agentcore.Config) {
		c.Subagents, c.ContextWindow = agentcore.SubagentsShared, 4000
	}
	h := newHarness(t, s, cfg)
	if err := os.WriteFile(filepath.Join(h.lower, "big.txt"), []byte(strings.Repeat("line of the big file\n", 150)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(h.start("c", "please delegate")); err != nil {
		t.Fatal(err)
	}
	cs := compactionsOf(t, h, "c")
	if len(cs) == 0 {
		t.Logf("types %v outputs %v", h.types("c"), h.toolResults("c"))
	}
	if len(cs) == 0 || !strings.HasPrefix(cs[0].Agent, "sub_") {
		t.Fatalf("compactions %+v; want the subagent's, naming it", cs)
	}
	if cv, err := h.e.Context(t.Context(), "alice", "c"); err != nil || cv.Summary != nil {
		t.Fatalf("the conversation's context %+v, %v: a subagent's compaction is not the conversation's", cv.Summary, err)
	}
	for i := 0; len(compactionsOf(t, h, "c")) == len(cs); i++ {
		if i == 10 {
			t.Fatal("ten turns of long replies and no compaction of the conversation")
		}
		if err := h.wait(h.start("c", fmt.Sprintf("turn %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	all := compactionsOf(t, h, "c")
	mine := all[len(all)-1]
	if mine.Agent != "" || mine.Summary != "SUMMARY of the earlier work." {
		t.Fatalf("compaction %+v; want the conversation's", mine)
	}
	for _, req := range h.llm.requests()[len(h.llm.requests())-1:] {
		if !strings.Contains(req.Messages[0].Content, mine.Summary) {
			t.Errorf("the request after the compaction lacks the summary in its system message")
		}
	}
	// A new Engine on the same Store: the compaction is in effect.
	e2, err := agentcore.New(agentcore.Config{LLM: h.llm, Store: h.store, Workspaces: lowers(h.lower), Layers: h.layers, ContextWindow: 4000})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	cv, err := e2.Context(t.Context(), "alice", "c")
	if err != nil || cv.Summary == nil || cv.Summary.To != mine.To || !cv.Fits || cv.Window != 4000 {
		t.Fatalf("after a restart: %+v, %v; want the compaction to %d in effect", cv.Summary, err, mine.To)
	}
}

// A compaction within a turn ends at a message the turn itself stored
// (the turn keeps its history rather than reading it at each step): it
// names that message's ID as the Store gave it, and the turn's next
// request stands on the summary.
func TestCompactionWithinTurnNamesStoredMessage(t *testing.T) {
	talk := strings.Repeat("Explaining what I found in the file, at length. ", 40) // ~2 KB: never elided
	s := &llmtest.Script{Reply: func(req agentcore.Request) (llmtest.Step, error) {
		if len(req.Tools) == 0 {
			return llmtest.Step{Text: "SUMMARY of the earlier work."}, nil
		}
		if strings.Contains(req.Messages[0].Content, "SUMMARY of the earlier work.") {
			return llmtest.Step{Text: "done"}, nil
		}
		n := len(req.Messages) // a new offset each step: not a repetition
		return llmtest.Step{Text: talk, ToolCalls: []agentcore.ToolCall{{ID: fmt.Sprintf("r%d", n), Name: "read_file", Arguments: fmt.Sprintf(`{"path":"big.txt","offset":%d}`, n%100+1)}}}, nil
	}}
	h := newHarness(t, s, func(c *agentcore.Config) { c.ContextWindow = 8000 })
	if err := os.WriteFile(filepath.Join(h.lower, "big.txt"), []byte(strings.Repeat("line of the big file\n", 150)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(h.start("c", "read big.txt")); err != nil {
		t.Fatal(err)
	}
	cs := compactionsOf(t, h, "c")
	if len(cs) != 1 {
		t.Fatalf("%d compactions; want 1 (types %v)", len(cs), h.types("c"))
	}
	msgs, err := h.store.Messages(t.Context(), "c")
	if err != nil {
		t.Fatal(err)
	}
	c := cs[0]
	if c.To < 2 || c.To > len(msgs) || c.Last == "" || msgs[c.To-1].ID != c.Last {
		t.Fatalf("the compaction covers [%d,%d) and names message %q; the stored history has %d messages, message %d is %q", c.From, c.To, c.Last, len(msgs), c.To-1, msgs[min(max(c.To-1, 0), len(msgs)-1)].ID)
	}
	if c.To-1 < 1 {
		t.Errorf("the compaction ends after message %d, the user's; want after one the turn stored", c.To-1)
	}
	reqs := h.llm.requests()
	if last := reqs[len(reqs)-1]; !strings.Contains(last.Messages[0].Content, "SUMMARY") {
		t.Errorf("the last request's system message does not carry the summary")
	}
}
