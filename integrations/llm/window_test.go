package llm_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/integrations/llm"
)

// A request over the model's window is refused as vLLM and llama.cpp
// refuse it, and the client's error says so (errors.Is
// agentcore.ErrContextLength) with the sizes the endpoint named.
func TestContextLengthRefusal(t *testing.T) {
	long := strings.Repeat("word ", 400) // 400 tokens by llmtest.CountTokens
	max := 50
	for _, tc := range []struct {
		name           string
		dialect        string
		fault          *llmtest.Fault
		maxTokens      *int
		window, prompt int // what the error must name; 0: not named
	}{
		{name: "vllm without max_tokens", dialect: llmtest.DialectVLLM, window: 300, prompt: 405},
		{name: "vllm with max_tokens", dialect: llmtest.DialectVLLM, maxTokens: &max, window: 300, prompt: 405},
		{name: "llama.cpp", dialect: llmtest.DialectLlamaCpp, window: 300, prompt: 405},
		{name: "llama.cpp without sizes", fault: &llmtest.Fault{Status: 400, Message: "the request exceeds the available context size, try increasing it"}},
		{name: "openai", fault: &llmtest.Fault{Status: 400, Message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."}, window: 8192, prompt: 9000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "hi"}}}, llmtest.Options{ContextWindow: 300, Dialect: tc.dialect})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			if tc.fault != nil {
				srv.Inject(*tc.fault)
			}
			cfg := fast(srv.URL())
			cfg.Sampling.MaxTokens = tc.maxTokens
			_, err = newClient(t, cfg).Stream(t.Context(), userReq(long))
			var cle *agentcore.ContextLengthError
			if !errors.Is(err, agentcore.ErrContextLength) || !errors.As(err, &cle) {
				t.Fatalf("error %v; want one wrapping ErrContextLength", err)
			}
			if cle.Window != tc.window || cle.Prompt != tc.prompt {
				t.Errorf("window %d, prompt %d; want %d, %d (error %v)", cle.Window, cle.Prompt, tc.window, tc.prompt, err)
			}
			if tc.fault == nil && srv.ContextRefusals() != 1 {
				t.Errorf("%d refusals recorded; want 1", srv.ContextRefusals())
			}
			if len(srv.Requests()) != 1 {
				t.Errorf("%d requests; a refusal is not retried", len(srv.Requests()))
			}
		})
	}
	// Other 400s are not context-length errors.
	srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "hi"}}})
	defer srv.Close()
	srv.Inject(llmtest.Fault{Status: 400, Message: "messages: tool_call_id is missing"})
	if _, err := newClient(t, fast(srv.URL())).Stream(t.Context(), userReq("x")); err == nil || errors.Is(err, agentcore.ErrContextLength) {
		t.Errorf("error %v; want a plain 400", err)
	}
}

// The window is the configured one, else vLLM's max_model_len of the
// model or llama.cpp's n_ctx (not the training context its /v1/models
// names), read once per endpoint and model; the reply's share is
// max_tokens.
func TestContextWindowDiscovery(t *testing.T) {
	for _, tc := range []struct {
		dialect string
		want    int
	}{{llmtest.DialectVLLM, 12000}, {llmtest.DialectLlamaCpp, 8192}} {
		t.Run(tc.dialect, func(t *testing.T) {
			srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "hi"}}}, llmtest.Options{ContextWindow: tc.want, Dialect: tc.dialect, Model: "m-" + tc.dialect})
			if err != nil {
				t.Fatal(err)
			}
			cfg := fast(srv.URL())
			cfg.Model = "m-" + tc.dialect
			mt := 1000
			cfg.Sampling.MaxTokens = &mt
			cw, err := newClient(t, cfg).ContextWindow(t.Context())
			if err != nil || cw.Tokens != tc.want || cw.Reply != 1000 || cw.Model == "" {
				t.Fatalf("window %+v, %v; want %d tokens, 1000 for the reply", cw, err, tc.want)
			}
			// Cached: a new client of the same endpoint and model does not
			// ask the (now closed) endpoint again.
			srv.Close()
			if cw, err := newClient(t, cfg).ContextWindow(t.Context()); err != nil || cw.Tokens != tc.want {
				t.Errorf("second client: %+v, %v; want the cached %d", cw, err, tc.want)
			}
			cfg.ContextWindow = 4096
			if cw, err := newClient(t, cfg).ContextWindow(t.Context()); err != nil || cw.Tokens != 4096 {
				t.Errorf("configured: %+v, %v; want 4096", cw, err)
			}
		})
	}
	t.Run("not reported", func(t *testing.T) {
		srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "hi"}}})
		defer srv.Close()
		cfg := fast(srv.URL())
		cfg.Model = "llmtest"
		if cw, err := newClient(t, cfg).ContextWindow(t.Context()); err != nil || cw.Tokens != 0 {
			t.Errorf("%+v, %v; want 0 tokens (unknown) and no error", cw, err)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		// An endless /v1/models answer is not read to its end.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"data":[{"id":"x","max_model_len":1000,"pad":"`))
			pad := []byte(strings.Repeat("x", 64<<10))
			for range 64 {
				if _, err := w.Write(pad); err != nil {
					return
				}
			}
		}))
		defer srv.Close()
		cfg := fast(srv.URL + "/v1")
		cfg.Model = "x"
		cw, err := newClient(t, cfg).ContextWindow(t.Context())
		if !errors.Is(err, llm.ErrTooLarge) || cw.Tokens != 0 {
			t.Errorf("%+v, %v; want ErrTooLarge and no window", cw, err)
		}
	})
}
