package agentcore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// Config.Model picks each turn's model by conversation; when it fails,
// the turn fails with its error and the default model is not asked.
func TestConfigModel(t *testing.T) {
	chosen := &recLLM{llm: (&llmtest.Script{Steps: []llmtest.Step{{Text: "from the profile"}}}).LLM()}
	var asked []string
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{{Text: "from the default"}}}, func(c *agentcore.Config) {
		c.Model = func(ctx context.Context, user, conv string) (agentcore.LLM, error) {
			asked = append(asked, user+"/"+conv)
			switch conv {
			case "profile":
				return chosen, nil
			case "gone":
				return nil, errors.New(`model profile "p" no longer exists`)
			}
			return nil, nil
		}
	})
	if err := h.wait(h.start("profile", "hi")); err != nil {
		t.Fatal(err)
	}
	if got := reply(h, "profile"); got != "from the profile" || len(chosen.requests()) != 1 || len(h.llm.requests()) != 0 {
		t.Errorf("profile conversation: reply %q, %d requests to the chosen model, %d to the default", got, len(chosen.requests()), len(h.llm.requests()))
	}
	err := h.wait(h.start("gone", "hi"))
	if err == nil || !strings.Contains(err.Error(), `model: model profile "p" no longer exists`) {
		t.Errorf("turn with a failing Model: %v", err)
	}
	if ev := h.event("gone", agentcore.EventTurnFailed); !strings.Contains(string(ev.Data), `model profile \"p\" no longer exists`) {
		t.Errorf("turn_failed: %s", ev.Data)
	}
	if n := len(h.llm.requests()) + len(chosen.requests()); n != 1 {
		t.Errorf("a failed choice still asked a model: %d requests in all", n)
	}
	if err := h.wait(h.start("plain", "hi")); err != nil {
		t.Fatal(err)
	}
	if got := reply(h, "plain"); got != "from the default" || len(h.llm.requests()) != 1 {
		t.Errorf("nil from Model: reply %q, %d requests to the default", got, len(h.llm.requests()))
	}
	if strings.Join(asked, " ") != "alice/profile alice/gone alice/plain" {
		t.Errorf("Model asked for %v", asked)
	}
}

// reply is the content of conv's last assistant message.
func reply(h *harness, conv string) string {
	msgs, _ := h.store.Messages(context.Background(), conv)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == agentcore.RoleAssistant {
			return msgs[i].Content
		}
	}
	return ""
}
