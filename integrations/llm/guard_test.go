package llm

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestLineGuard(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct {
		name    string
		stream  string
		wantErr string // "" for none
	}{
		{"data lines within the limit", "data: " + long[:90] + "\n\ndata: [DONE]\n\n", ""},
		{"blank lines cost nothing", strings.Repeat("\r\n", maxNonData/2+1) + "data: x\n", ""},
		{"leading blanks before data", "  \tdata: " + long[:80] + "\n", ""},
		{"a data line over the limit", "data: " + long + "\n", "event-stream line longer than 100 bytes"},
		{"an endless line", "data: " + long + long, "event-stream line longer than 100 bytes"},
		{"a comment line over the limit", ": " + long + "\n", "event-stream line longer than 100 bytes"},
		{"non-data lines beyond their budget", strings.Repeat(": keep-alive\n", maxNonData/13+1), "more than 1 MiB of event-stream lines without data"},
		{"'data' without the colon is not data", strings.Repeat("data\n", maxNonData/5+1), "more than 1 MiB of event-stream lines without data"},
	}
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tt.stream)
			if oneByte {
				if len(tt.stream) > 1<<16 {
					continue // slow, and the cases above cover the reads' seams
				}
				r = iotest.OneByteReader(r)
			}
			g := &lineGuard{rc: io.NopCloser(r), max: 100}
			got, err := io.ReadAll(g)
			switch {
			case tt.wantErr == "" && (err != nil || string(got) != tt.stream):
				t.Errorf("%s (one byte reads %v): %d of %d bytes, %v", tt.name, oneByte, len(got), len(tt.stream), err)
			case tt.wantErr != "" && (!errors.Is(err, ErrTooLarge) || err.Error() != tt.wantErr):
				t.Errorf("%s (one byte reads %v): err = %v, want %q", tt.name, oneByte, err, tt.wantErr)
			}
		}
	}
}

func TestClean(t *testing.T) {
	c := &Client{apiKey: "sk-0123456789abcdef"}
	tests := []struct{ in, want string }{
		{"plain message", "plain message"},
		{"line one\r\nline two\n\n\tthree", "line one line two three"},
		{"\x1b[31mred\x1b[0m\x00\x7f", "[31mred[0m"},
		{"abc\u202edef\u200b\u2066g", "abcdefg"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{"key sk-0123456789abcdef here", "key [redacted] here"},
		{"Authorization: Bearer sk-0123456789abcdef", "Authorization: Bearer [redacted]"},
		{"authorization: bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "authorization: Bearer [redacted]"},
		{"a bearer token is required", "a bearer token is required"},
		{"cut off: sk-0123456789", "cut off: [redacted]"},
		{"sk-0\x00123456789abcdef", "[redacted]"},
		{strings.Repeat("é", 400), strings.Repeat("é", (maxMessage-3)/2) + "…"},
	}
	for _, tt := range tests {
		got := c.clean(tt.in)
		if got != tt.want {
			t.Errorf("clean(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if len(got) > maxMessage {
			t.Errorf("clean(%q): %d bytes", tt.in, len(got))
		}
	}
}

// A short API key ("x", as the setup instructions show) is redacted only
// where it stands alone; a real-looking one wherever it is.
func TestCleanKeys(t *testing.T) {
	tests := []struct{ key, in, want string }{
		{"x", "maximum context length is 12000 tokens. However, you requested 18476 tokens", "maximum context length is 12000 tokens. However, you requested 18476 tokens"},
		{"x", "invalid key x", "invalid key [redacted]"},
		{"x", "Authorization: Bearer x (key 'x', x-request-id 7)", "Authorization: Bearer [redacted] (key '[redacted]', [redacted]-request-id 7)"},
		{"x", "x", "[redacted]"},
		{"x", "xx ax x_ ünïx", "xx ax x_ ünïx"},
		{"sk-abc", "key sk-abc. sk-abcd sk-abc", "key [redacted]. sk-abcd [redacted]"},
		{"sk-0123456789abcdef", "bad key sk-0123456789abcdef, prefixsk-0123456789abcdefsuffix", "bad key [redacted], prefix[redacted]suffix"},
		{"sk-0123456789abcdef", "cut off: sk-01234", "cut off: [redacted]"},
		// A word that ends like the key's beginning is no cut-off key.
		{"test-key-0123456789", "unknown model latest", "unknown model latest"},
		{"test-key-0123456789", "unknown model test", "unknown model [redacted]"},
	}
	for _, tt := range tests {
		c := &Client{apiKey: tt.key}
		if got := c.clean(tt.in); got != tt.want {
			t.Errorf("key %q: clean(%q) = %q, want %q", tt.key, tt.in, got, tt.want)
		}
	}
}

// A huge OpenAI error JSON, cut at maxErrorBody, still gives its message.
func TestCutMessage(t *testing.T) {
	body := []byte(`{"error":{"message":"model \"x\" overloaded ` + strings.Repeat("\\u00e9", maxErrorBody))[:maxErrorBody]
	if m, ok := cutMessage(body); !ok || !strings.HasPrefix(m, `model "x" overloaded éé`) {
		t.Errorf("cutMessage = %.60q, %v", m, ok)
	}
	if _, ok := cutMessage([]byte(`{"message":"whole"}`)); ok {
		t.Error("a whole body is not cut")
	}
}
