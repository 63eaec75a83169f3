package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// What local models emit, through the server and in the web UI: a
// reasoning model's thinking shown collapsed before its answer; a turn
// stopped by a repeated call or by llm.max_steps says why on the page;
// a model profile's tool_calls: text reaches the endpoint as a request
// without a tools field, and a misspelt mode is refused.
func TestLocalModelOutputInTheWebUI(t *testing.T) {
	needSandbox(t)
	list := func(args string) llmtest.Step {
		return llmtest.Step{ToolCalls: []agentcore.ToolCall{{Name: "list_files", Arguments: args}}}
	}
	script := &llmtest.Script{
		Steps: []llmtest.Step{{Reasoning: "The user says hello. I will greet them back, briefly.", Text: "Hello **there**."}},
		Branches: []llmtest.Branch{
			{Match: "loop please", Steps: []llmtest.Step{list(`{"path":"."}`), list(`{"path":"."}`), list(`{"path":"."}`), {Text: "never"}}},
			{Match: "steps please", Steps: []llmtest.Step{list(`{"path":"."}`), list(`{"path":"a"}`), list(`{"path":"b"}`), {Text: "never"}}},
			{Match: "text calls please", Steps: []llmtest.Step{{Text: "Fine."}}},
		},
	}
	srv, err := llmtest.StartServer(script, llmtest.Options{ReasoningField: "reasoning"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %[1]s\n  model: test\n  allowed_endpoints: [%[1]s]\n  max_steps: 3\n", srv.URL()))
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)

	// A profile's tool call mode: checked when stored, then used.
	if status, b, _ := a.do("PUT", "/api/v1/model-profiles/local", map[string]any{"endpoint": srv.URL(), "model": "qwen", "tool_calls": "txt"}); status != http.StatusBadRequest || !strings.Contains(string(b), "tool_calls") {
		t.Errorf("PUT with tool_calls txt: %d %s; want 400 naming tool_calls", status, b)
	}
	w := newWebUI(t, p.URL)
	w.signIn("alice", pw)
	// Set on the profiles page.
	w.open("/profiles", "document.querySelector('#profile-endpoint option')")
	w.fill("#profile-name", "local")
	w.fill("#profile-model", "qwen")
	eval[chromedp.Void](w, "document.getElementById('profile-tool-calls').value = 'text'")
	w.click("#profile-form button[type=submit]")
	w.until("document.getElementById('profiles').innerText.includes('qwen at "+srv.URL()+", tool calls: text')", 20*time.Second)
	w.checkPage("profiles-tool-calls", "document.querySelector('#profiles li')", "")
	var prof struct {
		ToolCalls string `json:"tool_calls"`
	}
	a.must(http.StatusOK, "GET", "/api/v1/model-profiles/local", nil, &prof)
	if prof.ToolCalls != "text" {
		t.Errorf("the stored profile's tool_calls is %q", prof.ToolCalls)
	}
	var tc struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]any{"model_profile": "local"}, &tc)
	s := a.follow(tc.ID, "")
	a.send(tc.ID, "text calls please")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	s.close()
	bodies := srv.Bodies()
	var body struct {
		Tools    json.RawMessage
		Messages []struct{ Role, Content string }
	}
	json.Unmarshal(bodies[len(bodies)-1], &body)
	if body.Tools != nil || len(body.Messages) == 0 || !strings.Contains(body.Messages[0].Content, "<tools>") {
		t.Errorf("a text-mode profile's request has a tools field, or no tools in its system prompt:\n%.2000s", bodies[len(bodies)-1])
	}

	var conv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]any{"title": "Thinking"}, &conv)
	w.open("/c/"+conv.ID, "window.codumentor && codumentor.opens > 0")
	a.send(conv.ID, "hello")
	w.until("document.querySelector('details.reasoning') && document.querySelector('.msg.assistant strong') && document.getElementById('turn-state').textContent === ''", 60*time.Second)
	if open := eval[bool](w, "document.querySelector('details.reasoning').open"); open {
		t.Error("the reasoning is shown expanded")
	}
	if got := eval[string](w, "document.querySelector('details.reasoning summary').textContent"); got != "Reasoning" {
		t.Errorf("the reasoning's summary says %q", got)
	}
	if got := eval[string](w, "document.querySelector('details.reasoning .reasoning-text').textContent"); got != "The user says hello. I will greet them back, briefly." {
		t.Errorf("the reasoning holds %q", got)
	}
	// It comes before the answer, and the answer does not hold it.
	if !eval[bool](w, "!!(document.querySelector('details.reasoning').compareDocumentPosition(document.querySelector('.msg.assistant')) & Node.DOCUMENT_POSITION_FOLLOWING)") ||
		strings.Contains(eval[string](w, "document.querySelector('.msg.assistant').textContent"), "greet them") {
		t.Error("the reasoning is not a section of its own before the answer")
	}
	w.click("details.reasoning summary")
	w.until("document.querySelector('details.reasoning').open", 5*time.Second)
	w.checkPage("reasoning", "document.querySelector('details.reasoning')", "")

	// Why a turn stopped is on the page, also after a reload.
	for _, c := range []struct{ message, says string }{
		{"loop please", "Stopped: the model called list_files with the same arguments 3 times in a row"},
		{"steps please", "Stopped after 3 model calls"},
	} {
		var conv struct{ ID string }
		a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]any{"title": c.message}, &conv)
		w.open("/c/"+conv.ID, "window.codumentor && codumentor.opens > 0")
		a.send(conv.ID, c.message)
		shown := fmt.Sprintf("document.querySelector('.notice.stopped') && document.querySelector('.notice.stopped').textContent.includes(%q) && document.getElementById('turn-state').textContent === ''", c.says)
		w.until(shown, 60*time.Second)
		w.checkPage("stopped", shown, "")
		w.open("/c/"+conv.ID, "window.codumentor && codumentor.opens > 0 && "+shown)
	}
}
