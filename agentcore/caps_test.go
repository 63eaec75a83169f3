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

// Calls written as text get the caps native calls get: past MaxToolCalls
// they are answered and not run, arguments over MaxToolArguments are
// refused before anything runs, and invalid arguments stored as {}.
func TestTextToolCallCaps(t *testing.T) {
	block := func(name, args string) string {
		return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>\n"
	}
	var reply strings.Builder
	reply.WriteString("Reading.\n")
	for i := range 20 {
		reply.WriteString(block("read_file", fmt.Sprintf(`{"path": "README.md", "limit": %d}`, i+1)))
	}
	model := &chunkLLM{replies: [][]agentcore.Chunk{
		textPieces(reply.String()),
		textPieces(block("shell", `{"command": "echo `+strings.Repeat("x", 200<<10)+`"}`), block("shell", `{"command": 1`)),
	}}
	h := newHarness(t, nil, func(c *agentcore.Config) {
		c.LLM, c.MaxToolCalls, c.MaxToolArguments, c.ToolCalls = model, 0, 100<<10, agentcore.ToolCallsText
	})
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	msgs, _ := h.store.Messages(t.Context(), "c")
	ran, capped := 0, 0
	for _, m := range msgs {
		switch {
		case m.Role != agentcore.RoleTool:
		case strings.Contains(m.Content, "# demo"):
			ran++
		case strings.Contains(m.Content, "16 tool calls"):
			capped++
		}
	}
	if ran != 16 || capped != 4 {
		t.Errorf("%d text calls ran and %d were capped; want 16 and 4", ran, capped)
	}
	second := msgs[len(msgs)-4] // the second reply, its two results, the last reply
	if second.Role != agentcore.RoleAssistant || len(second.ToolCalls) != 2 || second.ToolCalls[0].Arguments != "{}" || second.ToolCalls[1].Arguments != "{}" {
		t.Fatalf("second reply %+v; want two calls stored with {}", second)
	}
	if r := msgs[len(msgs)-3].Content; !hasAll(r, "limit", "nothing was run") {
		t.Errorf("the oversized text call was answered %q", r)
	}
	if r := msgs[len(msgs)-2].Content; !strings.Contains(r, "block is not a valid call") && !strings.Contains(r, "invalid arguments") {
		t.Errorf("the invalid text call was answered %q", r)
	}
	if as, _ := h.store.Approvals(t.Context(), "c"); len(as) != 0 {
		t.Errorf("approvals %d; want none", len(as))
	}
}
