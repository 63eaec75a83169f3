// Package llm is agentcore's model client for any OpenAI-compatible
// endpoint (OpenAI, vLLM, llama.cpp's server, …), built on go-openai:
// streaming chat completions with tool calls, and embeddings.
//
// A reply is retried only before any of it reached the caller: a stream
// that breaks after the first chunk ends with an error, never with a
// replay, so the engine never sees the same text or tool call twice.
// Errors name the endpoint, the HTTP status and the server's message;
// they never quote the request, which holds the user's conversation.
//
// The endpoint is not trusted either: what it says in an error is cleaned
// (no API key, no control characters, at most 512 bytes in all, since
// users read it and the log records it); a stream line, a reply and an
// error body are bounded (ErrTooLarge); redirects are refused
// (ErrRedirect); errors a retry cannot change are not retried.
//
//	c, err := llm.New(llm.Config{BaseURL: "http://127.0.0.1:8000/v1", Model: "qwen3-coder"})
//	s, err := c.Stream(ctx, agentcore.Request{Messages: msgs, Tools: tools})
//	// s.Next() until io.EOF: Text chunks, then each complete ToolCall, then the FinishReason, then a Usage
package llm

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"

	"github.com/codumentor/codumentor/agentcore"
)

// Config says which endpoint and model to use. The names in comments are
// the keys of the server's configuration file, which errors from New name.
type Config struct {
	// BaseURL is the endpoint's base URL including its API version path,
	// e.g. "http://127.0.0.1:8000/v1" (llm.base_url). Required.
	BaseURL string
	// Model is the chat model's name (llm.model). Required.
	Model string
	// APIKey is sent as "Authorization: Bearer <APIKey>" (llm.api_key);
	// empty sends none, as local servers expect.
	APIKey string
	// EmbeddingModel is the model Embed uses (the server sets it from retrieval.embeddings.model); empty
	// makes Embed fail with ErrConfig.
	EmbeddingModel string
	// Timeout bounds the wait for the endpoint: for a response to begin,
	// and then between two chunks of a streamed reply, so a long but
	// progressing reply is not cut off while a stalled one is; an Embed
	// request must finish within it (llm.timeout). Default 2 minutes.
	Timeout time.Duration
	// MaxRetries is how often a failed request is retried (429, 5xx, a
	// failed connection or a timeout, all before any reply reached the
	// caller; never a malformed reply or a TLS failure, which a retry
	// would not change) (llm.max_retries). 0 means the default, 3; -1
	// means none.
	MaxRetries int
	// MinBackoff and MaxBackoff bound the wait before a retry: about
	// MinBackoff at first, doubling, with jitter, at most MaxBackoff.
	// A server's Retry-After replaces the computed wait; one longer than
	// MaxBackoff ends the retries with an error that says so. Defaults
	// 500ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// MaxLineBytes caps one line of the reply's event stream, so an
	// endpoint cannot make the client buffer an endless line. Default
	// DefaultMaxLineBytes.
	MaxLineBytes int
	// MaxReplyBytes caps one reply's text and tool calls (names and
	// arguments), and what else its deltas carry (reasoning_content,
	// refusal), counted as they arrive, and at 8 times that the body of
	// a whole JSON answer (embeddings). Default DefaultMaxReplyBytes.
	MaxReplyBytes int
	// Sampling are the chat requests' sampling settings; unset ones are
	// not sent, so the endpoint's defaults apply.
	Sampling Sampling
	// ContextWindow is the model's context length in tokens
	// (llm.context_window); 0: read from the endpoint (see
	// Client.ContextWindow).
	ContextWindow int
	// HTTPClient, when set, sends the requests (custom TLS or proxy); its
	// own Timeout must be zero or it cuts streams off, see Timeout. Its
	// CheckRedirect is replaced: redirects are refused.
	HTTPClient *http.Client
}

// Defaults of Config's zero fields.
const (
	DefaultTimeout    = 2 * time.Minute
	DefaultMaxRetries = 3
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
	// A tool call that writes a whole file (1 MiB at most, see
	// agentcore.Config.MaxFileSize) can arrive in one line, its content
	// escaped twice; a reply beyond these is not one a step can use.
	DefaultMaxLineBytes  = 8 << 20
	DefaultMaxReplyBytes = 8 << 20
)

var (
	// ErrConfig is wrapped by every configuration error; the message
	// names the configuration key.
	ErrConfig = errors.New("llm: bad configuration")
	// ErrTimeout is wrapped by an Error when the endpoint did not answer,
	// or stopped sending a reply, for Config.Timeout.
	ErrTimeout = errors.New("endpoint timed out")
	// ErrTooLarge is wrapped by an Error when a reply exceeded
	// Config.MaxReplyBytes or a line of its stream Config.MaxLineBytes.
	ErrTooLarge = errors.New("reply too large")
	// ErrRedirect is wrapped by an Error when the endpoint answered with
	// a redirect: it is not followed, as it could carry the API key to
	// another server or over plain http.
	ErrRedirect = errors.New("endpoint redirected")
)

// Error is a request to the endpoint that failed. Its text is at most
// maxErrorText bytes, without the API key or control characters.
type Error struct {
	// Endpoint is the request's URL, without credentials; Method its
	// method, empty for POST.
	Endpoint string
	Method   string
	// StatusCode is the HTTP status; 0 when none arrived (a connection
	// error, a timeout, or a reply that broke off).
	StatusCode int
	// Message is the server's error message, cleaned like the whole
	// text, or what went wrong.
	Message string
	// Attempts is how many times the request was sent.
	Attempts int
	// Err is the underlying error, if any (ErrTimeout, a net error, …).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "llm: %s %s: ", cmp.Or(e.Method, http.MethodPost), e.Endpoint)
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, "%d %s: ", e.StatusCode, http.StatusText(e.StatusCode))
	}
	b.WriteString(e.Message)
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return truncate(b.String(), maxErrorText)
}

func (e *Error) Unwrap() error { return e.Err }

// Client talks to one endpoint; it is safe for concurrent use.
type Client struct {
	oa             *openai.Client
	apiKey         string // removed from error text
	base           string // BaseURL without a trailing slash, credentials redacted
	endpoint       string // base without any user info, for usage records
	model          string
	embeddingModel string
	timeout        time.Duration
	maxRetries     int
	minBackoff     time.Duration
	maxBackoff     time.Duration
	maxReply       int
	window         int
	sampling       Sampling
	hc             *http.Client // follows no redirects
	rawURL         string       // base with its credentials, for requests
}

var _ agentcore.LLM = (*Client)(nil)

// New checks cfg and returns a Client for it. It does not contact the
// endpoint.
func New(cfg Config) (*Client, error) {
	base, err := checkBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, fmt.Errorf("%w: llm.model is not set", ErrConfig)
	}
	if err := checkAPIKey(cfg.APIKey); err != nil {
		return nil, err
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: llm.timeout is negative (%v)", ErrConfig, cfg.Timeout)
	}
	if cfg.MaxLineBytes < 0 || cfg.MaxReplyBytes < 0 {
		return nil, fmt.Errorf("%w: the line and reply limits must not be negative", ErrConfig)
	}
	if err := cfg.Sampling.Check(); err != nil {
		return nil, err
	}
	if err := CheckContextWindow(cfg.ContextWindow, cfg.Sampling.MaxTokens); err != nil {
		return nil, err
	}
	if cfg.MaxRetries < -1 {
		return nil, fmt.Errorf("%w: llm.max_retries must be -1 (none), 0 (default %d) or more, got %d", ErrConfig, DefaultMaxRetries, cfg.MaxRetries)
	}
	c := &Client{
		apiKey:         cfg.APIKey,
		base:           base.Redacted(),
		endpoint:       (&url.URL{Scheme: base.Scheme, Host: base.Host, Path: base.Path}).String(),
		model:          cfg.Model,
		embeddingModel: cfg.EmbeddingModel,
		timeout:        orDefault(cfg.Timeout, DefaultTimeout),
		maxRetries:     cfg.MaxRetries,
		minBackoff:     orDefault(cfg.MinBackoff, DefaultMinBackoff),
		maxBackoff:     orDefault(cfg.MaxBackoff, DefaultMaxBackoff),
		maxReply:       cmp.Or(cfg.MaxReplyBytes, DefaultMaxReplyBytes),
		window:         cfg.ContextWindow,
		sampling:       cfg.Sampling,
		rawURL:         base.String(),
	}
	switch c.maxRetries {
	case 0:
		c.maxRetries = DefaultMaxRetries
	case -1:
		c.maxRetries = 0
	}
	if c.minBackoff < 0 || c.maxBackoff < c.minBackoff {
		return nil, fmt.Errorf("%w: backoff bounds must satisfy 0 <= min (%v) <= max (%v)", ErrConfig, c.minBackoff, c.maxBackoff)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	sampling, err := cfg.Sampling.fields()
	if err != nil {
		return nil, err
	}
	c.hc = refuseRedirects(hc)
	oc.HTTPClient = guard{hc: c.hc, maxLine: cmp.Or(cfg.MaxLineBytes, DefaultMaxLineBytes), maxReply: c.maxReply, sampling: sampling}
	c.oa = openai.NewClientWithConfig(oc)
	return c, nil
}

// Endpoint is the client's base URL without credentials: what usage
// records name (agentcore.UsageRecord.Endpoint).
func (c *Client) Endpoint() string { return c.endpoint }

// Model is the chat model's name (Config.Model).
func (c *Client) Model() string { return c.model }

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func checkBaseURL(s string) (*url.URL, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: llm.base_url is not set (e.g. http://127.0.0.1:8000/v1)", ErrConfig)
	}
	u, err := url.Parse(s)
	if err != nil {
		// Not quoted: the value may hold credentials, and the parse error
		// would repeat it.
		return nil, fmt.Errorf("%w: llm.base_url is not a URL", ErrConfig)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: llm.base_url must be an http:// or https:// URL with a host, like http://127.0.0.1:8000/v1; got %q", ErrConfig, u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: llm.base_url must not have a query or fragment; got %q", ErrConfig, u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

func checkAPIKey(k string) error {
	if strings.HasPrefix(strings.ToLower(k), "bearer ") {
		return fmt.Errorf(`%w: llm.api_key must be the key alone, without "Bearer "`, ErrConfig)
	}
	for _, r := range k {
		// A pasted key with a newline would corrupt the header.
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%w: llm.api_key contains whitespace or control characters", ErrConfig)
		}
	}
	return nil
}

// retryInfo carries what a response said about retrying from the HTTP
// layer, which go-openai's errors do not expose, to the retry loop.
type retryInfo struct{ after string }

type retryInfoKey struct{}

// withRetryInfo gives one attempt of a request its retryInfo.
func withRetryInfo(ctx context.Context) (context.Context, *retryInfo) {
	ri := &retryInfo{}
	return context.WithValue(ctx, retryInfoKey{}, ri), ri
}

// retry runs try until it succeeds, fails for good, or the retries are
// spent. attempts counts the requests sent, across calls, so a stream that
// reopens shares one budget. try reports the error and whether a retry may
// help. When ctx ends while waiting, retry returns ctx's error.
func (c *Client) retry(ctx context.Context, attempts *int, try func(actx context.Context) (retryable bool, err error)) error {
	for {
		*attempts++
		actx, ri := withRetryInfo(ctx)
		retryable, err := try(actx)
		if err == nil {
			return nil
		}
		if !retryable || *attempts > c.maxRetries || ctx.Err() != nil {
			return err
		}
		if d, ok := parseRetryAfter(ri.after, time.Now()); ok && d > c.maxBackoff {
			// Waiting less would be refused again; waiting that long
			// would hold the turn.
			var e *Error
			if errors.As(err, &e) {
				e.Message += fmt.Sprintf(" (Retry-After of %v exceeds the maximum backoff of %v: not retried)", d.Round(time.Second), c.maxBackoff)
			}
			return err
		}
		if err := sleep(ctx, c.backoff(*attempts, ri.after)); err != nil {
			return err
		}
	}
}

// sleep waits d or until ctx ends, and then returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff is the wait before retry number attempt (1 for the first):
// the server's Retry-After when it gave one, else exponential with full
// jitter over the upper half; both capped at maxBackoff (retry does not
// wait for a longer Retry-After).
func (c *Client) backoff(attempt int, retryAfter string) time.Duration {
	if d, ok := parseRetryAfter(retryAfter, time.Now()); ok {
		return min(d, c.maxBackoff)
	}
	d := c.minBackoff
	for i := 1; i < attempt && d < c.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.maxBackoff)
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date.
func parseRetryAfter(s string, now time.Time) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(s); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// classify turns an error from go-openai into an *Error and says whether
// a retry may help. ctx is the caller's: its end is returned as is.
func (c *Client) classify(ctx context.Context, endpoint string, attempt int, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	e := &Error{Endpoint: endpoint, Attempts: attempt}
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	var replyErr *replyError
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.Is(err, ErrTimeout):
		e.Message, e.Err = "no answer within "+c.timeout.String(), ErrTimeout
		return true, e
	case errors.As(err, &replyErr):
		e.StatusCode, e.Message, e.Err = replyErr.status, c.clean(replyErr.msg), replyErr.err
		return false, e
	case errors.As(err, &apiErr) && apiErr.HTTPStatusCode != 0:
		e.StatusCode, e.Message = apiErr.HTTPStatusCode, c.clean(apiErr.Message)
		code, _ := apiErr.Code.(string)
		if cle := contextLength(e.StatusCode, apiErr.Type, code, apiErr.Message); cle != nil {
			e.Err = cle
		}
	case errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0:
		// Not OpenAI's error JSON: the body is the server's message, or
		// vLLM's error object at the top level.
		msg, typ, code, ok := errorBody(reqErr.Body)
		if !ok {
			msg = bodyMessage(reqErr.Body)
		}
		e.StatusCode, e.Message = reqErr.HTTPStatusCode, c.clean(msg)
		if cle := contextLength(e.StatusCode, typ, code, msg); cle != nil {
			e.Err = cle
		}
	case errors.As(err, &apiErr):
		// An error object inside a stream that began well.
		e.Message = c.clean("error in the reply stream: " + apiErr.Message)
		return false, e
	case errors.As(err, &syntaxErr) || errors.As(err, &typeErr):
		e.Message = c.clean("invalid chunk in the reply stream: " + err.Error())
		return false, e
	case errors.Is(err, errTruncated) || errors.Is(err, openai.ErrTooManyEmptyStreamMessages):
		e.Message = err.Error()
		return false, e
	default:
		// No HTTP status: the connection failed or broke off, or TLS
		// failed, which a retry does not change.
		e.Message, e.Err = c.clean(connMessage(err)), err
		return !isTLSFailure(err), e
	}
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500, e
}

// isTLSFailure reports whether err is a certificate or TLS protocol
// failure: a configuration to fix, not a passing fault.
func isTLSFailure(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		record    tls.RecordHeaderError
		alert     tls.AlertError
		authority x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) ||
		errors.As(err, &authority) || errors.As(err, &host) || errors.As(err, &invalid)
}

// connMessage says what failed without the request details url.Error
// repeats (method and URL are in Error already).
func connMessage(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

func bodyMessage(body []byte) string {
	if m, ok := cutMessage(body); ok {
		return m
	}
	s := strings.TrimSpace(string(body))
	if s == "" {
		return "(empty response body)"
	}
	return s
}

// cutMessage reads the message of OpenAI's error JSON that maxErrorBody
// cut off, as far as it goes: {"error":{"message":"… .
func cutMessage(body []byte) (string, bool) {
	if len(body) < maxErrorBody || !bytes.HasPrefix(bytes.TrimSpace(body), []byte(`{`)) {
		return "", false // whole, so not OpenAI's error JSON
	}
	_, rest, ok := bytes.Cut(body, []byte(`"message"`))
	if !ok {
		return "", false
	}
	rest = bytes.TrimLeft(rest, " \t\r\n")
	if rest, ok = bytes.CutPrefix(rest, []byte(":")); !ok {
		return "", false
	}
	rest = bytes.TrimLeft(rest, " \t\r\n")
	if !bytes.HasPrefix(rest, []byte(`"`)) {
		return "", false
	}
	// Close the string where it was cut, dropping a cut escape.
	for n := len(rest); n > len(rest)-8 && n > 0; n-- {
		var m string
		if json.Unmarshal(append(rest[:n:n], '"'), &m) == nil {
			return m + "…", true
		}
	}
	return "", false
}

// maxErrorText caps an Error's text, and maxMessage the part of it that
// comes from the endpoint, leaving room for the endpoint's URL.
const (
	maxErrorText = 512
	maxMessage   = 320
)

// bearer is a credential in an Authorization header (RFC 6750's token
// characters), long enough not to be a word: "bearer token" stays.
var bearer = regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}`)

// clean makes text from the endpoint fit for users and the log: valid
// UTF-8, control and format characters (escapes, bidi overrides,
// zero-width) removed and line breaks made spaces, so it can neither
// forge a log line nor hide text; the API key and any bearer token
// redacted, also a key cut off at the end; at most maxMessage bytes.
func (c *Client) clean(s string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			if b.Len() > 0 && !strings.HasSuffix(b.String(), " ") {
				b.WriteByte(' ')
			}
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
		default:
			b.WriteRune(r)
		}
	}
	s = b.String()
	if k := c.apiKey; len(k) >= minKeyAnywhere {
		s = strings.ReplaceAll(s, k, "[redacted]")
		for n := len(k) - 1; n >= 4; n-- {
			if t, ok := strings.CutSuffix(s, k[:n]); ok && (t == "" || !isWordByte(t[len(t)-1])) {
				s = t + "[redacted]"
				break
			}
		}
	} else if k != "" {
		s = replaceWhole(s, k, "[redacted]")
	}
	s = bearer.ReplaceAllString(s, "Bearer [redacted]")
	return truncate(strings.TrimSpace(s), maxMessage)
}

// minKeyAnywhere is the shortest API key redacted wherever it occurs in
// an endpoint's text. A shorter one (a placeholder such as "x", which a
// server run without a key ignores) is redacted only where it stands
// alone: inside words it would blank out their letters ("maximum").
const minKeyAnywhere = 8

// isWordByte reports a byte that makes a key next to it part of a word:
// an ASCII letter or digit, '_', or a byte of a non-ASCII character.
func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c >= 0x80
}

// replaceWhole replaces each occurrence of old in s that stands alone
// (neither neighbour a word byte) with repl.
func replaceWhole(s, old, repl string) string {
	var b strings.Builder
	last := 0
	for i := 0; i+len(old) <= len(s); {
		k := strings.Index(s[i:], old)
		if k < 0 {
			break
		}
		at, end := i+k, i+k+len(old)
		if (at == 0 || !isWordByte(s[at-1])) && (end == len(s) || !isWordByte(s[end])) {
			b.WriteString(s[last:at])
			b.WriteString(repl)
			last, i = end, end
			continue
		}
		i = at + 1
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// truncate cuts s to at most n bytes, on a character boundary, marking
// the cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	i := n - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}

// chatRequest is req in go-openai's terms.
func (c *Client) chatRequest(req agentcore.Request) openai.ChatCompletionRequest {
	// include_usage: the endpoint reports the call's tokens in a last
	// chunk (vLLM, llama.cpp and OpenAI do).
	cr := openai.ChatCompletionRequest{Model: c.model, Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true}}
	for _, m := range req.Messages {
		om := openai.ChatCompletionMessage{Role: string(m.Role), Content: m.Content, ToolCallID: m.ToolCallID}
		if m.Role == agentcore.RoleTool && m.Content == "" {
			// go-openai omits an empty content, and endpoints reject a
			// tool message without one.
			om.Content = "(no output)"
		}
		for _, tc := range m.ToolCalls {
			om.ToolCalls = append(om.ToolCalls, openai.ToolCall{ID: tc.ID, Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
		}
		cr.Messages = append(cr.Messages, om)
	}
	for _, t := range req.Tools {
		var params any = t.Parameters
		if len(t.Parameters) == 0 {
			params = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		cr.Tools = append(cr.Tools, openai.Tool{Type: openai.ToolTypeFunction,
			Function: &openai.FunctionDefinition{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	return cr
}

// Embed returns one vector per text, in order, from Config.EmbeddingModel.
func (c *Client) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if c.embeddingModel == "" {
		return nil, fmt.Errorf("%w: no embedding model is configured (retrieval.embeddings.model)", ErrConfig)
	}
	if len(texts) == 0 {
		return nil, nil
	}
	endpoint := c.base + "/embeddings"
	var out [][]float32
	attempt := 0
	err := c.retry(ctx, &attempt, func(actx context.Context) (bool, error) {
		tctx, cancel := context.WithTimeoutCause(actx, c.timeout, ErrTimeout)
		defer cancel()
		resp, err := c.oa.CreateEmbeddings(tctx, openai.EmbeddingRequestStrings{Input: texts, Model: openai.EmbeddingModel(c.embeddingModel)})
		if err != nil {
			if context.Cause(tctx) == ErrTimeout && ctx.Err() == nil {
				err = ErrTimeout
			}
			return c.classify(ctx, endpoint, attempt, err)
		}
		data := resp.Data
		if len(data) != len(texts) {
			return false, &Error{Endpoint: endpoint, Attempts: attempt, Message: fmt.Sprintf("%d embeddings for %d inputs", len(data), len(texts))}
		}
		sort.Slice(data, func(i, j int) bool { return data[i].Index < data[j].Index })
		out = make([][]float32, len(data))
		for i, d := range data {
			if d.Index != i {
				return false, &Error{Endpoint: endpoint, Attempts: attempt, Message: fmt.Sprintf("embedding indexes are not 0..%d", len(texts)-1)}
			}
			out[i] = d.Embedding
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
