package agentcore

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// scanAll feeds reply to a callScanner in pieces of n bytes and returns
// the text outside blocks, and the calls as name(arguments) or
// name!error.
func scanAll(reply string, n, limit int) (string, []string, int) {
	s := &callScanner{max: limit}
	var text strings.Builder
	var calls []string
	held := 0
	take := func(parts []scanned) {
		for _, p := range parts {
			switch {
			case p.call != nil && p.err != nil:
				calls = append(calls, p.call.Name+"!"+p.err.Error())
			case p.call != nil:
				calls = append(calls, p.call.Name+"("+p.call.Arguments+")")
			default:
				text.WriteString(p.text)
			}
		}
	}
	for i := 0; i < len(reply); i += n {
		take(s.write(reply[i:min(i+n, len(reply))]))
		held = max(held, len(s.tail)+len(s.body))
	}
	take(s.end())
	return text.String(), calls, held
}

// Calls written as text are found whatever the pieces they stream in,
// text around them stays text, and a block that is not a call is one
// (answered as invalid), never dropped.
func TestCallScanner(t *testing.T) {
	tests := []struct {
		name, reply string
		text        string
		calls       []string
	}{
		{"plain text", "no calls here < tool_call > <tool_cal", "no calls here < tool_call > <tool_cal", nil},
		{"one call", "Let me look.\n<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>", "Let me look.\n", []string{`shell({"command": "ls"})`}},
		{"two calls and text", "a<tool_call>{\"name\":\"x\",\"arguments\":{}}</tool_call>b<tool_call>{\"name\":\"y\"}</tool_call>c", "abc", []string{"x({})", "y({})"}},
		{"arguments as a string", `<tool_call>{"name":"x","arguments":"{\"a\":1}"}</tool_call>`, "", []string{`x({"a":1})`}},
		{"parameters", `<tool_call>{"name":"x","parameters":{"a":1}}</tool_call>`, "", []string{`x({"a":1})`}},
		{"not closed, valid", `done <tool_call>{"name":"x","arguments":{"a":1}}`, "done ", []string{`x({"a":1})`}},
		{"not closed, invalid", `<tool_call>{"name":"x","argu`, "", []string{badCallName + "!the <tool_call> block is not a valid call"}},
		{"not JSON", `<tool_call>shell ls</tool_call>after`, "after", []string{badCallName + "!the <tool_call> block is not a valid call"}},
		{"no name", `<tool_call>{"arguments":{}}</tool_call>`, "", []string{badCallName + "!the <tool_call> block names no tool"}},
	}
	for _, tt := range tests {
		for _, n := range []int{1, 2, 3, 5, 11, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, n), func(t *testing.T) {
				text, calls, _ := scanAll(tt.reply, n, 1<<10)
				if text != tt.text {
					t.Errorf("text %q, want %q", text, tt.text)
				}
				if len(calls) != len(tt.calls) {
					t.Fatalf("calls %q, want %q", calls, tt.calls)
				}
				for i := range calls {
					if !strings.HasPrefix(calls[i], tt.calls[i]) {
						t.Errorf("call %d: %q, want %q…", i, calls[i], tt.calls[i])
					}
				}
			})
		}
	}
}

// A block longer than the bound is refused with its size, and the
// scanner never holds more than the bound and a tag.
func TestCallScannerBounded(t *testing.T) {
	const limit = 256
	big := `<tool_call>{"name":"write_file","arguments":{"content":"` + strings.Repeat("x", 10*limit) + `"}}</tool_call>then`
	text, calls, held := scanAll(big, 7, limit)
	if text != "then" || len(calls) != 1 || !strings.Contains(calls[0], "limit is 256") {
		t.Errorf("text %q, calls %q; want the block refused by its size and the text after it", text, calls)
	}
	if held > limit+len(callClose) {
		t.Errorf("held %d bytes; want at most %d", held, limit+len(callClose))
	}
}

// What a model without native tool calls reads back: its calls as
// blocks in its own text, the results as <tool_response> blocks of one
// user message.
func TestTextHistory(t *testing.T) {
	got := textHistory([]Message{
		{Role: RoleUser, Content: "hi"},
		{Role: RoleAssistant, Content: "Looking.", ToolCalls: []ToolCall{{ID: "a", Name: "shell", Arguments: `{"command":"ls"}`}, {ID: "b", Name: "x", Arguments: "{}"}}},
		{Role: RoleTool, ToolCallID: "a", Content: "README.md"},
		{Role: RoleTool, ToolCallID: "b", Content: "error: no"},
		{Role: RoleAssistant, Content: "Done."},
	})
	want := []Message{
		{Role: RoleUser, Content: "hi"},
		{Role: RoleAssistant, Content: "Looking.\n<tool_call>\n{\"name\":\"shell\",\"arguments\":{\"command\":\"ls\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"x\",\"arguments\":{}}\n</tool_call>"},
		{Role: RoleUser, Content: "<tool_response>\nREADME.md\n</tool_response>\n<tool_response>\nerror: no\n</tool_response>"},
		{Role: RoleAssistant, Content: "Done."},
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("got\n%s\nwant\n%s", g, w)
	}
}
