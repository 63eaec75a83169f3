package llm_test

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/integrations/llm"
)

// The endpoint is an adversary: these tests drive the client with
// llmtest's faults.

const apiKey = "sk-live-0123456789abcdefSECRET"

// hostile starts a scripted endpoint that requires apiKey, with faults
// queued, and a client for it that does not retry unless asked.
func hostile(t *testing.T, steps []llmtest.Step, retries int, faults ...llmtest.Fault) (*llmtest.Server, *llm.Client) {
	t.Helper()
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: steps}, llmtest.Options{APIKey: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.Inject(faults...)
	cfg := fast(srv.URL())
	cfg.APIKey, cfg.MaxRetries = apiKey, retries
	return srv, newClient(t, cfg)
}

// checkErrorText fails unless err's text is safe to show a user and log:
// no key, no control characters, at most 512 bytes; the same for Message.
func checkErrorText(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	texts := []string{err.Error()}
	var e *llm.Error
	if errors.As(err, &e) {
		texts = append(texts, e.Message)
	}
	for _, s := range texts {
		if strings.Contains(s, apiKey) || strings.Contains(s, apiKey[:12]) {
			t.Errorf("error text holds the API key: %.600q", s)
		}
		if len(s) > 512 {
			t.Errorf("error text of %d bytes, want at most 512: %.200q…", len(s), s)
		}
		if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }); i >= 0 {
			t.Errorf("error text holds a control character at %d: %.600q", i, s)
		}
	}
}

// Item 3: whatever the endpoint says in an error, the error the engine
// shows users and logs is short, printable and without the key.
func TestErrorTextIsSanitized(t *testing.T) {
	tests := []struct {
		name  string
		fault llmtest.Fault
		want  string // must stay in the error
	}{
		{"JSON error echoing headers", llmtest.Fault{Status: 400, Message: "bad request", EchoHeaders: true}, "400 Bad Request: bad request; request headers: "},
		{"plain error echoing headers", llmtest.Fault{Status: 403, Message: "denied by proxy", EchoHeaders: true, PlainError: true}, "403 Forbidden: denied by proxy"},
		{"10 MB JSON error", llmtest.Fault{Status: 400, Message: "too long", ErrorBytes: 10 << 20}, "400 Bad Request: too long"},
		{"10 MB plain error", llmtest.Fault{Status: 404, Message: "not here", ErrorBytes: 10 << 20, PlainError: true}, "404 Not Found: not here"},
		{"control characters", llmtest.Fault{Status: 400, Message: "\x1b[2Jred\x00\r\nlevel=ERROR msg=forged\u202egnp.exe\u200b"}, "red level=ERROR msg=forgedgnp.exe"},
		{"key in the message", llmtest.Fault{Status: 401, Message: "Incorrect API key provided: Bearer " + apiKey + " (key " + apiKey + ")"}, "Incorrect API key provided: Bearer [redacted] (key [redacted])"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, c := hostile(t, []llmtest.Step{{Text: "never"}}, -1, tt.fault)
			_, err := c.Stream(t.Context(), userReq("x"))
			checkErrorText(t, err)
			if err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
	// The same for embeddings.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "echo: "+r.Header.Get("Authorization")+strings.Repeat("\x07", 1<<20), http.StatusBadRequest)
	}))
	defer srv.Close()
	cfg := fast(srv.URL + "/v1")
	cfg.APIKey = apiKey
	_, err := newClient(t, cfg).Embed(t.Context(), []string{"x"})
	checkErrorText(t, err)
}

// With a placeholder key ("x"), an endpoint's error reaches the user
// whole: only the key standing alone is redacted.
func TestShortKeyErrorText(t *testing.T) {
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "never"}}}, llmtest.Options{APIKey: "x"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.Inject(llmtest.Fault{Status: 400, Message: "This model's maximum context length is 12000 tokens. However, you requested 18476 tokens (key x)"})
	cfg := fast(srv.URL())
	cfg.APIKey, cfg.MaxRetries = "x", -1
	_, err = newClient(t, cfg).Stream(t.Context(), userReq("hi"))
	const want = "This model's maximum context length is 12000 tokens. However, you requested 18476 tokens (key [redacted])"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant it to contain %q", err, want)
	}
}

// Item 4: one endless line or an endless reply ends the reply with
// ErrTooLarge at the limit, not after the endpoint stops, and is not
// retried.
func TestReplyLimits(t *testing.T) {
	steps := []llmtest.Step{{Text: "after"}}
	tests := []struct {
		name  string
		fault llmtest.Fault
		cfg   func(*llm.Config)
		want  string
	}{
		{"line over the default", llmtest.Fault{LineBytes: llm.DefaultMaxLineBytes + 1<<20}, func(*llm.Config) {}, "event-stream line longer than 8 MiB"},
		{"reply over the default", llmtest.Fault{ReplyBytes: llm.DefaultMaxReplyBytes + 1<<20}, func(*llm.Config) {}, "reply longer than 8 MiB"},
		{"line over a set limit", llmtest.Fault{LineBytes: 300 << 10}, func(c *llm.Config) { c.MaxLineBytes = 256 << 10 }, "event-stream line longer than 256 KiB"},
		{"reply over a set limit", llmtest.Fault{ReplyBytes: 1 << 20}, func(c *llm.Config) { c.MaxReplyBytes = 512 << 10 }, "reply longer than 512 KiB"},
		{"reasoning over a set limit", llmtest.Fault{ReasoningBytes: 1 << 20}, func(c *llm.Config) { c.MaxReplyBytes = 512 << 10 }, "reply longer than 512 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := llmtest.StartServer(&llmtest.Script{Steps: steps}, llmtest.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			srv.Inject(tt.fault, tt.fault)
			cfg := fast(srv.URL())
			cfg.MaxRetries = 1
			tt.cfg(&cfg)
			s, err := newClient(t, cfg).Stream(t.Context(), userReq("x"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var got int
			for {
				c, err := s.Next()
				if err != nil {
					if !errors.Is(err, llm.ErrTooLarge) || !strings.Contains(err.Error(), tt.want) {
						t.Errorf("err = %v, want ErrTooLarge saying %q", err, tt.want)
					}
					checkErrorText(t, err)
					break
				}
				got += len(c.Text)
			}
			if limit := max(cfg.MaxReplyBytes, llm.DefaultMaxReplyBytes); got > limit {
				t.Errorf("%d bytes of text reached the caller, over the limit", got)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1: a reply that is too large is not retried", n)
			}
		})
	}
}

// Item 7: a Retry-After beyond the maximum backoff is not waited for and
// not cut short either: the client gives up and says why.
func TestRetryAfterBeyondMaxBackoff(t *testing.T) {
	srv, c := hostile(t, []llmtest.Step{{Text: "ok"}}, 3, llmtest.Fault{Status: 429, RetryAfter: "3600", Message: "slow down"})
	_, err := c.Stream(t.Context(), userReq("x"))
	var e *llm.Error
	if !errors.As(err, &e) || e.StatusCode != 429 || !strings.Contains(err.Error(), "Retry-After of 1h0m0s exceeds the maximum backoff of 5ms") {
		t.Errorf("err = %v", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// Item 7: errors a retry cannot change are not retried.
func TestNoRetryOfProtocolErrors(t *testing.T) {
	tests := []struct {
		name  string
		fault llmtest.Fault
		want  string
	}{
		{"invalid JSON chunk", llmtest.Fault{InvalidChunk: true}, "invalid chunk in the reply stream"},
		{"no finish_reason", llmtest.Fault{NoFinish: true}, "the reply ended before its finish_reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, c := hostile(t, []llmtest.Step{{ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: `{"command":"ls"}`}}}}, 3, tt.fault, tt.fault, tt.fault, tt.fault)
			s, err := c.Stream(t.Context(), userReq("x"))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = read(t, s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
			checkErrorText(t, err)
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}

	// A certificate the client does not trust.
	var hits atomic.Int32
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake errors are expected
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	cfg := fast(tlsSrv.URL + "/v1")
	cfg.MaxRetries = 3
	_, err := newClient(t, cfg).Stream(t.Context(), userReq("x"))
	var e *llm.Error
	if !errors.As(err, &e) || e.Attempts != 1 || !strings.Contains(err.Error(), "certificate") || hits.Load() != 0 {
		t.Errorf("untrusted certificate: err = %v, want one attempt", err)
	}
}

// Item 7: a JSON completion in answer to a streaming request (some proxies
// buffer) is read as the reply.
func TestNonStreamingReply(t *testing.T) {
	step := llmtest.Step{Text: "Here is the list.", ToolCalls: []agentcore.ToolCall{
		{ID: "a", Name: "list_files", Arguments: `{"dir":"."}`},
		{ID: "b", Name: "read_file", Arguments: `{"path":"go.mod"}`},
	}}
	_, c := hostile(t, []llmtest.Step{step}, -1, llmtest.Fault{NonStreaming: true})
	s, err := c.Stream(t.Context(), userReq("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := read(t, s)
	if err != nil {
		t.Fatal(err)
	}
	want := reply{texts: []string{"Here is the list."}, calls: step.ToolCalls, finish: "tool_calls"}
	if strings.Join(r.texts, "") != strings.Join(want.texts, "") || len(r.calls) != 2 || r.calls[0] != want.calls[0] || r.calls[1] != want.calls[1] || r.finish != want.finish {
		t.Errorf("reply %+v\nwant  %+v", r, want)
	}
}

// Item 8: a redirect could carry the key to another port (Go forwards
// Authorization to the same host name) or over plain http: refused.
func TestRedirectRefused(t *testing.T) {
	var leaked atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
		http.Error(w, "moved here", http.StatusBadRequest)
	}))
	defer other.Close()
	srv, c := hostile(t, []llmtest.Step{{Text: "ok"}}, 3, llmtest.Fault{RedirectTo: other.URL + "/v1/chat/completions?token=" + apiKey})
	_, err := c.Stream(t.Context(), userReq("x"))
	if !errors.Is(err, llm.ErrRedirect) || !strings.Contains(err.Error(), "307 Temporary Redirect: redirect to "+other.URL+"/v1/chat/completions refused") {
		t.Errorf("err = %v, want ErrRedirect naming the target", err)
	}
	checkErrorText(t, err)
	if v := leaked.Load(); v != nil {
		t.Errorf("the redirect target received a request, Authorization %q", v)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// A model that trickles one byte at a time cannot hold a reply open: the
// wait for each chunk is bounded by Timeout, however many bytes arrive.
func TestTrickleTimesOut(t *testing.T) {
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "slow"}}}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Inject(llmtest.Fault{Trickle: 5 * time.Millisecond})
	cfg := fast(srv.URL())
	cfg.Timeout, cfg.MaxRetries = 100*time.Millisecond, -1
	s, err := newClient(t, cfg).Stream(t.Context(), userReq("x"))
	if err == nil {
		_, err = read(t, s)
		s.Close()
	}
	if !errors.Is(err, llm.ErrTimeout) {
		t.Errorf("err = %v, want ErrTimeout", err)
	}
}

// An endless JSON answer to an embeddings request ends with ErrTooLarge.
func TestEmbedReplyLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0`)
		zeros := strings.Repeat(",0", 32<<10)
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, zeros); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	cfg := fast(srv.URL + "/v1")
	cfg.MaxRetries, cfg.MaxReplyBytes = 3, 256<<10
	_, err := newClient(t, cfg).Embed(t.Context(), []string{"x"})
	var e *llm.Error
	if !errors.Is(err, llm.ErrTooLarge) || !errors.As(err, &e) || e.Attempts != 1 || !strings.Contains(err.Error(), "reply longer than 2 MiB") {
		t.Errorf("err = %v, want ErrTooLarge after one attempt", err)
	}
}
