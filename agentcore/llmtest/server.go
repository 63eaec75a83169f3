package llmtest

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codumentor/codumentor/agentcore"
)

// Options configure a Server started with StartServer.
type Options struct {
	// Addr is the address to listen on; default "127.0.0.1:0" (a free port).
	Addr string
	// APIKey, when set, must arrive as "Authorization: Bearer <APIKey>";
	// other requests get 401, as from a real endpoint.
	APIKey string
	// Model is the name replies and GET /v1/models report; default "llmtest".
	Model string
	// Dimensions is the length of embeddings when a request names none;
	// default 64.
	Dimensions int
	// ChunkDelay paces streamed text pieces as a real model's tokens
	// arrive (default: as fast as possible).
	ChunkDelay time.Duration
	// ReasoningField is the delta field a Step's Reasoning streams in:
	// "reasoning_content" (the default: DeepSeek's API, llama.cpp, vLLM
	// before 0.11) or "reasoning" (vLLM since).
	ReasoningField string
	// ContextWindow, when set, is the served model's context length in
	// tokens (CountTokens), enforced as Dialect's server does: a request
	// too long is refused with its 400 and recorded (ContextRefusals),
	// usage reports CountTokens, and the window is reported where
	// Dialect's server reports it.
	ContextWindow int
	// Dialect is DialectVLLM (default) or DialectLlamaCpp.
	Dialect string
}

// Server is an OpenAI-compatible HTTP endpoint that answers from a Script:
//
//	POST /v1/chat/completions  stream true (SSE) or false
//	POST /v1/embeddings        deterministic vectors, see Embedding
//	GET  /v1/models
type Server struct {
	script *Script
	opts   Options
	url    string
	hs     *http.Server
	served chan struct{} // closed when Serve returned
	done   chan struct{} // closed by Close: stalled replies end
	seq    atomic.Int64  // completion ids

	mu         sync.Mutex
	closed     bool
	active     sync.WaitGroup // handlers running; Add only under mu while !closed
	requests   []agentcore.Request
	bodies     []json.RawMessage
	failN      int
	failStatus int
	faults     []Fault // for the next chat requests, see Inject
	tokens     []int   // CountTokens of each request, see PromptTokens
	refused    int     // requests over Options.ContextWindow
}

// NewServer starts a Server for s on a free port of 127.0.0.1, like
// httptest.NewServer; it panics if it cannot listen. Close it when done.
func NewServer(s *Script) *Server {
	srv, err := StartServer(s, Options{})
	if err != nil {
		panic(err)
	}
	return srv
}

// StartServer starts a Server for s with opts.
func StartServer(s *Script, opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Model == "" {
		opts.Model = "llmtest"
	}
	if opts.Dimensions <= 0 {
		opts.Dimensions = 64
	}
	switch opts.ReasoningField {
	case "":
		opts.ReasoningField = "reasoning_content"
	case "reasoning_content", "reasoning":
	default:
		return nil, fmt.Errorf("llmtest: Options.ReasoningField %q is not reasoning_content or reasoning", opts.ReasoningField)
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("llmtest: %w", err)
	}
	srv := &Server{
		script: s,
		opts:   opts,
		url:    "http://" + ln.Addr().String() + "/v1",
		served: make(chan struct{}),
		done:   make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", srv.chat)
	mux.HandleFunc("POST /v1/embeddings", srv.embeddings)
	mux.HandleFunc("GET /v1/models", srv.models)
	mux.HandleFunc("GET /props", srv.props)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	srv.hs = &http.Server{Handler: srv.track(mux), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(srv.served)
		srv.hs.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return srv, nil
}

// URL is the base URL clients are configured with, ending in /v1.
func (srv *Server) URL() string { return srv.url }

// Close stops the server and waits for the requests being answered; a
// stalled reply ends. It is safe to call more than once.
func (srv *Server) Close() {
	srv.mu.Lock()
	if srv.closed {
		srv.mu.Unlock()
		return
	}
	srv.closed = true
	srv.mu.Unlock()
	close(srv.done)
	srv.hs.Close()
	<-srv.served
	srv.active.Wait()
}

// Requests returns the chat completion requests received so far, in
// order: every one that carried the API key and decoded, including those
// answered with an injected failure or a script error.
func (srv *Server) Requests() []agentcore.Request {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return append([]agentcore.Request(nil), srv.requests...)
}

// Bodies returns the JSON bodies of the requests Requests returns, as
// sent: for assertions on what Request does not hold (sampling settings,
// stream_options).
func (srv *Server) Bodies() []json.RawMessage {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return append([]json.RawMessage(nil), srv.bodies...)
}

// FailNext makes the next n chat or embeddings requests fail with status
// and an OpenAI-style error body, for tests of a client's retries.
// Status 0 drops the connection without answering.
func (srv *Server) FailNext(n, status int) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.failN, srv.failStatus = n, status
}

// track counts running handlers so Close can wait for them.
func (srv *Server) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.mu.Lock()
		if srv.closed {
			srv.mu.Unlock()
			writeError(w, http.StatusServiceUnavailable, "server closed")
			return
		}
		srv.active.Add(1)
		srv.mu.Unlock()
		defer srv.active.Done()
		if !srv.authorized(r) {
			writeError(w, http.StatusUnauthorized, "Incorrect API key provided.")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (srv *Server) authorized(r *http.Request) bool {
	if srv.opts.APIKey == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(srv.opts.APIKey)) == 1
}

// injected answers the request with an injected failure, if one is due.
func (srv *Server) injected(w http.ResponseWriter) bool {
	srv.mu.Lock()
	if srv.failN <= 0 {
		srv.mu.Unlock()
		return false
	}
	srv.failN--
	status := srv.failStatus
	srv.mu.Unlock()
	if status == 0 {
		panic(http.ErrAbortHandler) // net/http closes the connection unanswered
	}
	writeError(w, status, fmt.Sprintf("injected failure (%d %s)", status, http.StatusText(status)))
	return true
}

func (srv *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	req, err := wr.request()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	srv.mu.Lock()
	srv.requests = append(srv.requests, req)
	srv.bodies = append(srv.bodies, body)
	srv.tokens = append(srv.tokens, CountTokens(req))
	srv.mu.Unlock()
	if srv.injected(w) {
		return
	}
	f := srv.nextFault()
	if f.answer(w, r) {
		return
	}
	if len(wr.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "messages: must not be empty")
		return
	}
	if srv.overLength(w, CountTokens(req), wr.maxTokens()) {
		return
	}
	st, _, err := srv.script.reply(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	model := wr.Model
	if model == "" {
		model = srv.opts.Model
	}
	id := fmt.Sprintf("chatcmpl-llmtest-%d", srv.seq.Add(1))
	usage := wireUsage{PromptTokens: promptTokens(req), CompletionTokens: len(pieces(st.Reasoning, textPiece)) + len(pieces(st.Text, textPiece)) + len(st.ToolCalls)}
	if srv.opts.ContextWindow > 0 {
		usage.PromptTokens = CountTokens(req)
		usage.CompletionTokens = CountTokens(agentcore.Request{Messages: []agentcore.Message{{Content: st.Text, ToolCalls: st.ToolCalls}}})
	}
	if st.PromptTokens > 0 {
		usage.PromptTokens = st.PromptTokens
	}
	if st.CompletionTokens > 0 {
		usage.CompletionTokens = st.CompletionTokens
	}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	if wr.Stream && !f.NonStreaming {
		srv.stream(w, r, id, model, st, f, usage, wr.StreamOptions != nil && wr.StreamOptions.IncludeUsage && !f.NoUsage)
		return
	}
	if st.Stall {
		srv.stall(r)
		return
	}
	if st.Abort {
		panic(http.ErrAbortHandler)
	}
	var c wireCompletionChoice
	c.Message.Role = "assistant"
	if srv.opts.ReasoningField == "reasoning" {
		c.Message.Reasoning = st.Reasoning
	} else {
		c.Message.ReasoningContent = st.Reasoning
	}
	if st.Text != "" || len(st.ToolCalls) == 0 {
		c.Message.Content = &st.Text
	}
	for _, tc := range st.ToolCalls {
		c.Message.ToolCalls = append(c.Message.ToolCalls, wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}})
	}
	c.FinishReason = st.finishReason()
	writeJSON(w, http.StatusOK, wireCompletion{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: model, Choices: []wireCompletionChoice{c}, Usage: usage})
}

// stream sends st the way OpenAI streams: a role delta, reasoning deltas
// (without content, as vLLM's reasoning parsers send them), content deltas,
// each tool call as a first delta (index, id, type, name, the first bytes
// of the arguments) followed by deltas of only index and more arguments,
// a last chunk with the finish_reason, [DONE]. Asked for include_usage,
// it sends, as vLLM does, a chunk with empty choices and the usage before
// [DONE].
// f's stream faults change that on the way.
func (srv *Server) stream(rw http.ResponseWriter, r *http.Request, id, model string, st Step, f Fault, usage wireUsage, includeUsage bool) {
	flusher, _ := rw.(http.Flusher)
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	var w io.Writer = rw
	if f.Trickle > 0 {
		w = trickler{w: rw, f: flusher, delay: f.Trickle, r: r}
	}
	created := time.Now().Unix()
	send := func(d wireDelta, finish *string) {
		c := wireChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
			Choices: []wireChunkChoice{{Delta: d, FinishReason: finish}}}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	empty := ""
	send(wireDelta{Role: "assistant", Content: &empty}, nil)
	if f.InvalidChunk {
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"unterminated\n\n")
	}
	if f.LineBytes > 0 && writeLongLine(w, id, model, f.LineBytes) != nil {
		return // the client is gone
	}
	piece := strings.Repeat("x", bigPiece)
	for n := f.ReasoningBytes; n > 0; n -= bigPiece {
		if r.Context().Err() != nil {
			return
		}
		send(wireDelta{ReasoningContent: piece[:min(n, bigPiece)]}, nil)
	}
	for _, p := range pieces(st.Reasoning, textPiece) {
		if srv.opts.ChunkDelay > 0 {
			select {
			case <-time.After(srv.opts.ChunkDelay):
			case <-r.Context().Done():
				return
			}
		}
		send(srv.reasoning(p), nil)
	}
	text := pieces(st.Text, textPiece)
	if f.ReplyBytes > 0 {
		text = nil
		for n := f.ReplyBytes; n > 0; n -= bigPiece {
			if r.Context().Err() != nil {
				return
			}
			p := piece[:min(n, bigPiece)]
			send(wireDelta{Content: &p}, nil)
		}
	}
	for _, p := range text {
		if srv.opts.ChunkDelay > 0 {
			select {
			case <-time.After(srv.opts.ChunkDelay):
			case <-r.Context().Done():
				return
			}
		}
		send(wireDelta{Content: &p}, nil)
	}
	if st.Stall {
		srv.stall(r)
		return
	}
	if st.Abort {
		panic(http.ErrAbortHandler)
	}
	for i, tc := range st.ToolCalls {
		args := pieces(tc.Arguments, argPiece)
		first := ""
		if len(args) > 0 {
			first, args = args[0], args[1:]
		}
		send(wireDelta{ToolCalls: []wireToolCall{{Index: &i, ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: first}}}}, nil)
		for _, a := range args {
			if r.Context().Err() != nil {
				return // the client is gone
			}
			send(wireDelta{ToolCalls: []wireToolCall{{Index: &i, Function: wireFunction{Arguments: a}}}}, nil)
		}
	}
	if !f.NoFinish {
		finish := st.finishReason()
		send(wireDelta{}, &finish)
	}
	if includeUsage {
		b, _ := json.Marshal(wireChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: []wireChunkChoice{}, Usage: &usage})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// reasoning is a delta of reasoning p, in the configured field.
func (srv *Server) reasoning(p string) wireDelta {
	if srv.opts.ReasoningField == "reasoning" {
		return wireDelta{Reasoning: p}
	}
	return wireDelta{ReasoningContent: p}
}

// stall waits until the client gives up or the Server closes.
func (srv *Server) stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-srv.done:
	}
}

func (srv *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	var er wireEmbeddingRequest
	if err := json.NewDecoder(r.Body).Decode(&er); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if srv.injected(w) {
		return
	}
	inputs, err := embeddingInputs(er.Input)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	dims := er.Dimensions
	if dims <= 0 {
		dims = srv.opts.Dimensions
	}
	resp := wireEmbeddingResponse{Object: "list", Model: er.Model, Data: []wireEmbedding{}}
	if resp.Model == "" {
		resp.Model = srv.opts.Model
	}
	for i, in := range inputs {
		v := Embedding(in, dims)
		var e any = v
		if er.EncodingFormat == "base64" {
			e = base64Floats(v)
		}
		resp.Data = append(resp.Data, wireEmbedding{Object: "embedding", Index: i, Embedding: e})
		resp.Usage.PromptTokens += len(strings.Fields(in))
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	writeJSON(w, http.StatusOK, resp)
}

func (srv *Server) models(w http.ResponseWriter, r *http.Request) {
	m := wireModel{ID: srv.opts.Model, Object: "model", OwnedBy: "llmtest"}
	if srv.opts.ContextWindow > 0 {
		if srv.opts.Dialect == DialectLlamaCpp {
			m.Meta = map[string]int{"n_ctx_train": 4 * srv.opts.ContextWindow}
		} else {
			m.MaxModelLen = srv.opts.ContextWindow
		}
	}
	writeJSON(w, http.StatusOK, wireModels{Object: "list", Data: []wireModel{m}})
}

// embeddingInputs decodes "input": a string or an array of strings.
func embeddingInputs(raw json.RawMessage) ([]string, error) {
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		raw, _ = json.Marshal([]string{one})
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, errors.New("input: must be a string or an array of strings")
	}
	if len(many) == 0 {
		return nil, errors.New("input: must not be empty")
	}
	for i, s := range many {
		if s == "" {
			return nil, fmt.Errorf("input[%d]: must not be empty", i)
		}
	}
	return many, nil
}

// promptTokens is a rough token count: usage numbers only need to exist.
func promptTokens(req agentcore.Request) int {
	n := 0
	for _, m := range req.Messages {
		n += len(strings.Fields(m.Content)) + 1
	}
	return n
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError answers with OpenAI's error body.
func writeError(w http.ResponseWriter, status int, msg string) {
	var e wireError
	e.Error.Message = msg
	switch {
	case status == http.StatusUnauthorized:
		e.Error.Type = "invalid_request_error"
		code := "invalid_api_key"
		e.Error.Code = &code
	case status == http.StatusTooManyRequests:
		e.Error.Type = "requests"
		code := "rate_limit_exceeded"
		e.Error.Code = &code
	case status >= 500:
		e.Error.Type = "server_error"
	default:
		e.Error.Type = "invalid_request_error"
	}
	writeJSON(w, status, e)
}
