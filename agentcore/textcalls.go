package agentcore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"
)

// ToolCallMode is how a model calls tools.
type ToolCallMode string

const (
	// ToolCallsNative: the request offers the tools in its tools field
	// and the endpoint parses the model's calls (vLLM with a tool parser,
	// llama.cpp with --jinja). The default.
	ToolCallsNative ToolCallMode = "native"
	// ToolCallsText: for an endpoint without a tool parser. No tools
	// field is sent; the system prompt describes the tools and how to
	// call them, and the calls the model writes as text
	// (<tool_call>{"name":…,"arguments":…}</tool_call>, the Hermes and
	// Qwen format) are parsed out of its reply. The history is sent back
	// the same way, as text.
	ToolCallsText ToolCallMode = "text"
	// ToolCallsAuto: native, and calls the model writes as text anyway
	// are parsed too.
	ToolCallsAuto ToolCallMode = "auto"
)

// ParseToolCallMode checks a mode's name; "" is ToolCallsNative.
func ParseToolCallMode(s string) (ToolCallMode, error) {
	switch m := ToolCallMode(s); m {
	case "":
		return ToolCallsNative, nil
	case ToolCallsNative, ToolCallsText, ToolCallsAuto:
		return m, nil
	}
	return "", fmt.Errorf("tool call mode %q is not %s, %s or %s", s, ToolCallsNative, ToolCallsText, ToolCallsAuto)
}

// WithToolCalls returns l with its own tool call mode, which replaces
// Config.ToolCalls for the turns it serves (see Config.Model): e.g. a
// model profile's.
func WithToolCalls(l LLM, mode ToolCallMode) LLM {
	m := asModeLLM(l)
	m.mode = mode
	return m
}

// modeLLM is a model with its own settings (WithToolCalls,
// WithSystemPrompt).
type modeLLM struct {
	LLM
	mode   ToolCallMode
	prompt *template.Template
}

// inner is the model l wraps, whose optional methods (WindowedLLM, the
// endpoint's name) the wrapper hides.
func inner(l LLM) LLM {
	if m, ok := l.(modeLLM); ok {
		return m.LLM
	}
	return l
}

func asModeLLM(l LLM) modeLLM {
	if m, ok := l.(modeLLM); ok {
		return m
	}
	return modeLLM{LLM: l}
}

// The tags of a call written as text.
const (
	callOpen     = "<tool_call>"
	callClose    = "</tool_call>"
	responseOpen = "<tool_response>"
	// badCallName names a block that is not a call, in the history: the
	// model is answered why, as for any invalid call.
	badCallName = "invalid_tool_call"
)

// callScanner takes the tool calls a model writes as text out of its
// reply as it streams: text around the blocks stays text, a tag split
// across pieces is found, and it holds back at most a tag's length of
// text and a block's body of max bytes (the rest of a longer block is
// counted and dropped).
type callScanner struct {
	max  int
	in   bool   // inside a block
	tail []byte // held: what may be the start of the tag looked for
	body []byte // the block's body so far, at most max bytes
	over int    // bytes of the body past max
}

// scanned is text outside blocks, or a block's call and, if the block
// is not a valid call, why.
type scanned struct {
	text string
	call *ToolCall
	err  error
}

// write scans a piece of the reply.
func (s *callScanner) write(p string) []scanned {
	data := append(s.tail, p...)
	s.tail = nil
	var out []scanned
	text := func(b []byte) {
		if len(b) > 0 {
			out = append(out, scanned{text: string(b)})
		}
	}
	for len(data) > 0 {
		if !s.in {
			if i := bytes.Index(data, []byte(callOpen)); i >= 0 {
				text(data[:i])
				data, s.in = data[i+len(callOpen):], true
				continue
			}
			k := tagStart(data, callOpen)
			text(data[:len(data)-k])
			s.tail = append([]byte(nil), data[len(data)-k:]...)
			break
		}
		if i := bytes.Index(data, []byte(callClose)); i >= 0 {
			s.add(data[:i])
			out = append(out, s.block(true))
			data, s.in = data[i+len(callClose):], false
			continue
		}
		k := tagStart(data, callClose)
		s.add(data[:len(data)-k])
		s.tail = append([]byte(nil), data[len(data)-k:]...)
		break
	}
	return out
}

// end takes what is held at the end of the reply: a block the reply
// ends in is a call if its body is one (a stop sequence may have eaten
// its closing tag).
func (s *callScanner) end() []scanned {
	if !s.in {
		t := string(s.tail)
		s.tail = nil
		if t == "" {
			return nil
		}
		return []scanned{{text: t}}
	}
	s.add(s.tail)
	s.tail, s.in = nil, false
	return []scanned{s.block(false)}
}

func (s *callScanner) add(b []byte) {
	n := min(len(b), s.max-len(s.body))
	s.body = append(s.body, b[:n]...)
	s.over += len(b) - n
}

// block parses the finished block's body and starts afresh.
func (s *callScanner) block(closed bool) scanned {
	body, over := s.body, s.over
	s.body, s.over = nil, 0
	bad := func(err error) scanned {
		return scanned{call: &ToolCall{Name: badCallName, Arguments: "{}"}, err: err}
	}
	if over > 0 {
		return bad(fmt.Errorf("a %s block of %d bytes; the limit is %d: nothing was run. Split the work into smaller calls", callOpen, len(body)+over, s.max))
	}
	c, err := parseTextCall(body)
	if err != nil && !closed {
		err = fmt.Errorf("%w (the block was not closed with %s)", err, callClose)
	}
	if err != nil {
		return bad(err)
	}
	return scanned{call: c}
}

// parseTextCall reads a block's body: {"name": …, "arguments": {…}}
// ("parameters" is taken for "arguments", and arguments written as a
// JSON string holding the object are unquoted, as some models do).
func parseTextCall(body []byte) (*ToolCall, error) {
	var c struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	want := fmt.Sprintf(`want %s{"name": "<tool>", "arguments": {…}}%s`, callOpen, callClose)
	if err := json.Unmarshal(bytes.TrimSpace(body), &c); err != nil {
		return nil, fmt.Errorf("the %s block is not a valid call: %s: %v", callOpen, want, err)
	}
	if c.Name == nil || strings.TrimSpace(*c.Name) == "" {
		return nil, fmt.Errorf("the %s block names no tool: %s", callOpen, want)
	}
	args := c.Arguments
	if len(args) == 0 {
		args = c.Parameters
	}
	tc := &ToolCall{Name: strings.TrimSpace(*c.Name), Arguments: string(args)}
	var quoted string
	switch {
	case len(args) == 0 || string(args) == "null":
		tc.Arguments = "{}"
	case json.Unmarshal(args, &quoted) == nil:
		tc.Arguments = quoted
	}
	return tc, nil
}

// tagStart is the length of the longest tail of b that begins tag (but
// is not all of it).
func tagStart(b []byte, tag string) int {
	for k := min(len(b), len(tag)-1); k > 0; k-- {
		if strings.HasPrefix(tag, string(b[len(b)-k:])) {
			return k
		}
	}
	return 0
}

// errNotObject is why arguments that are JSON but not an object are
// refused.
var errNotObject = errors.New("not a JSON object")

// checkObject reports why args, as a model wrote them, are not a JSON
// object.
func checkObject(args string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &m); err != nil {
		return err
	}
	if m == nil { // null
		return errNotObject
	}
	return nil
}

// textHistory is msgs as a model without native tool calls reads them:
// an assistant message's calls as blocks in its text, tool results as
// <tool_response> blocks of a user message (one for a run of results),
// as the Hermes and Qwen chat templates write them.
func textHistory(msgs []Message) []Message {
	out := make([]Message, 0, len(msgs))
	results := false // out's last message holds tool results
	for _, m := range msgs {
		switch {
		case m.Role == RoleAssistant && len(m.ToolCalls) > 0:
			var b strings.Builder
			b.WriteString(m.Content)
			for _, tc := range m.ToolCalls {
				args := json.RawMessage(tc.Arguments)
				if !json.Valid(args) {
					args = json.RawMessage("{}")
				}
				call, _ := json.Marshal(struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				}{tc.Name, args})
				if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
					b.WriteByte('\n')
				}
				fmt.Fprintf(&b, "%s\n%s\n%s", callOpen, call, callClose)
			}
			out = append(out, Message{Role: RoleAssistant, Content: b.String()})
			results = false
		case m.Role == RoleTool:
			block := responseOpen + "\n" + m.Content + "\n" + strings.Replace(responseOpen, "<", "</", 1)
			if results {
				out[len(out)-1].Content += "\n" + block
				continue
			}
			out = append(out, Message{Role: RoleUser, Content: block})
			results = true
		default:
			out = append(out, m)
			results = false
		}
	}
	return out
}

// toolsInText describes the tools in the system prompt, for
// ToolCallsText: the format the Hermes and Qwen templates use.
func toolsInText(specs []ToolSpec) string {
	if len(specs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n\n# Tools\n\nYou call a tool by writing, in your reply, one block per call:\n%s\n{\"name\": \"<tool name>\", \"arguments\": {<its arguments, a JSON object>}}\n%s\n", callOpen, callClose)
	fmt.Fprintf(&b, "Write the block exactly so, then stop and wait: each call's result comes back in a %s block. The tools, as function signatures with JSON Schema parameters:\n<tools>\n", responseOpen)
	for _, s := range specs {
		params := s.Parameters
		if !json.Valid(params) {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		line, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{"name": s.Name, "description": s.Description, "parameters": params}})
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString("</tools>")
	return b.String()
}

// inMode returns req as the turn's model is sent it: in ToolCallsText
// mode the tools are described in the system message, none is sent as
// a tool, and the history's calls and results are text. The budget is
// made on the native shape, whose size is about the same.
func (t *Turn) inMode(req Request) Request {
	if t.mode != ToolCallsText {
		return req
	}
	msgs := req.Messages
	sys := ""
	if len(msgs) > 0 && msgs[0].Role == RoleSystem {
		sys, msgs = msgs[0].Content, msgs[1:]
	}
	req.Messages = withSystem(sys+toolsInText(req.Tools), textHistory(msgs))
	req.Tools = nil
	return req
}
