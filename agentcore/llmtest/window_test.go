package llmtest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
)

func TestCountTokens(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{
		{"", 0},
		{"word", 1},
		{"words", 2},
		{"func (e *Engine) run() {\n", 1 + 1 + 2 + 2 + 1 + 1},
	} {
		if got := countText(tc.text); got != tc.want {
			t.Errorf("countText(%q) = %d; want %d", tc.text, got, tc.want)
		}
	}
	req := agentcore.Request{Messages: []agentcore.Message{user("word word")}}
	if got := CountTokens(req); got != 4+1+2 {
		t.Errorf("CountTokens of one message = %d; want 7 (4 for the template, 1 for the role, 2 words)", got)
	}
}

// A Server with a ContextWindow answers in range with usage counted by
// CountTokens, reports its window where its dialect does, and a Script's
// Reply answers whatever the history holds.
func TestServerContextWindow(t *testing.T) {
	s := &Script{Reply: func(req agentcore.Request) (Step, error) {
		return Step{Text: "n=" + strings.Repeat("i", len(req.Messages))}, nil
	}}
	srv, err := StartServer(s, Options{ContextWindow: 1000, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	post := func(content string) (int, []byte) {
		body, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": content}}})
		res, err := http.Post(srv.URL()+"/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(res.Body)
		return res.StatusCode, b.Bytes()
	}
	status, body := post("hello")
	var c wireCompletion
	if json.Unmarshal(body, &c); status != 200 || *c.Choices[0].Message.Content != "n=i" || c.Usage.PromptTokens != 7 {
		t.Fatalf("in range: %d %s; want the Reply's text and 7 prompt tokens", status, body)
	}
	status, body = post(strings.Repeat("word ", 1000))
	if status != 400 || !strings.Contains(string(body), "maximum context length is 1000 tokens") || srv.ContextRefusals() != 1 {
		t.Fatalf("over the window: %d %s", status, body)
	}
	if got := srv.PromptTokens(); len(got) != 2 || got[0] != 7 || got[1] != 1005 {
		t.Errorf("PromptTokens %v; want [7 1005]", got)
	}
	res, err := http.Get(srv.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	var models wireModels
	json.NewDecoder(res.Body).Decode(&models)
	res.Body.Close()
	if len(models.Data) != 1 || models.Data[0].MaxModelLen != 1000 {
		t.Errorf("models %+v; want max_model_len 1000", models)
	}
	if res, err := http.Get(strings.TrimSuffix(srv.URL(), "/v1") + "/props"); err != nil || res.StatusCode != 404 {
		t.Errorf("vLLM serves no /props: %v %v", res.StatusCode, err)
	}
}
