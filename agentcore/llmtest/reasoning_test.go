package llmtest

import (
	"encoding/json"
	"strings"
	"testing"
)

// A Step's Reasoning streams as vLLM's reasoning parsers stream it: in
// the configured field, in small pieces, without content, before the
// text; a whole completion carries it in its message.
func TestServerReasoning(t *testing.T) {
	script := &Script{Steps: []Step{{Reasoning: "Think first, then answer.", Text: "Answer."}}}
	for _, field := range []string{"", "reasoning_content", "reasoning"} {
		srv, err := StartServer(script, Options{ReasoningField: field})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		if field == "" {
			field = "reasoning_content"
		}
		chunks, done := readSSE(t, post(t, srv.URL()+"/chat/completions", "", chatBody(true, msg("user", "go"))).Body)
		var reasoning, text strings.Builder
		order := ""
		for _, c := range chunks {
			if len(c.Choices) == 0 {
				continue
			}
			d := c.Choices[0].Delta
			r := d.ReasoningContent
			if field == "reasoning" {
				r = d.Reasoning
				if d.ReasoningContent != "" {
					t.Errorf("%s: a delta in both fields: %+v", field, d)
				}
			} else if d.Reasoning != "" {
				t.Errorf("%s: a delta in both fields: %+v", field, d)
			}
			if r != "" {
				if d.Content != nil {
					t.Errorf("%s: a reasoning delta with content %q", field, *d.Content)
				}
				reasoning.WriteString(r)
				order += "r"
			}
			if d.Content != nil && *d.Content != "" {
				text.WriteString(*d.Content)
				order += "t"
			}
		}
		if !done || reasoning.String() != "Think first, then answer." || text.String() != "Answer." || !strings.HasPrefix(order, "rrr") || strings.Contains(order, "tr") {
			t.Errorf("%s: reasoning %q, text %q, order %s", field, reasoning.String(), text.String(), order)
		}

		var c struct {
			Choices []struct {
				Message map[string]json.RawMessage `json:"message"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(post(t, srv.URL()+"/chat/completions", "", chatBody(false, msg("user", "go"))).Body).Decode(&c); err != nil || len(c.Choices) != 1 {
			t.Fatalf("%s: %v", field, err)
		}
		if got := string(c.Choices[0].Message[field]); got != `"Think first, then answer."` {
			t.Errorf("%s: the completion's message %v", field, c.Choices[0].Message)
		}
	}
	if _, err := StartServer(script, Options{ReasoningField: "thinking"}); err == nil {
		t.Error("an unknown ReasoningField was accepted")
	}
}
