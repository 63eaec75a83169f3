package agentcore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
)

// Oversized tool-call arguments are refused before an approval exists
// and are stored nowhere; past MaxToolCalls the calls of a step are
// answered with an error and not run; error strings in events are capped.
func TestToolCallCaps(t *testing.T) {
	huge := strings.Repeat("x", 5<<20)
	var many []agentcore.ToolCall
	for i := range 40 {
		many = append(many, call(fmt.Sprintf("r%d", i), "read_file", map[string]string{"path": "README.md"}))
	}
	model := &chunkLLM{replies: [][]agentcore.Chunk{
		{{ToolCall: &agentcore.ToolCall{ID: "big", Name: "shell", Arguments: `{"command":"echo ` + huge + `"}`}}},
		toolChunks(many),
		{{ToolCall: &agentcore.ToolCall{ID: "longerr", Name: "no_such_tool_" + strings.Repeat("y", 100<<10), Arguments: "{}"}}},
		{{ToolCall: &agentcore.ToolCall{ID: "longpath", Name: "read_file", Arguments: `{"path":"` + strings.Repeat("ab/", 15<<10) + `"}`}}},
	}}
	h := newHarness(t, nil, func(c *agentcore.Config) { c.LLM, c.MaxToolCalls = model, 0 })
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	for _, ev := range h.store.AllEvents("c") {
		if ev.Type == agentcore.EventApprovalPending {
			t.Errorf("an approval was asked: %.200s", ev.Data)
		}
		if len(ev.Data) > 64<<10 {
			t.Errorf("%s event of %d bytes: %.200s", ev.Type, len(ev.Data), ev.Data)
		}
	}
	if as, _ := h.store.Approvals(t.Context(), "c"); len(as) != 0 {
		t.Errorf("approvals stored: %d", len(as))
	}
	msgs, _ := h.store.Messages(t.Context(), "c")
	all, _ := json.Marshal(msgs)
	if strings.Contains(string(all), huge[:1<<20]) {
		t.Error("the oversized arguments are in the stored messages")
	}
	res := h.toolResults("c")
	if !hasAll(res["big"], "arguments", "limit") {
		t.Errorf("oversized call answered %q", res["big"])
	}
	ran := 0
	for i := range many {
		r := res[fmt.Sprintf("r%d", i)]
		switch {
		case strings.Contains(r, "# demo"):
			ran++
		case !strings.Contains(r, "16 tool calls"):
			t.Errorf("call r%d answered %q", i, r)
		}
	}
	if ran != 16 {
		t.Errorf("%d of %d calls ran, want 16", ran, len(many))
	}
	for _, ev := range h.store.AllEvents("c") {
		var d struct{ Error string }
		json.Unmarshal(ev.Data, &d)
		if len(d.Error) > 1100 {
			t.Errorf("%s event with an error of %d bytes", ev.Type, len(d.Error))
		}
		if ev.Type == agentcore.EventToolFinished && strings.Contains(string(ev.Data), `"longpath"`) && !strings.Contains(d.Error, "bytes cut") {
			t.Errorf("long error not cut: %.300s", d.Error)
		}
	}
	if len(res["longerr"]) > 40<<10 {
		t.Errorf("unknown tool's answer is %d bytes", len(res["longerr"]))
	}
	// The log gets the capped error too, not the model's 45 KiB path.
	for line := range strings.Lines(h.logs.String()) {
		if len(line) > 4<<10 {
			t.Errorf("log line of %d bytes: %.300s", len(line), line)
		}
	}
}

func toolChunks(calls []agentcore.ToolCall) []agentcore.Chunk {
	var cs []agentcore.Chunk
	for i := range calls {
		cs = append(cs, agentcore.Chunk{ToolCall: &calls[i]})
	}
	return cs
}
