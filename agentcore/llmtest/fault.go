package llmtest

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Fault is a hostile behaviour of an endpoint, for tests of what a client
// does with it. Server.Inject queues Faults; each one shapes the answer to
// one chat completion request, in order. The zero Fault answers normally.
type Fault struct {
	// Status, when set, answers with this HTTP status and an error body
	// instead of the reply; Message, EchoHeaders, ErrorBytes, PlainError
	// and RetryAfter shape that answer.
	Status int
	// Message is the error's message (default "injected failure").
	Message string
	// EchoHeaders appends the request's headers, Authorization included,
	// to the message, as some proxies' error pages do.
	EchoHeaders bool
	// ErrorBytes pads the message with 'x' to this many bytes.
	ErrorBytes int
	// PlainError sends the message as a text/plain body instead of
	// OpenAI's error JSON.
	PlainError bool
	// RetryAfter is sent as the Retry-After header.
	RetryAfter string

	// RedirectTo answers 307 Temporary Redirect to this URL, which keeps
	// the method and body.
	RedirectTo string
	// NonStreaming answers a streaming request with one whole JSON
	// completion (Content-Type application/json), as some proxies do.
	NonStreaming bool

	// LineBytes sends, before the reply, one event-stream line carrying
	// a text delta of LineBytes 'x's, written in 64 KiB pieces without a
	// newline until it is complete.
	LineBytes int
	// ReplyBytes streams this many bytes of text in 64 KiB deltas instead
	// of the step's text; the step's tool calls and finish_reason follow.
	ReplyBytes int
	// ReasoningBytes streams, before the reply, this many bytes of
	// reasoning_content (a reasoning model's thinking, which clients do
	// not show) in 64 KiB deltas.
	ReasoningBytes int
	// Trickle writes the reply one byte at a time, this long apart.
	Trickle time.Duration
	// InvalidChunk sends a data line that is not JSON after the role delta.
	InvalidChunk bool
	// NoFinish ends the stream with [DONE] but without a finish_reason.
	NoFinish bool
	// NoUsage sends no usage chunk even when the request asks for one
	// (stream_options.include_usage), as servers that ignore it do.
	NoUsage bool
}

// bigPiece is the size of the writes and text deltas of LineBytes,
// ReplyBytes and ReasoningBytes: large enough to be fast, small enough to stay cheap here.
const bigPiece = 64 << 10

// Inject queues faults for the next chat completion requests, one each,
// after any queued before.
func (srv *Server) Inject(faults ...Fault) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.faults = append(srv.faults, faults...)
}

// nextFault takes the fault due for this request, if any.
func (srv *Server) nextFault() Fault {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.faults) == 0 {
		return Fault{}
	}
	f := srv.faults[0]
	srv.faults = slices.Delete(srv.faults, 0, 1)
	return f
}

// answer answers r for the faults that replace a reply; it reports
// whether it did.
func (f Fault) answer(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case f.RedirectTo != "":
		http.Redirect(w, r, f.RedirectTo, http.StatusTemporaryRedirect)
		return true
	case f.Status != 0:
		msg := f.Message
		if msg == "" {
			msg = "injected failure"
		}
		if f.EchoHeaders {
			var b strings.Builder
			r.Header.Write(&b)
			msg += "; request headers:\n" + b.String()
		}
		if n := f.ErrorBytes - len(msg); n > 0 {
			msg += strings.Repeat("x", n)
		}
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		if f.PlainError {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(f.Status)
			io.WriteString(w, msg)
			return true
		}
		writeError(w, f.Status, msg)
		return true
	}
	return false
}

// writeLongLine writes one data line whose text delta is n 'x's.
func writeLongLine(w io.Writer, id, model string, n int) error {
	if _, err := fmt.Fprintf(w, `data: {"id":%q,"object":"chat.completion.chunk","model":%q,"choices":[{"index":0,"delta":{"content":"`, id, model); err != nil {
		return err
	}
	piece := strings.Repeat("x", bigPiece)
	for n > 0 {
		k := min(n, bigPiece)
		if _, err := io.WriteString(w, piece[:k]); err != nil {
			return err
		}
		n -= k
	}
	_, err := io.WriteString(w, `"},"finish_reason":null}]}`+"\n\n")
	return err
}

// trickler writes one byte at a time, delay apart, flushing each, until
// the request ends.
type trickler struct {
	w     io.Writer
	f     http.Flusher
	delay time.Duration
	r     *http.Request
}

func (t trickler) Write(p []byte) (int, error) {
	for i := range p {
		select {
		case <-time.After(t.delay):
		case <-t.r.Context().Done():
			return i, t.r.Context().Err()
		}
		if _, err := t.w.Write(p[i : i+1]); err != nil {
			return i, err
		}
		if t.f != nil {
			t.f.Flush()
		}
	}
	return len(p), nil
}
