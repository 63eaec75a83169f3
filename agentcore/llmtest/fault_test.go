package llmtest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Each Fault shows on the wire as described, and only for one request.
func TestInject(t *testing.T) {
	okStep := Step{Text: "fine", ToolCalls: nil}
	tests := []struct {
		name  string
		fault Fault
		check func(t *testing.T, resp *http.Response, body string)
	}{
		{"status, retry-after, echoed headers, padded", Fault{Status: 429, RetryAfter: "3600", EchoHeaders: true, ErrorBytes: 1 << 20}, func(t *testing.T, resp *http.Response, body string) {
			var e wireError
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3600" || len(e.Error.Message) != 1<<20 ||
				!strings.Contains(e.Error.Message, "Authorization: Bearer sk-secret") {
				t.Errorf("%d, Retry-After %q, message of %d bytes: %.200q", resp.StatusCode, resp.Header.Get("Retry-After"), len(e.Error.Message), e.Error.Message)
			}
		}},
		{"plain error", Fault{Status: 502, Message: "bad\x1b[31m gateway", PlainError: true}, func(t *testing.T, resp *http.Response, body string) {
			if resp.StatusCode != 502 || body != "bad\x1b[31m gateway" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
				t.Errorf("%d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
		}},
		{"redirect", Fault{RedirectTo: "http://127.0.0.1:1/v1/chat/completions"}, func(t *testing.T, resp *http.Response, body string) {
			if resp.StatusCode != 307 || resp.Header.Get("Location") != "http://127.0.0.1:1/v1/chat/completions" {
				t.Errorf("%d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
			}
		}},
		{"non-streaming", Fault{NonStreaming: true}, func(t *testing.T, resp *http.Response, body string) {
			var c wireCompletion
			if err := json.Unmarshal([]byte(body), &c); err != nil || resp.Header.Get("Content-Type") != "application/json" || *c.Choices[0].Message.Content != "fine" {
				t.Errorf("%q: %v", body, err)
			}
		}},
		{"long line", Fault{LineBytes: 3*bigPiece + 5}, func(t *testing.T, resp *http.Response, body string) {
			chunks, done := readSSE(t, strings.NewReader(body))
			if !done || len(chunks) < 3 || chunks[1].Choices[0].Delta.Content == nil || *chunks[1].Choices[0].Delta.Content != strings.Repeat("x", 3*bigPiece+5) {
				t.Errorf("%d chunks, done %v", len(chunks), done)
			}
		}},
		{"huge reply", Fault{ReplyBytes: 2*bigPiece + 1}, func(t *testing.T, resp *http.Response, body string) {
			chunks, done := readSSE(t, strings.NewReader(body))
			var text strings.Builder
			for _, c := range chunks {
				if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil {
					text.WriteString(*c.Choices[0].Delta.Content)
				}
			}
			if !done || len(chunks) != 5 || text.String() != strings.Repeat("x", 2*bigPiece+1) {
				t.Errorf("%d chunks, done %v, %d bytes of text", len(chunks), done, text.Len())
			}
		}},
		{"long reasoning", Fault{ReasoningBytes: bigPiece + 1}, func(t *testing.T, resp *http.Response, body string) {
			chunks, done := readSSE(t, strings.NewReader(body))
			var reasoning, text strings.Builder
			for _, c := range chunks {
				if len(c.Choices) > 0 {
					reasoning.WriteString(c.Choices[0].Delta.ReasoningContent)
					if c.Choices[0].Delta.Content != nil {
						text.WriteString(*c.Choices[0].Delta.Content)
					}
				}
			}
			if !done || reasoning.String() != strings.Repeat("x", bigPiece+1) || text.String() != "fine" {
				t.Errorf("%d chunks, done %v, %d bytes of reasoning, text %q", len(chunks), done, reasoning.Len(), text.String())
			}
		}},
		{"invalid chunk, no finish", Fault{InvalidChunk: true, NoFinish: true}, func(t *testing.T, resp *http.Response, body string) {
			if !strings.Contains(body, `"content":"unterminated`+"\n") || strings.Contains(body, "finish_reason\":\"") || !strings.HasSuffix(body, "data: [DONE]\n\n") {
				t.Errorf("%q", body)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := StartServer(&Script{Steps: []Step{okStep}}, Options{APIKey: "sk-secret"})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			srv.Inject(tt.fault)
			hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			for i := range 2 {
				b, _ := json.Marshal(chatBody(true, msg("user", "x")))
				req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL()+"/chat/completions", strings.NewReader(string(b)))
				req.Header.Set("Authorization", "Bearer sk-secret")
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if i == 0 {
					tt.check(t, resp, string(body))
					continue
				}
				// The fault is spent: the second request gets the step.
				chunks, done := readSSE(t, strings.NewReader(string(body)))
				if resp.StatusCode != 200 || !done || len(chunks) != 3 {
					t.Errorf("after the fault: %d, %d chunks, done %v", resp.StatusCode, len(chunks), done)
				}
			}
		})
	}
}

// A trickled reply arrives byte by byte, and stops when the client goes.
func TestInjectTrickle(t *testing.T) {
	srv := NewServer(&Script{Steps: []Step{{Text: "slow"}}})
	defer srv.Close()
	srv.Inject(Fault{Trickle: 5 * time.Millisecond})
	resp := post(t, srv.URL()+"/chat/completions", "", chatBody(true, msg("user", "x")))
	r := bufio.NewReader(resp.Body)
	start := time.Now()
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: {") || time.Since(start) < time.Duration(len(line)-1)*5*time.Millisecond {
		t.Errorf("first line %q after %v, err %v", line, time.Since(start), err)
	}
	resp.Body.Close()
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the trickle went on after the client left")
	}
}
