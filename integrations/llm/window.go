package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codumentor/codumentor/agentcore"
)

// The context window. Configured (Config.ContextWindow), or read once
// from the endpoint: vLLM's GET /v1/models reports max_model_len per
// model, llama.cpp's GET /props the served context (n_ctx). The answer is
// kept per endpoint and model for the process, a failure for
// windowRetry, so a turn rarely waits on it.

// Bounds of what an endpoint's window report may say: a larger answer is
// not read, an implausible number is not believed.
const (
	maxWindowBody = 1 << 20
	maxWindow     = 1 << 24
	windowTimeout = 10 * time.Second
	windowRetry   = time.Minute
)

type windowEntry struct {
	tokens int
	err    error
	at     time.Time
}

var windows = struct {
	sync.Mutex
	m map[string]windowEntry
}{m: map[string]windowEntry{}}

var _ agentcore.WindowedLLM = (*Client)(nil)

// CheckContextWindow reports a context window (llm.context_window) that
// cannot be: negative, implausibly large, or leaving no room for a
// request besides max_tokens. It wraps ErrConfig.
func CheckContextWindow(window int, maxTokens *int) error {
	switch {
	case window < 0 || window > maxWindow:
		return fmt.Errorf("%w: llm.context_window must be 0 (read from the endpoint) or a number of tokens up to %d, got %d", ErrConfig, maxWindow, window)
	case window > 0 && window < 256:
		return fmt.Errorf("%w: llm.context_window of %d tokens is too small for any request; at least 256", ErrConfig, window)
	case window > 0 && maxTokens != nil && *maxTokens >= window/2:
		return fmt.Errorf("%w: llm.max_tokens (%d) must be less than half of llm.context_window (%d), so that a request has room", ErrConfig, *maxTokens, window)
	}
	return nil
}

// ContextWindow returns the model's context window: Config.ContextWindow,
// else what the endpoint reports (0 when it reports none), with the
// reply's share set to the configured max_tokens. An error means the
// endpoint could not be asked; the window is then unknown.
func (c *Client) ContextWindow(ctx context.Context) (agentcore.ContextWindow, error) {
	cw := agentcore.ContextWindow{Model: c.base + " " + c.model, Tokens: c.window}
	if c.sampling.MaxTokens != nil {
		cw.Reply = *c.sampling.MaxTokens
	}
	if cw.Tokens > 0 {
		return cw, nil
	}
	key := cw.Model
	windows.Lock()
	e, ok := windows.m[key]
	windows.Unlock()
	if ok && (e.err == nil || time.Since(e.at) < windowRetry) {
		cw.Tokens = e.tokens
		return cw, e.err
	}
	tokens, err := c.discoverWindow(ctx)
	if ctx.Err() != nil {
		return cw, err // the caller gave up: nothing learnt
	}
	windows.Lock()
	windows.m[key] = windowEntry{tokens: tokens, err: err, at: time.Now()}
	windows.Unlock()
	cw.Tokens = tokens
	return cw, err
}

// discoverWindow asks the endpoint: vLLM's /v1/models, then llama.cpp's
// /props (beside the API version path). 0, nil: neither says.
func (c *Client) discoverWindow(ctx context.Context) (int, error) {
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	found, err := c.getJSON(ctx, c.base+"/models", c.rawURL+"/models", &models)
	if err != nil {
		return 0, err
	}
	if found {
		for _, m := range models.Data {
			if m.ID == c.model && m.MaxModelLen > 0 && m.MaxModelLen <= maxWindow {
				return m.MaxModelLen, nil
			}
		}
	}
	var props struct {
		NCtx     int `json:"n_ctx"`
		Defaults struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	root, rawRoot := strings.TrimSuffix(c.base, "/v1"), strings.TrimSuffix(c.rawURL, "/v1")
	if found, err = c.getJSON(ctx, root+"/props", rawRoot+"/props", &props); err != nil || !found {
		return 0, err
	}
	for _, n := range []int{props.Defaults.NCtx, props.NCtx} {
		if n > 0 && n <= maxWindow {
			return n, nil
		}
	}
	return 0, nil
}

// getJSON reads raw's JSON answer into v, at most maxWindowBody bytes;
// url is raw without credentials, for errors.
// found is false for a 404 or another non-2xx status, or an answer that
// is not JSON (the endpoint does not serve it); err for a failed
// connection or an answer too large.
func (c *Client) getJSON(ctx context.Context, url, raw string, v any) (found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, min(c.timeout, windowTimeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return false, &Error{Method: http.MethodGet, Endpoint: url, Message: "invalid request", Attempts: 1}
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, &Error{Method: http.MethodGet, Endpoint: url, Message: c.clean(connMessage(err)), Err: err, Attempts: 1}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return false, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxWindowBody+1))
	if err != nil {
		return false, &Error{Method: http.MethodGet, Endpoint: url, Message: c.clean(connMessage(err)), Err: err, Attempts: 1}
	}
	if len(body) > maxWindowBody {
		return false, &Error{Method: http.MethodGet, Endpoint: url, Message: "answer longer than " + size(maxWindowBody), Err: ErrTooLarge, Attempts: 1}
	}
	if json.Unmarshal(body, v) != nil {
		// Not this API (a web page behind the same host, say): it says
		// nothing of the window.
		return false, nil
	}
	return true, nil
}

// Context-length refusals, as vLLM, llama.cpp and OpenAI word them.
var (
	reMaxContext = regexp.MustCompile(`maximum context length is (\d+) tokens`)
	rePrompt     = []*regexp.Regexp{
		regexp.MustCompile(`requested \d+ tokens \((\d+) in the messages`),
		regexp.MustCompile(`request has (\d+) input tokens`),
		regexp.MustCompile(`messages resulted in (\d+) tokens`),
	}
	reLlamaCpp = regexp.MustCompile(`request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)`)
)

// contextLength recognises a 400 refusing a request as too long for the
// model, from its message and error type, and says what sizes it names.
func contextLength(status int, typ, code, msg string) *agentcore.ContextLengthError {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
		return nil
	}
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	if m := reLlamaCpp.FindStringSubmatch(msg); m != nil {
		return &agentcore.ContextLengthError{Prompt: num(m[1]), Window: num(m[2])}
	}
	if typ == "exceed_context_size_error" || code == "context_length_exceeded" || strings.Contains(msg, "exceeds the available context size") {
		return &agentcore.ContextLengthError{}
	}
	m := reMaxContext.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	e := &agentcore.ContextLengthError{Window: num(m[1])}
	for _, re := range rePrompt {
		if p := re.FindStringSubmatch(msg); p != nil {
			e.Prompt = num(p[1])
			break
		}
	}
	return e
}

// errorBody reads the message, type and code of an error body: OpenAI's
// {"error":{…}} or vLLM's top-level {"object":"error","message":…}.
func errorBody(body []byte) (msg, typ, code string, ok bool) {
	var top struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Error   *struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &top) != nil {
		return "", "", "", false
	}
	if top.Error != nil {
		return top.Error.Message, top.Error.Type, rawString(top.Error.Code), top.Error.Message != ""
	}
	return top.Message, top.Type, rawString(top.Code), top.Message != ""
}

func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
