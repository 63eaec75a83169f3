package llmtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
)

func user(s string) agentcore.Message { return agentcore.Message{Role: agentcore.RoleUser, Content: s} }
func assistant(s string) agentcore.Message {
	return agentcore.Message{Role: agentcore.RoleAssistant, Content: s}
}
func tool(id, s string) agentcore.Message {
	return agentcore.Message{Role: agentcore.RoleTool, ToolCallID: id, Content: s}
}

// shellScript is the demo turn: a tool call, then text that needs its output.
var shellScript = &Script{Steps: []Step{
	{Text: "Let me run that.", ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: `{"command":"echo hi > f.txt && cat f.txt"}`}}},
	{Expect: "hi", Text: "The file holds “hi”."},
}}

func TestScriptReply(t *testing.T) {
	two := &Script{Steps: []Step{
		{ToolCalls: []agentcore.ToolCall{{Name: "a"}, {ID: "mine", Name: "b", Arguments: `{"x":1}`}}},
		{Text: "done", Expect: "out"},
	}}
	tests := []struct {
		name      string
		msgs      []agentcore.Message
		wantStep  int
		wantCalls []agentcore.ToolCall
		wantText  string
		wantErr   error
		errHas    []string
	}{
		{name: "first step", msgs: []agentcore.Message{user("go")}, wantStep: 0,
			wantCalls: []agentcore.ToolCall{{ID: "call_0_0", Name: "a", Arguments: "{}"}, {ID: "mine", Name: "b", Arguments: `{"x":1}`}}},
		{name: "second step matches", msgs: []agentcore.Message{user("go"), assistant(""), tool("call_0_0", "the output")}, wantStep: 1, wantText: "done"},
		{name: "second step mismatch", msgs: []agentcore.Message{user("go"), assistant(""), tool("call_0_0", "nothing")}, wantStep: 1,
			wantErr: ErrMismatch, errHas: []string{"step 1", `"out"`, `"nothing"`}},
		{name: "exhausted", msgs: []agentcore.Message{user("go"), assistant(""), user("more"), assistant("done"), user("again")}, wantStep: 2,
			wantErr: ErrExhausted, errHas: []string{"script exhausted", "2 assistant messages", "2 steps"}},
		{name: "no messages is step 0", msgs: nil, wantStep: 0,
			wantCalls: []agentcore.ToolCall{{ID: "call_0_0", Name: "a", Arguments: "{}"}, {ID: "mine", Name: "b", Arguments: `{"x":1}`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, n, err := two.reply(agentcore.Request{Messages: tt.msgs})
			if n != tt.wantStep {
				t.Errorf("step = %d, want %d", n, tt.wantStep)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				for _, s := range tt.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("err %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.Text != tt.wantText || !reflect.DeepEqual(st.ToolCalls, tt.wantCalls) {
				t.Errorf("reply = %q %+v, want %q %+v", st.Text, st.ToolCalls, tt.wantText, tt.wantCalls)
			}
		})
	}
	if two.Steps[0].ToolCalls[0].ID != "" || two.Steps[0].ToolCalls[0].Arguments != "" {
		t.Errorf("reply changed the script: %+v", two.Steps[0].ToolCalls[0])
	}
}

func TestPieces(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want []string
	}{
		{"", 4, nil},
		{"abc", 4, []string{"abc"}},
		{"abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"“hé”llo", 2, []string{"“h", "é”", "ll", "o"}},
	} {
		if got := pieces(tt.in, tt.n); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("pieces(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// drain reads a Stream to its end.
func drain(s agentcore.Stream) (texts []string, calls []agentcore.ToolCall, finish string, err error) {
	defer s.Close()
	for {
		c, err := s.Next()
		if err == io.EOF {
			return texts, calls, finish, nil
		}
		if err != nil {
			return texts, calls, finish, err
		}
		switch {
		case c.Text != "":
			texts = append(texts, c.Text)
		case c.ToolCall != nil:
			calls = append(calls, *c.ToolCall)
		case c.FinishReason != "":
			finish = c.FinishReason
		default:
			return texts, calls, finish, fmt.Errorf("empty chunk %+v", c)
		}
	}
}

func TestLLM(t *testing.T) {
	ctx := t.Context()
	llm := shellScript.LLM()

	s, err := llm.Stream(ctx, agentcore.Request{Messages: []agentcore.Message{user("make f.txt")}})
	if err != nil {
		t.Fatal(err)
	}
	texts, calls, finish, err := drain(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(texts) < 2 || strings.Join(texts, "") != "Let me run that." {
		t.Errorf("text chunks = %q, want several making %q", texts, "Let me run that.")
	}
	want := []agentcore.ToolCall{{ID: "call_0_0", Name: "shell", Arguments: `{"command":"echo hi > f.txt && cat f.txt"}`}}
	if !reflect.DeepEqual(calls, want) || finish != "tool_calls" {
		t.Errorf("calls = %+v finish %q, want %+v tool_calls", calls, finish, want)
	}

	_, err = llm.Stream(ctx, agentcore.Request{Messages: []agentcore.Message{user("x"), {Role: agentcore.RoleAssistant, ToolCalls: want}, tool("call_0_0", "no")}})
	if !errors.Is(err, ErrMismatch) {
		t.Errorf("mismatching request: err = %v, want ErrMismatch", err)
	}

	s, err = llm.Stream(ctx, agentcore.Request{Messages: []agentcore.Message{user("x"), {Role: agentcore.RoleAssistant, ToolCalls: want}, tool("call_0_0", "hi\n")}})
	if err != nil {
		t.Fatal(err)
	}
	texts, calls, finish, err = drain(s)
	if err != nil || strings.Join(texts, "") != "The file holds “hi”." || calls != nil || finish != "stop" {
		t.Errorf("second reply = %q %+v %q %v", texts, calls, finish, err)
	}
}

func TestLLMContext(t *testing.T) {
	stall := &Script{Steps: []Step{{Text: "thinking", Stall: true}}}
	abort := &Script{Steps: []Step{{Text: "thinking", Abort: true}}}
	req := agentcore.Request{Messages: []agentcore.Message{user("x")}}

	ctx, cancel := context.WithCancel(t.Context())
	s, err := stall.LLM().Stream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	texts, _, _, err := drain(s)
	if !errors.Is(err, context.Canceled) || strings.Join(texts, "") != "thinking" {
		t.Errorf("stalled stream: %q, err %v; want the text, then context.Canceled", texts, err)
	}
	if _, err := stall.LLM().Stream(ctx, req); !errors.Is(err, context.Canceled) {
		t.Errorf("Stream with a cancelled ctx: err = %v", err)
	}

	s, err = abort.LLM().Stream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := drain(s); !errors.Is(err, ErrAborted) {
		t.Errorf("aborted stream: err = %v, want ErrAborted", err)
	}
}

// The HTTP face, spoken to with plain net/http so the tests see the wire.

func post(t *testing.T, url, key string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), "POST", url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// chatBody is a request as OpenAI clients send it.
func chatBody(stream bool, msgs ...map[string]any) map[string]any {
	return map[string]any{"model": "m", "stream": stream, "messages": msgs}
}

func msg(role, content string) map[string]any {
	return map[string]any{"role": role, "content": content}
}

// readSSE returns the chunks of an event stream and whether [DONE] ended it.
func readSSE(t *testing.T, r io.Reader) ([]wireChunk, bool) {
	t.Helper()
	var chunks []wireChunk
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20) // the long lines of Fault.LineBytes
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			if sc.Scan() && strings.TrimSpace(sc.Text()) != "" {
				t.Errorf("data after [DONE]: %q", sc.Text())
			}
			return chunks, true
		}
		var c wireChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	return chunks, false
}

func errorMessage(t *testing.T, resp *http.Response) string {
	t.Helper()
	var e wireError
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("error body: %v", err)
	}
	if e.Error.Type == "" {
		t.Errorf("error without a type: %+v", e)
	}
	return e.Error.Message
}

func TestServerStream(t *testing.T) {
	s := &Script{Steps: []Step{{
		Text: "Two commands.",
		ToolCalls: []agentcore.ToolCall{
			{Name: "shell", Arguments: `{"command":"echo hello from the sandbox"}`},
			{ID: "call_x", Name: "read_file", Arguments: `{"path":"f.txt"}`},
		},
	}}}
	srv := NewServer(s)
	defer srv.Close()
	resp := post(t, srv.URL()+"/chat/completions", "", chatBody(true, msg("user", "go")))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	chunks, done := readSSE(t, resp.Body)
	if !done {
		t.Error("no data: [DONE]")
	}
	if len(chunks) < 2 || chunks[0].Choices[0].Delta.Role != "assistant" {
		t.Fatalf("first chunk is not the role delta: %+v", chunks)
	}
	var text strings.Builder
	var textChunks int
	type call struct{ id, typ, name, args string }
	calls := map[int]*call{}
	var order []int
	var finish []string
	for i, c := range chunks {
		if c.Object != "chat.completion.chunk" || c.ID != chunks[0].ID || c.Model != "m" || len(c.Choices) != 1 {
			t.Fatalf("chunk %d: %+v", i, c)
		}
		ch := c.Choices[0]
		if ch.FinishReason != nil {
			finish = append(finish, *ch.FinishReason)
			if i != len(chunks)-1 {
				t.Errorf("finish_reason in chunk %d of %d", i, len(chunks))
			}
		}
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			text.WriteString(*ch.Delta.Content)
			textChunks++
		}
		for _, tc := range ch.Delta.ToolCalls {
			if tc.Index == nil {
				t.Fatalf("chunk %d: tool call delta without index", i)
			}
			c, ok := calls[*tc.Index]
			if !ok { // first delta of a call: everything but the rest of the arguments
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" || tc.Function.Arguments == "" {
					t.Errorf("first delta of call %d lacks id, type, name or arguments: %+v", *tc.Index, tc)
				}
				c = &call{id: tc.ID, typ: tc.Type, name: tc.Function.Name}
				calls[*tc.Index] = c
				order = append(order, *tc.Index)
			} else if tc.ID != "" || tc.Type != "" || tc.Function.Name != "" {
				t.Errorf("later delta of call %d repeats more than index and arguments: %+v", *tc.Index, tc)
			}
			c.args += tc.Function.Arguments
		}
	}
	if text.String() != "Two commands." || textChunks < 2 {
		t.Errorf("text = %q in %d chunks, want %q in several", text.String(), textChunks, "Two commands.")
	}
	if !reflect.DeepEqual(order, []int{0, 1}) {
		t.Errorf("tool call indexes in order %v, want [0 1]", order)
	}
	want := map[int]*call{
		0: {"call_0_0", "function", "shell", `{"command":"echo hello from the sandbox"}`},
		1: {"call_x", "function", "read_file", `{"path":"f.txt"}`},
	}
	for i, w := range want {
		if g := calls[i]; g == nil || *g != *w {
			t.Errorf("call %d = %+v, want %+v", i, g, w)
		}
	}
	if len(chunks) < 8 {
		t.Errorf("only %d chunks: arguments were not split", len(chunks))
	}
	if !reflect.DeepEqual(finish, []string{"tool_calls"}) {
		t.Errorf("finish reasons %q, want one tool_calls", finish)
	}
}

// A usage chunk (empty choices, then [DONE]) comes exactly when the
// request asks for it, as from vLLM, and not from an endpoint that
// ignores the option (NoUsage); Bodies records what was sent.
func TestServerStreamUsage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		options   any
		fault     Fault
		wantUsage bool
	}{
		{"asked", map[string]any{"include_usage": true}, Fault{}, true},
		{"not asked", nil, Fault{}, false},
		{"asked false", map[string]any{"include_usage": false}, Fault{}, false},
		{"ignored", map[string]any{"include_usage": true}, Fault{NoUsage: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := NewServer(&Script{Steps: []Step{{Text: "hello"}}})
			defer srv.Close()
			srv.Inject(tc.fault)
			body := chatBody(true, msg("user", "hi"))
			if tc.options != nil {
				body["stream_options"] = tc.options
			}
			chunks, done := readSSE(t, post(t, srv.URL()+"/chat/completions", "", body).Body)
			if !done {
				t.Fatal("no [DONE]")
			}
			usage := 0
			for _, c := range chunks {
				if c.Usage != nil {
					usage++
				}
			}
			last := chunks[len(chunks)-1]
			if tc.wantUsage {
				// One token a message and a word; one a streamed piece.
				if usage != 1 || len(last.Choices) != 0 || last.Usage == nil || *last.Usage != (wireUsage{PromptTokens: 2, CompletionTokens: 2, TotalTokens: 4}) {
					t.Errorf("last chunk %+v (%d usage chunks), want one usage chunk without choices, last", last, usage)
				}
				last = chunks[len(chunks)-2]
			} else if usage != 0 {
				t.Errorf("%d usage chunks, want none", usage)
			}
			if f := last.Choices[0].FinishReason; f == nil || *f != "stop" {
				t.Errorf("finish_reason %v, want stop", f)
			}
			var sent map[string]any
			if b := srv.Bodies(); len(b) != 1 || json.Unmarshal(b[0], &sent) != nil || !reflect.DeepEqual(sent["stream_options"], tc.options) {
				t.Errorf("Bodies() = %s; want the request's body", b)
			}
		})
	}
}

func TestServerNonStream(t *testing.T) {
	srv := NewServer(shellScript)
	defer srv.Close()
	var c wireCompletion
	resp := post(t, srv.URL()+"/chat/completions", "", chatBody(false, msg("user", "go")))
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	ch := c.Choices[0]
	if c.Object != "chat.completion" || ch.FinishReason != "tool_calls" || ch.Message.Content == nil || *ch.Message.Content != "Let me run that." ||
		len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].ID != "call_0_0" || ch.Message.ToolCalls[0].Function.Name != "shell" {
		t.Errorf("completion = %+v", c)
	}
}

func TestServerErrors(t *testing.T) {
	srv, err := StartServer(shellScript, Options{APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	turn2 := func(toolOut string) map[string]any {
		return chatBody(true, msg("user", "go"),
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "call_0_0", "type": "function", "function": map[string]any{"name": "shell", "arguments": "{}"}}}},
			map[string]any{"role": "tool", "tool_call_id": "call_0_0", "content": toolOut})
	}
	tests := []struct {
		name    string
		path    string
		key     string
		body    any
		status  int
		msgHave []string
	}{
		{"no key", "/chat/completions", "", chatBody(true, msg("user", "go")), 401, []string{"API key"}},
		{"wrong key", "/chat/completions", "sk-other", chatBody(true, msg("user", "go")), 401, []string{"API key"}},
		{"mismatch", "/chat/completions", "sk-test", turn2("empty"), 400, []string{"step 1", `"hi"`, `"empty"`}},
		{"exhausted", "/chat/completions", "sk-test", chatBody(false, msg("user", "a"), msg("assistant", "b"), msg("assistant", "c")), 400, []string{"script exhausted"}},
		{"not JSON", "/chat/completions", "sk-test", "{", 400, []string{"invalid JSON"}},
		{"no messages", "/chat/completions", "sk-test", chatBody(true), 400, []string{"messages"}},
		{"bad content", "/chat/completions", "sk-test", chatBody(true, map[string]any{"role": "user", "content": 3}), 400, []string{"messages[0]"}},
		{"unknown route", "/completions", "sk-test", map[string]any{}, 404, []string{"/v1/completions"}},
		{"empty embedding input", "/embeddings", "sk-test", map[string]any{"input": []string{"a", ""}}, 400, []string{"input[1]"}},
		{"bad embedding input", "/embeddings", "sk-test", map[string]any{"input": 3}, 400, []string{"input"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, srv.URL()+tt.path, tt.key, tt.body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			m := errorMessage(t, resp)
			for _, s := range tt.msgHave {
				if !strings.Contains(m, s) {
					t.Errorf("message %q does not say %q", m, s)
				}
			}
		})
	}
	// With the key and a matching tool result the same turn succeeds.
	if resp := post(t, srv.URL()+"/chat/completions", "sk-test", turn2("hi\n")); resp.StatusCode != 200 {
		t.Errorf("matching request: status %d", resp.StatusCode)
	}
}

func TestServerRequests(t *testing.T) {
	srv := NewServer(shellScript)
	defer srv.Close()
	body := map[string]any{
		"model":  "m",
		"stream": true,
		"messages": []any{
			map[string]any{"role": "system", "content": "be brief"},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "make "}, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "x"}}, map[string]any{"type": "text", "text": "f.txt"}}},
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "shell", "arguments": `{"command":"true"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "c1", "content": "hi"},
		},
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "shell", "description": "run", "parameters": map[string]any{"type": "object"}}}},
	}
	if resp := post(t, srv.URL()+"/chat/completions", "", body); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := []agentcore.Request{{
		Messages: []agentcore.Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Content: "make f.txt"},
			{Role: "assistant", ToolCalls: []agentcore.ToolCall{{ID: "c1", Name: "shell", Arguments: `{"command":"true"}`}}},
			{Role: "tool", ToolCallID: "c1", Content: "hi"},
		},
		Tools: []agentcore.ToolSpec{{Name: "shell", Description: "run", Parameters: json.RawMessage(`{"type":"object"}`)}},
	}}
	if got := srv.Requests(); !reflect.DeepEqual(got, want) {
		t.Errorf("Requests() = %+v\nwant %+v", got, want)
	}
}

func TestFailNext(t *testing.T) {
	srv := NewServer(&Script{Steps: []Step{{Text: "ok"}}})
	defer srv.Close()
	srv.FailNext(2, 429)
	for i, want := range []int{429, 429, 200} {
		resp := post(t, srv.URL()+"/chat/completions", "", chatBody(false, msg("user", "x")))
		if resp.StatusCode != want {
			t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want)
		}
		if want == 429 {
			if m := errorMessage(t, resp); !strings.Contains(m, "429") {
				t.Errorf("message %q", m)
			}
		}
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d requests recorded, want 3 (failed ones too)", n)
	}

	srv.FailNext(1, 0)
	b, _ := json.Marshal(chatBody(false, msg("user", "x")))
	if resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", bytes.NewReader(b)); err == nil {
		resp.Body.Close()
		t.Errorf("FailNext(1, 0): got status %d, want a dropped connection", resp.StatusCode)
	}
	if resp := post(t, srv.URL()+"/embeddings", "", map[string]any{"input": "x"}); resp.StatusCode != 200 {
		t.Errorf("after the injected failures: status %d", resp.StatusCode)
	}
}

func TestServerAbortAndStall(t *testing.T) {
	srv := NewServer(&Script{Steps: []Step{{Text: "partial answer", Abort: true}}})
	defer srv.Close()
	resp := post(t, srv.URL()+"/chat/completions", "", chatBody(true, msg("user", "x")))
	body, err := io.ReadAll(resp.Body)
	if err == nil || !strings.Contains(string(body), `"part"`) || strings.Contains(string(body), "[DONE]") {
		t.Errorf("aborted reply: %q, err %v; want some text, then a broken connection", body, err)
	}

	stall := NewServer(&Script{Steps: []Step{{Text: "thinking", Stall: true}}})
	resp = post(t, stall.URL()+"/chat/completions", "", chatBody(true, msg("user", "x")))
	r := bufio.NewReader(resp.Body)
	for range 3 { // role delta, "thin", "king"
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		r.ReadString('\n')
	}
	closed := make(chan struct{})
	go func() { stall.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a stalled reply")
	}
}

func TestEmbeddings(t *testing.T) {
	srv := NewServer(shellScript)
	defer srv.Close()
	embed := func(body map[string]any) wireEmbeddingResponse {
		t.Helper()
		resp := post(t, srv.URL()+"/embeddings", "", body)
		var er struct {
			Data []struct {
				Index     int             `json:"index"`
				Embedding json.RawMessage `json:"embedding"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&er); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		out := wireEmbeddingResponse{}
		for _, d := range er.Data {
			var v []float32
			if body["encoding_format"] == "base64" {
				var s string
				json.Unmarshal(d.Embedding, &s)
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i+4 <= len(b); i += 4 {
					v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
				}
			} else if err := json.Unmarshal(d.Embedding, &v); err != nil {
				t.Fatal(err)
			}
			out.Data = append(out.Data, wireEmbedding{Index: d.Index, Embedding: v})
		}
		return out
	}
	vec := func(r wireEmbeddingResponse, i int) []float32 { return r.Data[i].Embedding.([]float32) }

	one := embed(map[string]any{"model": "e", "input": "sandbox overlay diff"})
	many := embed(map[string]any{"model": "e", "input": []string{"sandbox overlay diff", "overlay diff patch", "chocolate cake recipe"}})
	b64 := embed(map[string]any{"model": "e", "input": "sandbox overlay diff", "encoding_format": "base64"})
	small := embed(map[string]any{"model": "e", "input": "sandbox", "dimensions": 8})

	if len(many.Data) != 3 || many.Data[2].Index != 2 {
		t.Fatalf("%d embeddings for 3 inputs", len(many.Data))
	}
	a, b, c := vec(many, 0), vec(many, 1), vec(many, 2)
	if len(a) != 64 || len(vec(small, 0)) != 8 {
		t.Errorf("dimensions %d and %d, want 64 (default) and 8 (asked)", len(a), len(vec(small, 0)))
	}
	if !reflect.DeepEqual(vec(one, 0), a) || !reflect.DeepEqual(vec(b64, 0), a) || !reflect.DeepEqual(Embedding("sandbox overlay diff", 64), a) {
		t.Error("the same text got different vectors (string input, array input, base64, Embedding)")
	}
	dot := func(x, y []float32) (s float64) {
		for i := range x {
			s += float64(x[i]) * float64(y[i])
		}
		return s
	}
	if n := dot(a, a); math.Abs(n-1) > 1e-5 {
		t.Errorf("|v|² = %v, want 1", n)
	}
	if dot(a, b) <= dot(a, c) {
		t.Errorf("texts sharing words are not closer: %v <= %v", dot(a, b), dot(a, c))
	}
}

func TestModels(t *testing.T) {
	srv, err := StartServer(shellScript, Options{Model: "qwen-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get(srv.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m wireModels
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Data) != 1 || m.Data[0].ID != "qwen-test" || m.Object != "list" {
		t.Errorf("models = %+v, %v", m, err)
	}
}

// One Script serves many conversations at once: the step depends only on
// each request.
func TestConcurrentConversations(t *testing.T) {
	srv := NewServer(shellScript)
	defer srv.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		wg.Go(func() {
			c1 := map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "call_0_0", "type": "function", "function": map[string]any{"name": "shell", "arguments": "{}"}}}}
			for step, body := range []map[string]any{
				chatBody(true, msg("user", fmt.Sprint("conversation ", i))),
				chatBody(true, msg("user", fmt.Sprint("conversation ", i)), c1, map[string]any{"role": "tool", "tool_call_id": "call_0_0", "content": "hi"}),
			} {
				b, _ := json.Marshal(body)
				resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", bytes.NewReader(b))
				if err != nil {
					errs <- err
					return
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := []string{`"name":"shell"`, `"finish_reason":"stop"`}[step]
				if resp.StatusCode != 200 || !strings.Contains(string(data), want) {
					errs <- fmt.Errorf("conversation %d step %d: %d %s", i, step, resp.StatusCode, data)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(srv.Requests()); n != 40 {
		t.Errorf("%d requests recorded, want 40", n)
	}
}

func TestLoadScript(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		json    string
		wantErr string
	}{
		{"good", `{"steps":[{"text":"hi","tool_calls":[{"name":"shell","arguments":"{\"command\":\"true\"}"}]},{"expect":"x","text":"bye"}]}`, ""},
		{"fail_unknown_field", `{"steps":[{"txt":"hi"}]}`, `unknown field "txt"`},
		{"fail_no_steps", `{"steps":[]}`, "no steps"},
		{"fail_empty_step", `{"steps":[{"expect":"x"}]}`, "step 0: neither text nor tool calls"},
		{"fail_unnamed_call", `{"steps":[{"tool_calls":[{"arguments":"{}"}]}]}`, "step 0: tool call 0: no name"},
		{"fail_bad_arguments", `{"steps":[{"text":"a"},{"tool_calls":[{"name":"shell","arguments":"{"}]}]}`, "step 1: tool call 0 (shell): arguments are not JSON"},
		{"fail_stall_and_abort", `{"steps":[{"text":"a","stall":true,"abort":true}]}`, "both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".json")
			if err := os.WriteFile(path, []byte(tt.json), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := LoadScript(path)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				want := &Script{Steps: []Step{
					{Text: "hi", ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: `{"command":"true"}`}}},
					{Expect: "x", Text: "bye"},
				}}
				if !reflect.DeepEqual(s, want) {
					t.Errorf("LoadScript = %+v, want %+v", s, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %v, want one naming %s and saying %q", err, path, tt.wantErr)
			}
		})
	}
	if _, err := LoadScript(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}
