package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// The endpoint is untrusted: go-openai reads what it sends without
// limits (a stream line, an error body), follows redirects with the API
// key, and reads a non-streaming answer to a streaming request as a
// truncated stream. guard stands between go-openai and the HTTP client
// and bounds or refuses each of these.

// maxErrorBody caps the error body go-openai reads; Error shows far less.
const maxErrorBody = 64 << 10

// maxNonData caps an event stream's lines that are not "data:" lines
// (comments, keep-alives, blank lines): go-openai keeps them all for the
// stream's life, in case they are an error.
const maxNonData = 1 << 20

// replyError is a failure the endpoint's answer caused and a retry would
// not change.
type replyError struct {
	status int    // the HTTP status, when it is to blame
	msg    string // what went wrong, for Error.Message
	err    error  // a sentinel, or nil
}

func (e *replyError) Error() string { return e.msg }
func (e *replyError) Unwrap() error { return e.err }

// guard sends go-openai's requests and hands it bounded responses. It
// also notes each response's Retry-After in the request's retryInfo,
// which go-openai's errors do not expose.
type guard struct {
	hc       *http.Client // follows no redirects, see refuseRedirects
	maxLine  int
	maxReply int
	// sampling are written into each chat request (see withSampling).
	sampling map[string]json.RawMessage
}

// refuseRedirects makes a copy of hc that returns a redirect as the
// answer: Go would forward Authorization to the same host on another
// port, or after a downgrade to http, and a POST to an API that moved is
// a configuration error to fix, not to follow.
func refuseRedirects(hc *http.Client) *http.Client {
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func (g guard) Do(req *http.Request) (*http.Response, error) {
	if err := withSampling(req, g.sampling); err != nil {
		return nil, err
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if ri, ok := req.Context().Value(retryInfoKey{}).(*retryInfo); ok {
		ri.after = resp.Header.Get("Retry-After")
	}
	streaming := req.Header.Get("Accept") == "text/event-stream"
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		resp.Body.Close()
		return nil, &replyError{status: resp.StatusCode, err: ErrRedirect, msg: redirectMessage(req.URL, resp.Header.Get("Location"))}
	case resp.StatusCode >= 400:
		resp.Body = limitBody(resp.Body, maxErrorBody)
	case streaming && isJSON(resp.Header.Get("Content-Type")):
		body, err := g.asStream(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	case streaming:
		resp.Body = &lineGuard{rc: resp.Body, max: g.maxLine}
	default:
		// A whole JSON answer (embeddings): vectors as decimal text are
		// bulky, a thousand of 3,072 dimensions take about 40 MB.
		resp.Body = &sizeGuard{rc: resp.Body, max: 8 * g.maxReply}
	}
	return resp, nil
}

func redirectMessage(from *url.URL, location string) string {
	to, err := from.Parse(location)
	if location == "" || err != nil {
		return "redirect refused"
	}
	// A query may carry a token; the path is enough to fix the setting.
	to.RawQuery, to.Fragment = "", ""
	return fmt.Sprintf("redirect to %s refused: set llm.base_url to the URL that answers", to.Redacted())
}

func isJSON(contentType string) bool {
	ct, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(ct), "application/json")
}

type limitedBody struct {
	io.Reader
	io.Closer
}

func limitBody(rc io.ReadCloser, n int64) io.ReadCloser {
	return limitedBody{io.LimitReader(rc, n), rc}
}

// asStream turns a whole JSON completion, which some servers and proxies
// answer a streaming request with, into the event stream go-openai
// expects: one chunk holding the message, then [DONE].
func (g guard) asStream(body io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(body, int64(g.maxLine)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > g.maxLine {
		return nil, &replyError{err: ErrTooLarge, msg: "non-streaming reply longer than " + size(g.maxLine)}
	}
	var cr openai.ChatCompletionResponse
	if err := json.Unmarshal(data, &cr); err != nil || len(cr.Choices) == 0 {
		return nil, &replyError{msg: "the endpoint answered a streaming request with JSON that is not a chat completion"}
	}
	var alt struct {
		Choices []struct {
			Message struct {
				Reasoning string `json:"reasoning"`
			} `json:"message"`
		} `json:"choices"`
	}
	json.Unmarshal(data, &alt) // it decoded as a completion just above
	sr := openai.ChatCompletionStreamResponse{ID: cr.ID, Object: "chat.completion.chunk", Created: cr.Created, Model: cr.Model}
	for n, ch := range cr.Choices {
		d := openai.ChatCompletionStreamChoiceDelta{Role: ch.Message.Role, Content: ch.Message.Content, ReasoningContent: ch.Message.ReasoningContent}
		if d.ReasoningContent == "" && len(alt.Choices) == len(cr.Choices) {
			d.ReasoningContent = alt.Choices[n].Message.Reasoning
		}
		for i, tc := range ch.Message.ToolCalls {
			tc.Index = &i
			d.ToolCalls = append(d.ToolCalls, tc)
		}
		sr.Choices = append(sr.Choices, openai.ChatCompletionStreamChoice{Index: ch.Index, Delta: d, FinishReason: ch.FinishReason})
	}
	chunk, err := json.Marshal(sr)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "data: %s\n\ndata: [DONE]\n\n", chunk), nil
}

// sizeGuard fails a body once it exceeds max bytes.
type sizeGuard struct {
	rc     io.ReadCloser
	n, max int
}

func (g *sizeGuard) Read(p []byte) (int, error) {
	n, err := g.rc.Read(p)
	if g.n += n; g.n > g.max {
		return 0, &replyError{err: ErrTooLarge, msg: "reply longer than " + size(g.max)}
	}
	return n, err
}

func (g *sizeGuard) Close() error { return g.rc.Close() }

// lineGuard passes an event stream through while its lines stay within
// max bytes and its non-data lines within maxNonData in all; then it
// fails, so go-openai's reader, which grows a line until its newline,
// never holds more.
type lineGuard struct {
	rc  io.ReadCloser
	max int
	err error

	line    int     // bytes of the current line so far
	head    [5]byte // the line's first bytes after leading blanks, to spot "data:"
	headN   int
	data    bool // the current line is a data line (known once headN is 5)
	nonData int  // bytes of non-data lines so far
}

func (g *lineGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.rc.Read(p)
	for i := 0; i < n; {
		if g.headN < len(g.head) {
			b := p[i]
			i++
			if b == '\n' {
				g.endLine()
				continue
			}
			g.line++
			if g.headN > 0 || (b != ' ' && b != '\t' && b != '\r') {
				g.head[g.headN] = b
				g.headN++
				g.data = g.headN == len(g.head) && string(g.head[:]) == "data:"
			}
			continue
		}
		j := bytes.IndexByte(p[i:n], '\n')
		if j < 0 {
			g.line += n - i
			break
		}
		g.line += j
		i += j + 1
		if g.line > g.max {
			break
		}
		g.endLine()
	}
	switch {
	case g.line > g.max:
		g.err = &replyError{err: ErrTooLarge, msg: "event-stream line longer than " + size(g.max)}
	case g.nonData > maxNonData:
		g.err = &replyError{err: ErrTooLarge, msg: "more than " + size(maxNonData) + " of event-stream lines without data"}
	}
	if g.err != nil {
		return 0, g.err
	}
	return n, err
}

func (g *lineGuard) endLine() {
	if !g.data && g.headN > 0 { // go-openai keeps no blank line
		g.nonData += g.line + 1
	}
	g.line, g.headN, g.data = 0, 0, false
}

func (g *lineGuard) Close() error { return g.rc.Close() }

// size is n bytes for people: "8 MiB", "512 KiB", "100 bytes".
func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
