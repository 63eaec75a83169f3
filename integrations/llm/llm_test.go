package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/integrations/llm"
)

// fast is a Config for srv whose retries wait milliseconds.
func fast(url string) llm.Config {
	return llm.Config{BaseURL: url, Model: "test-model", EmbeddingModel: "test-embed", MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
}

func newClient(t *testing.T, cfg llm.Config) *llm.Client {
	t.Helper()
	c, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func userReq(s string) agentcore.Request {
	return agentcore.Request{Messages: []agentcore.Message{{Role: agentcore.RoleUser, Content: s}}}
}

// reply is a whole streamed reply, in the order it came.
type reply struct {
	texts  []string
	calls  []agentcore.ToolCall
	finish string
}

// read calls Next until io.EOF or an error, and checks the chunk order
// agentcore.Stream promises: text, then tool calls, then the finish reason,
// then at most one Usage.
func read(t *testing.T, s agentcore.Stream) (reply, error) {
	t.Helper()
	r, _, err := readUsage(t, s)
	return r, err
}

// readUsage is read that also returns the Usage chunk, if one came.
func readUsage(t *testing.T, s agentcore.Stream) (reply, *agentcore.Usage, error) {
	t.Helper()
	var r reply
	var usage *agentcore.Usage
	for {
		c, err := s.Next()
		if err == io.EOF {
			if r.finish == "" {
				t.Error("io.EOF before a FinishReason")
			}
			return r, usage, nil
		}
		if err != nil {
			return r, usage, err
		}
		if usage != nil {
			t.Errorf("chunk %+v after the Usage", c)
		}
		if c.Usage != nil {
			if r.finish == "" || c.Text != "" || c.ToolCall != nil || c.FinishReason != "" {
				t.Errorf("usage chunk %+v before the FinishReason or with another field", c)
			}
			usage = c.Usage
			continue
		}
		if r.finish != "" {
			t.Errorf("chunk %+v after the FinishReason", c)
		}
		switch {
		case c.Text != "" && c.ToolCall == nil && c.FinishReason == "":
			if len(r.calls) > 0 {
				t.Errorf("text %q after a tool call", c.Text)
			}
			r.texts = append(r.texts, c.Text)
		case c.ToolCall != nil && c.Text == "" && c.FinishReason == "":
			r.calls = append(r.calls, *c.ToolCall)
		case c.FinishReason != "" && c.Text == "" && c.ToolCall == nil:
			r.finish = c.FinishReason
		default:
			t.Fatalf("chunk with not exactly one field set: %+v", c)
		}
	}
}

func TestStreamText(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "Hello from the scripted model."}}})
	defer srv.Close()
	s, err := newClient(t, fast(srv.URL())).Stream(t.Context(), userReq("hi"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := read(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.texts, ""); got != "Hello from the scripted model." || len(r.texts) < 2 {
		t.Errorf("text %q in %d chunks, want it in several", got, len(r.texts))
	}
	if r.calls != nil || r.finish != "stop" {
		t.Errorf("calls %+v, finish %q; want none, stop", r.calls, r.finish)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("Next after io.EOF: %v", err)
	}
	// Close is idempotent: the second call fails no more than the first.
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Errorf("Close %d after io.EOF: %v", i+1, err)
		}
	}
}

func TestStreamToolCalls(t *testing.T) {
	tests := []struct {
		name string
		step llmtest.Step
		want reply
	}{
		{
			name: "one call split across chunks",
			step: llmtest.Step{ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: `{"command":"echo hi > f.txt && cat f.txt","cwd":"."}`}}},
			want: reply{calls: []agentcore.ToolCall{{ID: "call_0_0", Name: "shell", Arguments: `{"command":"echo hi > f.txt && cat f.txt","cwd":"."}`}}, finish: "tool_calls"},
		},
		{
			name: "text then three calls",
			step: llmtest.Step{Text: "Looking.", ToolCalls: []agentcore.ToolCall{
				{ID: "a", Name: "read_file", Arguments: `{"path":"go.mod"}`},
				{ID: "b", Name: "list_files", Arguments: `{"dir":"sandboxkit/overlay"}`},
				{ID: "c", Name: "search_files", Arguments: `{"pattern":"func (New|Open)\\(","note":"ünïcødé"}`},
			}},
			want: reply{texts: []string{"Look", "ing."}, calls: []agentcore.ToolCall{
				{ID: "a", Name: "read_file", Arguments: `{"path":"go.mod"}`},
				{ID: "b", Name: "list_files", Arguments: `{"dir":"sandboxkit/overlay"}`},
				{ID: "c", Name: "search_files", Arguments: `{"pattern":"func (New|Open)\\(","note":"ünïcødé"}`},
			}, finish: "tool_calls"},
		},
		{
			name: "call without arguments",
			step: llmtest.Step{ToolCalls: []agentcore.ToolCall{{Name: "list_files"}}},
			want: reply{calls: []agentcore.ToolCall{{ID: "call_0_0", Name: "list_files", Arguments: "{}"}}, finish: "tool_calls"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{tt.step}})
			defer srv.Close()
			s, err := newClient(t, fast(srv.URL())).Stream(t.Context(), userReq("go"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, err := read(t, s)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("reply = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

// What the engine sends is what the endpoint receives: roles, tool calls
// of assistant messages, tool_call_id of tool results, the tool specs.
func TestRequestReachesServer(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "a"}, {Text: "b"}, {Expect: "hi", Text: "The file holds hi."}}})
	defer srv.Close()
	req := agentcore.Request{
		Messages: []agentcore.Message{
			{Role: agentcore.RoleSystem, Content: "You are a coding assistant."},
			{Role: agentcore.RoleUser, Content: "Write f.txt"},
			{Role: agentcore.RoleAssistant, Content: "Sure.", ToolCalls: []agentcore.ToolCall{
				{ID: "call_1", Name: "shell", Arguments: `{"command":"echo hi > f.txt"}`},
				{ID: "call_2", Name: "read_file", Arguments: `{"path":"f.txt"}`},
			}},
			{Role: agentcore.RoleTool, ToolCallID: "call_1", Content: "exit status 0"},
			{Role: agentcore.RoleTool, ToolCallID: "call_2", Content: "hi\n"},
			{Role: agentcore.RoleAssistant, ToolCalls: []agentcore.ToolCall{{ID: "call_3", Name: "shell", Arguments: `{"command":"true"}`}}},
			{Role: agentcore.RoleTool, ToolCallID: "call_3", Content: "hi"},
		},
		Tools: []agentcore.ToolSpec{
			{Name: "shell", Description: "Run a command in the sandbox.", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
			{Name: "read_file", Description: "Read a file.", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
		},
	}
	s, err := newClient(t, fast(srv.URL())).Stream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	r, err := read(t, s)
	if err != nil || strings.Join(r.texts, "") != "The file holds hi." {
		t.Fatalf("reply %+v, %v", r, err)
	}
	got := srv.Requests()
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1", len(got))
	}
	if !reflect.DeepEqual(got[0], req) {
		t.Errorf("server received\n%+v\nwant\n%+v", got[0], req)
	}
}

func TestEmbed(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "unused"}}})
	defer srv.Close()
	c := newClient(t, fast(srv.URL()))
	texts := []string{"sandbox overlay", "approval gate", "sandbox overlay"}
	vs, err := c.Embed(t.Context(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 {
		t.Fatalf("%d vectors for 3 texts", len(vs))
	}
	for i, text := range texts {
		if want := llmtest.Embedding(text, 64); !reflect.DeepEqual(vs[i], want) {
			t.Errorf("vector %d is not the embedding of %q", i, text)
		}
	}
	if vs, err := c.Embed(t.Context(), nil); vs != nil || err != nil {
		t.Errorf("Embed(nil) = %v, %v; want nothing, and no request", vs, err)
	}
	cfg := fast(srv.URL())
	cfg.EmbeddingModel = ""
	if _, err := newClient(t, cfg).Embed(t.Context(), texts); !errors.Is(err, llm.ErrConfig) || !strings.Contains(err.Error(), "retrieval.embeddings.model") {
		t.Errorf("without an embedding model: err = %v", err)
	}
}

// The user's words must not appear in errors: they can be secret.
const canary = "user-canary-7f3a"

func TestRetries(t *testing.T) {
	tests := []struct {
		name     string
		fail     int // FailNext(fail, status)
		status   int
		retries  int // Config.MaxRetries
		wantErr  bool
		wantReqs int
		errHas   []string
	}{
		{name: "429 twice then success", fail: 2, status: 429, wantReqs: 3},
		{name: "503 then success", fail: 1, status: 503, wantReqs: 2},
		{name: "dropped connection then success", fail: 1, status: 0, wantReqs: 2},
		{name: "500 exhausts the retries", fail: 10, status: 500, wantErr: true, wantReqs: 4,
			errHas: []string{"/v1/chat/completions", "500 Internal Server Error", "injected failure", "after 4 attempts"}},
		{name: "400 is not retried", fail: 10, status: 400, wantErr: true, wantReqs: 1,
			errHas: []string{"/v1/chat/completions", "400 Bad Request", "injected failure"}},
		{name: "404 is not retried", fail: 10, status: 404, wantErr: true, wantReqs: 1, errHas: []string{"404 Not Found"}},
		{name: "no retries configured", fail: 1, status: 429, retries: -1, wantErr: true, wantReqs: 1, errHas: []string{"429 Too Many Requests"}},
		{name: "one retry configured", fail: 5, status: 502, retries: 1, wantErr: true, wantReqs: 2, errHas: []string{"502 Bad Gateway", "after 2 attempts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "recovered"}}})
			defer srv.Close()
			srv.FailNext(tt.fail, tt.status)
			cfg := fast(srv.URL())
			cfg.MaxRetries = tt.retries
			s, err := newClient(t, cfg).Stream(t.Context(), userReq(canary))
			if n := len(srv.Requests()); n != tt.wantReqs {
				t.Errorf("server saw %d requests, want %d", n, tt.wantReqs)
			}
			if !tt.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				r, err := read(t, s)
				if err != nil || strings.Join(r.texts, "") != "recovered" {
					t.Errorf("reply %+v, %v", r, err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			var e *llm.Error
			if !errors.As(err, &e) || e.StatusCode != tt.status || e.Attempts != tt.wantReqs {
				t.Errorf("err = %#v, want an *llm.Error with status %d after %d attempts", err, tt.status, tt.wantReqs)
			}
			for _, s := range append(tt.errHas, srv.URL()) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), canary) {
				t.Errorf("error %q quotes the request", err)
			}
		})
	}
}

func TestEmbedRetries(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "unused"}}})
	defer srv.Close()
	c := newClient(t, fast(srv.URL()))
	srv.FailNext(2, 429)
	if vs, err := c.Embed(t.Context(), []string{"x"}); err != nil || len(vs) != 1 {
		t.Errorf("after two 429s: %v, %v", vs, err)
	}
	srv.FailNext(10, 500)
	_, err := c.Embed(t.Context(), []string{canary})
	var e *llm.Error
	if !errors.As(err, &e) || e.StatusCode != 500 || e.Attempts != 4 || !strings.Contains(err.Error(), srv.URL()+"/embeddings") || strings.Contains(err.Error(), canary) {
		t.Errorf("after 500s: err = %v", err)
	}
}

// The client waits as long as Retry-After says, rather than its own
// backoff.
func TestRetryAfter(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "ok"}}})
	defer srv.Close()
	target, _ := url.Parse(srv.URL())
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	var calls atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"message":"slow down","type":"requests"}}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	cfg := fast(front.URL + "/v1")
	cfg.MaxBackoff = 3 * time.Second
	start := time.Now()
	s, err := newClient(t, cfg).Stream(t.Context(), userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if d := time.Since(start); d < time.Second {
		t.Errorf("retried after %v, before the 1s of Retry-After", d)
	}
	if calls.Load() != 2 {
		t.Errorf("%d requests, want 2", calls.Load())
	}
}

// Once part of a reply reached the caller, a broken stream is an error,
// never a second request whose reply the caller would see twice.
func TestNoReplayAfterData(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "half a reply", Abort: true}}})
	defer srv.Close()
	s, err := newClient(t, fast(srv.URL())).Stream(t.Context(), userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := read(t, s)
	var e *llm.Error
	if !errors.As(err, &e) || e.StatusCode != 0 || !strings.Contains(err.Error(), srv.URL()) {
		t.Errorf("err = %v, want an *llm.Error naming the endpoint", err)
	}
	if strings.Join(r.texts, "") != "half a reply" {
		t.Errorf("text before the break = %q", r.texts)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1: a started reply must not be replayed", n)
	}
	if _, err2 := s.Next(); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("Next after the error: %v", err2)
	}
}

// A reply that breaks before any of it reached the caller is retried.
func TestRetryBeforeData(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Abort: true}}})
	defer srv.Close()
	s, err := newClient(t, fast(srv.URL())).Stream(t.Context(), userReq("x"))
	if err != nil {
		t.Fatal(err) // the headers arrived: the break shows in Next
	}
	_, err = read(t, s)
	var e *llm.Error
	if !errors.As(err, &e) || e.Attempts != 4 {
		t.Errorf("err = %v, want an *llm.Error after 4 attempts", err)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Errorf("%d requests, want 4", n)
	}
}

func TestCancelMidStream(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "thinking hard", Stall: true}}})
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	s, err := newClient(t, fast(srv.URL())).Stream(ctx, userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var text string
	for text != "thinking hard" {
		c, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		text += c.Text
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = s.Next() // blocked: the server sends nothing more
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancel took %v to end the stream", d)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if _, err := newClient(t, fast(srv.URL())).Stream(ctx, userReq("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Stream with a cancelled ctx: %v", err)
	}
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		name     string
		step     llmtest.Step
		wantText string
		wantReqs int // MaxRetries is 1
	}{
		// Silence after text reached the caller: an error, no retry.
		{"stall after text", llmtest.Step{Text: "partial", Stall: true}, "partial", 1},
		// Silence before anything reached the caller: retried.
		{"stall before text", llmtest.Step{Stall: true}, "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{tt.step}})
			defer srv.Close()
			cfg := fast(srv.URL())
			cfg.Timeout, cfg.MaxRetries = 200*time.Millisecond, 1
			s, err := newClient(t, cfg).Stream(t.Context(), userReq("x"))
			if err != nil {
				t.Fatal(err)
			}
			r, err := read(t, s)
			if !errors.Is(err, llm.ErrTimeout) || !strings.Contains(err.Error(), "200ms") {
				t.Errorf("err = %v, want ErrTimeout", err)
			}
			if strings.Join(r.texts, "") != tt.wantText {
				t.Errorf("text %q, want %q", r.texts, tt.wantText)
			}
			if n := len(srv.Requests()); n != tt.wantReqs {
				t.Errorf("%d requests, want %d", n, tt.wantReqs)
			}
		})
	}
}

// Slow consumers are not timed out: only the endpoint's silence counts.
func TestSlowCallerIsNotATimeout(t *testing.T) {
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "one two three"}}})
	defer srv.Close()
	cfg := fast(srv.URL())
	cfg.Timeout = 100 * time.Millisecond
	s, err := newClient(t, cfg).Stream(t.Context(), userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		time.Sleep(150 * time.Millisecond)
		c, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if c.FinishReason != "" && c.FinishReason != "stop" {
			t.Errorf("finish %q", c.FinishReason)
		}
	}
}

func TestAPIKey(t *testing.T) {
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "ok"}}}, llmtest.Options{APIKey: "sk-right"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg := fast(srv.URL())
	cfg.APIKey = "sk-right"
	s, err := newClient(t, cfg).Stream(t.Context(), userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	cfg.APIKey = "sk-wrong"
	_, err = newClient(t, cfg).Stream(t.Context(), userReq("x"))
	var e *llm.Error
	if !errors.As(err, &e) || e.StatusCode != 401 || e.Attempts != 1 || strings.Contains(err.Error(), "sk-wrong") {
		t.Errorf("wrong key: err = %v, want 401 without retries or the key", err)
	}
}

// Replies as other OpenAI-compatible servers send them.
func TestStreamWireVariants(t *testing.T) {
	tests := []struct {
		name   string
		events []string
		want   reply
		errHas string
	}{
		{
			name: "tool calls without index, split name, usage chunk",
			events: []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant"}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"x1","type":"function","function":{"name":"sh","arguments":"{\"comm"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"ell","arguments":"and\":\"ls\"}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"x2","type":"function","function":{"name":"list_files","arguments":""}}]}}]}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
			},
			want: reply{calls: []agentcore.ToolCall{{ID: "x1", Name: "shell", Arguments: `{"command":"ls"}`}, {ID: "x2", Name: "list_files", Arguments: "{}"}}, finish: "tool_calls"},
		},
		{
			name: "calls out of index order, no ids, finish stop",
			events: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"b","arguments":"{}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"a","arguments":"{}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			},
			want: reply{calls: []agentcore.ToolCall{{ID: "call_0", Name: "a", Arguments: "{}"}, {ID: "call_1", Name: "b", Arguments: "{}"}}, finish: "stop"},
		},
		{
			name:   "no finish_reason",
			events: []string{`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`},
			want:   reply{texts: []string{"hi"}},
			errHas: "before its finish_reason",
		},
		{
			name:   "error inside the stream",
			events: []string{`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`, `{"error":{"message":"model crashed","type":"server_error"}}`},
			want:   reply{texts: []string{"hi"}},
			errHas: "model crashed",
		},
		{
			name:   "tool call without a name",
			events: []string{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x","function":{"arguments":"{}"}}]}}]}`, `{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`},
			errHas: "tool call 0 of the reply has no name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reqs atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reqs.Add(1)
				w.Header().Set("Content-Type", "text/event-stream")
				for _, e := range tt.events {
					fmt.Fprintf(w, "data: %s\n\n", e)
				}
				if tt.errHas == "" {
					fmt.Fprint(w, "data: [DONE]\n\n")
				}
			}))
			defer srv.Close()
			s, err := newClient(t, fast(srv.URL+"/v1")).Stream(t.Context(), userReq("x"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, err := read(t, s)
			if tt.errHas == "" && err != nil {
				t.Fatal(err)
			}
			if tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)) {
				t.Errorf("err = %v, want one saying %q", err, tt.errHas)
			}
			if tt.errHas != "" {
				got.finish = ""
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("reply = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name   string
		cfg    llm.Config
		errHas string // "" = valid
	}{
		{"minimal", llm.Config{BaseURL: "http://127.0.0.1:8000/v1", Model: "m"}, ""},
		{"https with key and trailing slash", llm.Config{BaseURL: "https://api.example.com/v1/", Model: "m", APIKey: "sk-abc"}, ""},
		{"no base_url", llm.Config{Model: "m"}, "llm.base_url is not set"},
		{"no scheme", llm.Config{BaseURL: "127.0.0.1:8000/v1", Model: "m"}, "llm.base_url"},
		{"ftp scheme", llm.Config{BaseURL: "ftp://host/v1", Model: "m"}, "llm.base_url must be an http:// or https:// URL"},
		{"no host", llm.Config{BaseURL: "http:///v1", Model: "m"}, "llm.base_url"},
		{"query", llm.Config{BaseURL: "http://h/v1?x=1", Model: "m"}, "query"},
		{"credentials not echoed", llm.Config{BaseURL: "ftp://user:hunter2@h/v1", Model: "m"}, "xxxxx"},
		{"unparsable", llm.Config{BaseURL: "http://h:99999999999/\x7f", Model: "m"}, "llm.base_url is not a URL"},
		{"no model", llm.Config{BaseURL: "http://h/v1"}, "llm.model is not set"},
		{"blank model", llm.Config{BaseURL: "http://h/v1", Model: "  "}, "llm.model"},
		{"key with newline", llm.Config{BaseURL: "http://h/v1", Model: "m", APIKey: "sk-abc\n"}, "llm.api_key contains whitespace"},
		{"key with Bearer", llm.Config{BaseURL: "http://h/v1", Model: "m", APIKey: "Bearer sk-abc"}, `llm.api_key must be the key alone`},
		{"negative timeout", llm.Config{BaseURL: "http://h/v1", Model: "m", Timeout: -time.Second}, "llm.timeout"},
		{"bad retries", llm.Config{BaseURL: "http://h/v1", Model: "m", MaxRetries: -2}, "llm.max_retries"},
		{"backoff bounds", llm.Config{BaseURL: "http://h/v1", Model: "m", MinBackoff: time.Second, MaxBackoff: time.Millisecond}, "backoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := llm.New(tt.cfg)
			if tt.errHas == "" {
				if err != nil || c == nil {
					t.Fatalf("New = %v, %v", c, err)
				}
				return
			}
			if !errors.Is(err, llm.ErrConfig) || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("err = %v, want ErrConfig saying %q", err, tt.errHas)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

// The connection refused case: nothing listens, the client retries and
// then says what failed.
func TestConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL + "/v1"
	srv.Close()
	_, err := newClient(t, fast(base)).Stream(t.Context(), userReq("x"))
	var e *llm.Error
	if !errors.As(err, &e) || e.StatusCode != 0 || e.Attempts != 4 || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), base) {
		t.Errorf("err = %v", err)
	}
}

// The demo transcript that testdata/llmserver plays works with this client.
func TestDemoTranscript(t *testing.T) {
	script, err := llmtest.LoadScript("../../testdata/transcripts/demo.json")
	if err != nil {
		t.Fatal(err)
	}
	srv := llmtest.NewServer(script)
	defer srv.Close()
	c := newClient(t, fast(srv.URL()))
	req := userReq("Say hello")
	s, err := c.Stream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	r, err := read(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.calls) != 1 || r.calls[0].Name != "shell" || r.calls[0].Arguments != `{"command":"echo hello from the sandbox"}` {
		t.Fatalf("first reply %+v, want the shell call", r)
	}
	req.Messages = append(req.Messages,
		agentcore.Message{Role: agentcore.RoleAssistant, Content: strings.Join(r.texts, ""), ToolCalls: r.calls},
		agentcore.Message{Role: agentcore.RoleTool, ToolCallID: r.calls[0].ID, Content: "hello from the sandbox\n"})
	s, err = c.Stream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	r, err = read(t, s)
	if err != nil || !strings.Contains(strings.Join(r.texts, ""), "printed \"hello from the sandbox\"") || r.finish != "stop" {
		t.Errorf("second reply %+v, %v", r, err)
	}
}

// An endpoint that answers errors as plain text still gives a readable error.
func TestPlainTextError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(canary)) {
			t.Error("request body lost")
		}
		http.Error(w, "model not loaded", http.StatusBadRequest)
	}))
	defer srv.Close()
	_, err := newClient(t, fast(srv.URL+"/v1")).Stream(t.Context(), userReq(canary))
	if err == nil || !strings.Contains(err.Error(), "400 Bad Request: model not loaded") || strings.Contains(err.Error(), canary) {
		t.Errorf("err = %v", err)
	}
}
