package llm_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/integrations/llm"
)

// Each sampling setting reaches the endpoint exactly as configured, 0
// included (go-openai alone drops it), and an unset one not at all.
func TestSamplingSentExactly(t *testing.T) {
	zero, one, seven, tokens := 0.0, 1.0, 0.7, 64
	for _, tc := range []struct {
		name string
		s    llm.Sampling
		want map[string]string // JSON of each key; "" absent
	}{
		{"unset", llm.Sampling{}, map[string]string{"temperature": "", "top_p": "", "max_tokens": "", "stop": ""}},
		{"zeros", llm.Sampling{Temperature: &zero, MaxTokens: &tokens}, map[string]string{"temperature": "0", "top_p": "", "max_tokens": "64", "stop": ""}},
		{"all", llm.Sampling{Temperature: &seven, TopP: &one, MaxTokens: &tokens, Stop: []string{"\n\n", "END"}},
			map[string]string{"temperature": "0.7", "top_p": "1", "max_tokens": "64", "stop": `["\n\n","END"]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "ok"}}})
			defer srv.Close()
			cfg := fast(srv.URL())
			cfg.Sampling = tc.s
			s, err := newClient(t, cfg).Stream(t.Context(), agentcore.Request{Messages: []agentcore.Message{{Role: agentcore.RoleUser, Content: "hi"}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := read(t, s); err != nil {
				t.Fatal(err)
			}
			var body map[string]json.RawMessage
			if b := srv.Bodies(); len(b) != 1 || json.Unmarshal(b[0], &body) != nil {
				t.Fatalf("bodies %s", b)
			}
			for k, want := range tc.want {
				got, ok := body[k]
				if want == "" && ok || want != "" && string(got) != want {
					t.Errorf("%s = %s (present %v); want %q", k, got, ok, want)
				}
			}
			if got := string(body["stream_options"]); got != `{"include_usage":true}` {
				t.Errorf("stream_options = %s; want include_usage true", got)
			}
		})
	}
}

func TestSamplingOutOfRange(t *testing.T) {
	neg, high, zero, big := -0.5, 2.01, 0.0, 1.5
	none := 0
	for _, tc := range []struct {
		s   llm.Sampling
		key string
	}{
		{llm.Sampling{Temperature: &neg}, "llm.temperature"},
		{llm.Sampling{Temperature: &high}, "llm.temperature"},
		{llm.Sampling{TopP: &zero}, "llm.top_p"},
		{llm.Sampling{TopP: &big}, "llm.top_p"},
		{llm.Sampling{MaxTokens: &none}, "llm.max_tokens"},
		{llm.Sampling{Stop: []string{"a", ""}}, "llm.stop[1]"},
		{llm.Sampling{Stop: strings.Fields(strings.Repeat("s ", 17))}, "llm.stop"},
	} {
		cfg := fast("http://127.0.0.1:1/v1")
		cfg.Sampling = tc.s
		if _, err := llm.New(cfg); !errors.Is(err, llm.ErrConfig) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("New(%+v): %v; want ErrConfig naming %s", tc.s, err, tc.key)
		}
	}
}

// The endpoint's usage report (vLLM's last chunk, empty choices) becomes
// the stream's Usage with its numbers; without one the Usage says it was
// not reported.
func TestStreamUsage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault llmtest.Fault
		want  agentcore.Usage
	}{
		// The scripted server: a token per word and per message; a token
		// per streamed piece of 4 runes.
		{"reported", llmtest.Fault{}, agentcore.Usage{Model: "test-model", PromptTokens: 3, CompletionTokens: 3, Reported: true}},
		{"not reported", llmtest.Fault{NoUsage: true}, agentcore.Usage{Model: "test-model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "Done here."}}})
			defer srv.Close()
			srv.Inject(tc.fault)
			s, err := newClient(t, fast(srv.URL())).Stream(t.Context(), agentcore.Request{Messages: []agentcore.Message{{Role: agentcore.RoleUser, Content: "hello there"}}})
			if err != nil {
				t.Fatal(err)
			}
			r, u, err := readUsage(t, s)
			if err != nil || strings.Join(r.texts, "") != "Done here." {
				t.Fatalf("reply %+v, %v", r, err)
			}
			if u == nil || *u != tc.want {
				t.Errorf("usage %+v; want %+v", u, tc.want)
			}
		})
	}
}

// llm.extra_body's members reach every chat request exactly as
// configured, a profile's replacing the server's of the same name, and
// the client's own members stay the client's.
func TestExtraBodySent(t *testing.T) {
	var server, profile llm.Sampling
	if err := yaml.Unmarshal([]byte(`
temperature: 0.2
extra_body:
  chat_template_kwargs: {enable_thinking: false}
  top_k: 20
  repetition_penalty: 1.05
  seed: 9007199254740993
  guided_choice: ["a", "b"]
`), &server); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"extra_body": {"top_k": 40, "cache_prompt": true}}`), &profile); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    llm.Sampling
		want map[string]string
	}{
		{"server", server, map[string]string{"chat_template_kwargs": `{"enable_thinking":false}`, "top_k": "20", "repetition_penalty": "1.05",
			"seed": "9007199254740993", "guided_choice": `["a","b"]`, "temperature": "0.2", "cache_prompt": ""}},
		{"profile over server", server.Over(profile), map[string]string{"chat_template_kwargs": `{"enable_thinking":false}`, "top_k": "40",
			"repetition_penalty": "1.05", "seed": "9007199254740993", "guided_choice": `["a","b"]`, "temperature": "0.2", "cache_prompt": "true"}},
		{"none", llm.Sampling{}, map[string]string{"chat_template_kwargs": "", "top_k": "", "cache_prompt": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := llmtest.NewServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "one"}, {Text: "two"}}})
			defer srv.Close()
			cfg := fast(srv.URL())
			cfg.Sampling = tc.s
			c := newClient(t, cfg)
			for range 2 {
				s, err := c.Stream(t.Context(), agentcore.Request{Messages: []agentcore.Message{{Role: agentcore.RoleUser, Content: "hi"}}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := read(t, s); err != nil {
					t.Fatal(err)
				}
			}
			bodies := srv.Bodies()
			if len(bodies) != 2 {
				t.Fatalf("%d requests, want 2", len(bodies))
			}
			for i, b := range bodies {
				var body map[string]json.RawMessage
				if err := json.Unmarshal(b, &body); err != nil {
					t.Fatal(err)
				}
				for k, want := range tc.want {
					got, ok := body[k]
					if want == "" && ok || want != "" && string(got) != want {
						t.Errorf("request %d: %s = %s (present %v); want %q", i, k, got, ok, want)
					}
				}
				if string(body["model"]) != `"test-model"` || string(body["stream"]) != "true" || string(body["stream_options"]) != `{"include_usage":true}` {
					t.Errorf("request %d: model %s, stream %s, stream_options %s", i, body["model"], body["stream"], body["stream_options"])
				}
			}
		})
	}
}

// An extra_body that is not an object, sets a member the client writes,
// or is too large is refused at load, naming what is wrong.
func TestExtraBodyRefused(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"extra_body: 5", "llm.extra_body must be a mapping"},
		{"extra_body: [a]", "llm.extra_body must be a mapping"},
		{"extra_body: {model: other}", `llm.extra_body must not set "model"`},
		{"extra_body: {messages: []}", `llm.extra_body must not set "messages"`},
		{"extra_body: {tools: []}", `llm.extra_body must not set "tools"`},
		{"extra_body: {stream: false}", `llm.extra_body must not set "stream"`},
		{"extra_body: {stream_options: {include_usage: false}}", `llm.extra_body must not set "stream_options"`},
		{"extra_body: {temperature: 1}", `llm.extra_body must not set "temperature": set llm.temperature instead`},
		{"extra_body: {a: {1: x}}", "llm.extra_body.a is not JSON"},
		{"extra_body: {big: " + strings.Repeat("x", 17<<10) + "}", "llm.extra_body is 17"},
	} {
		var s llm.Sampling
		err := yaml.Unmarshal([]byte(tc.yaml), &s)
		if err == nil {
			cfg := fast("http://127.0.0.1:1/v1")
			cfg.Sampling = s
			_, err = llm.New(cfg)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60s: %v; want an error containing %q", tc.yaml, err, tc.want)
		}
	}
	for _, in := range []string{`{"extra_body": 5}`, `{"extra_body": "x"}`, `{"extra_body": [1]}`} {
		var s llm.Sampling
		if err := json.Unmarshal([]byte(in), &s); err == nil || !strings.Contains(err.Error(), "llm.extra_body must be a JSON object") {
			t.Errorf("%s: %v", in, err)
		}
	}
}
