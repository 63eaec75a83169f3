package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/codumentor/codumentor/agentcore"
)

// Dialects of Options.Dialect: whose wire behaviour a Server with a
// ContextWindow has.
const (
	// DialectVLLM: GET /v1/models reports max_model_len; a request too
	// long is refused with 400 and vLLM's "maximum context length"
	// message; GET /props is not served.
	DialectVLLM = "vllm"
	// DialectLlamaCpp: GET /props reports n_ctx (GET /v1/models only
	// the training context, meta.n_ctx_train, which is not the served
	// window); a request too long is refused with 400 and an error of
	// type exceed_context_size_error.
	DialectLlamaCpp = "llama.cpp"
)

// CountTokens is the deterministic token count of a Server with a
// ContextWindow, tokenizer-like for code and prose: a whitespace-separated
// word is a token per 4 bytes, a line break one, a message 4 more (its
// chat template markers), a tool the count of its JSON definition and 8.
func CountTokens(req agentcore.Request) int {
	n := 0
	for _, m := range req.Messages {
		n += 4 + countText(string(m.Role)) + countText(m.Content)
		for _, tc := range m.ToolCalls {
			n += 4 + countText(tc.Name) + countText(tc.Arguments)
		}
	}
	for _, t := range req.Tools {
		b, _ := json.Marshal(t)
		n += 8 + countText(string(b))
	}
	return n
}

func countText(s string) int {
	n := strings.Count(s, "\n")
	for _, w := range strings.Fields(s) {
		n += (len(w) + 3) / 4
	}
	return n
}

// overLength answers a request over the window as the dialect's server
// does and reports whether it did. prompt is the request's tokens,
// maxTokens its max_tokens (0: unset).
func (srv *Server) overLength(w http.ResponseWriter, prompt, maxTokens int) bool {
	win := srv.opts.ContextWindow
	if win <= 0 {
		return false
	}
	if srv.opts.Dialect == DialectLlamaCpp {
		// llama.cpp cuts the reply short instead of refusing a large
		// n_predict; it refuses a prompt that fills the context.
		if prompt < win {
			return false
		}
		srv.noteRefused()
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"code":            400,
			"message":         fmt.Sprintf("request (%d tokens) exceeds the available context size (%d tokens), try increasing it", prompt, win),
			"type":            "exceed_context_size_error",
			"n_prompt_tokens": prompt,
			"n_ctx":           win,
		}})
		return true
	}
	var msg string
	switch {
	case maxTokens > 0 && prompt+maxTokens > win:
		msg = fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.", win, prompt+maxTokens, prompt, maxTokens)
	case maxTokens <= 0 && prompt >= win:
		msg = fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", win, prompt)
	default:
		return false
	}
	srv.noteRefused()
	writeJSON(w, http.StatusBadRequest, map[string]any{"object": "error", "message": msg, "type": "BadRequestError", "param": nil, "code": 400})
	return true
}

func (srv *Server) noteRefused() {
	srv.mu.Lock()
	srv.refused++
	srv.mu.Unlock()
}

// PromptTokens returns CountTokens of each chat request Requests returns,
// in the same order.
func (srv *Server) PromptTokens() []int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return append([]int(nil), srv.tokens...)
}

// ContextRefusals is how many chat requests were refused as longer than
// Options.ContextWindow.
func (srv *Server) ContextRefusals() int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.refused
}

// props answers llama.cpp's GET /props.
func (srv *Server) props(w http.ResponseWriter, r *http.Request) {
	if srv.opts.ContextWindow <= 0 || srv.opts.Dialect != DialectLlamaCpp {
		writeError(w, http.StatusNotFound, "no route GET /props")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": srv.opts.ContextWindow, "model": srv.opts.Model},
		"total_slots":                 1,
		"model_path":                  "/models/" + srv.opts.Model + ".gguf",
	})
}
