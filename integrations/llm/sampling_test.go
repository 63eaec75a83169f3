package llm_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

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
