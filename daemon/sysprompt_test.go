package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// What the model gets with every request, as the endpoint receives it:
// a system message first that names the repository, its commit, the
// tools, the approval policy and the network; exactly the configured
// sampling settings (a model profile's replacing the server's, unset
// ones absent); and a usage event per model call with the endpoint's
// numbers, or an estimate marked reported:false when it sent none.
func TestModelRequestsCarryPromptSamplingAndUsage(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("one\n"), 0o644)
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "one")
	commit := gitCmd(t, work, "rev-parse", "HEAD")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)

	srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "Done here."}}}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	in := newInstance(t, fmt.Sprintf(`llm:
  base_url: %[1]s
  model: test
  allowed_endpoints: [%[1]s]
  temperature: 0
  max_tokens: 512
  stop: ["</done>"]
  extra_body: {chat_template_kwargs: {enable_thinking: false}, top_k: 20}
sandbox:
  approval_rules:
    - command: "make check"
    - prefix: [go, test]
      except: [-exec]
`, srv.URL()))
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)
	var repo struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "demo-repo", "url": "file://" + bare, "branch": "main"}, &repo)
	var sync struct{ Job struct{ ID string } }
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	waitJobDone(t, admin, sync.Job.ID)

	// turn runs one turn in a new conversation (of body) and returns its
	// usage event and the request and body the endpoint received.
	turn := func(body map[string]any) (agentcore.Usage, agentcore.Request, map[string]json.RawMessage) {
		t.Helper()
		before := len(srv.Requests())
		var conv struct{ ID string }
		a.must(http.StatusCreated, "POST", "/api/v1/conversations", body, &conv)
		s := a.follow(conv.ID, "")
		defer s.close()
		a.send(conv.ID, "hello there")
		var usage []agentcore.Usage
		for _, ev := range s.until(agentcore.EventTurnFinished, 60*time.Second) {
			if ev.Type == agentcore.EventUsage {
				var u agentcore.Usage
				if err := json.Unmarshal(eventData(t, ev), &u); err != nil {
					t.Fatal(err)
				}
				usage = append(usage, u)
			}
		}
		reqs, bodies := srv.Requests(), srv.Bodies()
		if len(reqs) != before+1 || len(usage) != 1 {
			t.Fatalf("%d model requests, %d usage events; want one each", len(reqs)-before, len(usage))
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(bodies[before], &fields); err != nil {
			t.Fatal(err)
		}
		return usage[0], reqs[before], fields
	}

	u, req, body := turn(map[string]any{"repository": repo.ID})
	if len(req.Messages) != 2 || req.Messages[0].Role != agentcore.RoleSystem || req.Messages[1].Content != "hello there" {
		t.Fatalf("messages %+v; want the system message, then the user's", req.Messages)
	}
	sys := req.Messages[0].Content
	for _, want := range []string{"demo-repo", "at commit " + commit, "/workspace", "shell, shell_kill, shell_output", "waits for the user's approval", "These run without asking", "make check; go test … (not -exec)", "no network access", time.Now().UTC().Format(time.DateOnly)[:7]} {
		if !strings.Contains(sys, want) {
			t.Errorf("the system message lacks %q:\n%s", want, sys)
		}
	}
	sampling := map[string]string{"temperature": "0", "max_tokens": "512", "stop": `["</done>"]`, "top_p": "",
		"chat_template_kwargs": `{"enable_thinking":false}`, "top_k": "20"}
	check := func(body map[string]json.RawMessage, want map[string]string) {
		t.Helper()
		for k, v := range want {
			got, ok := body[k]
			if v == "" {
				if ok {
					t.Errorf("request %s = %s; want it absent (unset)", k, got)
				}
				continue
			}
			var g, w any
			json.Unmarshal(got, &g)
			json.Unmarshal([]byte(v), &w)
			if !reflect.DeepEqual(g, w) || !ok {
				t.Errorf("request %s = %s; want %s", k, got, v)
			}
		}
		if got := string(body["stream_options"]); got != `{"include_usage":true}` {
			t.Errorf("stream_options = %s; want include_usage", got)
		}
	}
	check(body, sampling)
	// The admin route shows the built-in template in effect.
	var shown struct{ Source, Template, Rendered string }
	admin.must(http.StatusOK, "GET", "/api/v1/admin/system-prompt", nil, &shown)
	if shown.Source != "built-in" || shown.Template != agentcore.DefaultPrompt() || !strings.Contains(shown.Rendered, "make check; go test … (not -exec)") {
		t.Errorf("GET /admin/system-prompt: %+v; want the built-in template, rendered with the approval rules", shown)
	}
	// The scripted server's numbers: a token per word and message, a
	// token per streamed piece.
	if want := (agentcore.Usage{Model: "test", PromptTokens: promptWords(req), CompletionTokens: 3, Reported: true}); u != want {
		t.Errorf("usage %+v; want %+v", u, want)
	}

	// A profile's settings replace the server's; a wrong one is refused,
	// naming it.
	if status, b, _ := a.do("PUT", "/api/v1/model-profiles/hot", map[string]any{"endpoint": srv.URL(), "model": "other", "temperature": 2.5}); status != http.StatusBadRequest || !strings.Contains(string(b), "temperature must be 0 to 2") {
		t.Errorf("PUT with temperature 2.5: %d %s; want 400 naming temperature", status, b)
	}
	if status, b, _ := a.do("PUT", "/api/v1/model-profiles/hot", map[string]any{"endpoint": srv.URL(), "model": "other", "extra_body": map[string]any{"stream": false}}); status != http.StatusBadRequest || !strings.Contains(string(b), `extra_body must not set \"stream\"`) {
		t.Errorf("PUT with extra_body.stream: %d %s; want 400 naming extra_body", status, b)
	}
	// A profile's own system prompt is checked as the server's is.
	for _, tc := range []struct{ prompt, want string }{
		{"{{if .Approval}}unclosed", "system_prompt:"},
		{"{{.Repo}}", "can't evaluate field Repo"},
		{"{{shout .Repository}}", `function \"shout\" not defined`},
		{strings.Repeat("x", 32<<10+1), "system_prompt is 32769 bytes; the limit is 32768"},
		{"{{range .Tools}}{{range $.Tools}}{{end}}{{end}}", "could be too costly to render: a range inside a range"},
		{`{{printf "%099999d" 1}}`, "the function printf is not allowed"},
	} {
		if status, b, _ := a.do("PUT", "/api/v1/model-profiles/hot", map[string]any{"endpoint": srv.URL(), "model": "other", "system_prompt": tc.prompt}); status != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("PUT with system_prompt %.40q: %d %.300s; want 400 naming %q", tc.prompt, status, b, tc.want)
		}
	}
	profilePrompt := `Profile prompt for {{if .Repository}}{{.Repository}}{{else}}a workspace that starts empty (no repository){{end}}; tools {{join .Tools ","}}.`
	var view struct {
		SystemPrompt string `json:"system_prompt"`
	}
	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/hot", map[string]any{"endpoint": srv.URL(), "model": "other", "temperature": 0.7, "top_p": 0.95, "extra_body": map[string]any{"top_k": 40}, "tool_calls": "auto", "system_prompt": profilePrompt}, &view)
	if view.SystemPrompt != profilePrompt {
		t.Errorf("PUT answered system_prompt %q; want %q", view.SystemPrompt, profilePrompt)
	}
	srv.Inject(llmtest.Fault{NoUsage: true}) // an endpoint that ignores include_usage
	u, req, body = turn(map[string]any{"model_profile": "hot"})
	check(body, map[string]string{"temperature": "0.7", "top_p": "0.95", "max_tokens": "512", "stop": `["</done>"]`,
		"chat_template_kwargs": `{"enable_thinking":false}`, "top_k": "40"})
	sys = req.Messages[0].Content
	if !strings.HasPrefix(sys, "Profile prompt for a workspace that starts empty (no repository); tools ") || !strings.Contains(sys, ",shell,") || strings.Contains(sys, "demo-repo") {
		t.Errorf("the profile's system message, for an empty workspace:\n%s", sys)
	}
	if u.Reported || u.Model != "other" || u.PromptTokens < len(sys)/3 || u.CompletionTokens != (len("assistant")+len("Done here.")+2)/3 {
		t.Errorf("usage without a report %+v; want reported:false, model other, an estimate of bytes/3", u)
	}
}

// An admin sees the system prompt template in effect and what it renders
// to for an example repository: the engine's tools, the approval rules;
// others may not.
func TestAdminSystemPrompt(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "prompt.tmpl")
	tmpl := "Working on {{.Repository}} at {{.Commit}} in {{.Workspace}}; tools: {{join .Tools \", \"}}.{{if .Approval}} Asked first, except {{join .AutoApproved \" and \"}}.{{end}} Today {{.Date}}."
	if err := os.WriteFile(file, []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	in := newInstance(t, "llm:\n  system_prompt_file: "+file+"\nsandbox:\n  approval_rules:\n    - command: \"make check\"\n")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)
	var got struct {
		Source, Template, Rendered string
		Example                    struct {
			Repository, Commit string
			AutoApproved       []string `json:"auto_approved"`
		}
	}
	admin.must(http.StatusOK, "GET", "/api/v1/admin/system-prompt", nil, &got)
	if got.Source != "llm.system_prompt_file" || got.Template != tmpl {
		t.Errorf("source %q, template %q; want the file's", got.Source, got.Template)
	}
	want := "Working on " + got.Example.Repository + " at " + got.Example.Commit + " in /workspace; tools: "
	if got.Example.Repository == "" || got.Example.Commit == "" || !strings.HasPrefix(got.Rendered, want) {
		t.Errorf("rendered %q; want it to start %q", got.Rendered, want)
	}
	for _, w := range []string{"shell, shell_kill, shell_output", "Asked first, except make check.", "Today " + time.Now().UTC().Format(time.DateOnly)[:7]} {
		if !strings.Contains(got.Rendered, w) {
			t.Errorf("rendered %q lacks %q", got.Rendered, w)
		}
	}
	a.must(http.StatusForbidden, "GET", "/api/v1/admin/system-prompt", nil, nil)
}

// promptWords is the scripted server's prompt token count of req.
func promptWords(req agentcore.Request) int {
	n := 0
	for _, m := range req.Messages {
		n += len(strings.Fields(m.Content)) + 1
	}
	return n
}

// A profile with its own tool call mode and system prompt still has the
// context window its endpoint reports.
func TestProfileSettingsKeepTheEndpointsWindow(t *testing.T) {
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "Done."}}}, llmtest.Options{ContextWindow: 12000, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %[1]s\n  model: test\n  allowed_endpoints: [%[1]s]\n", srv.URL()))
	in.addUser("alice", pw, false)
	a := in.start().login("alice", pw)
	for _, profile := range []map[string]any{
		{"endpoint": srv.URL(), "model": "m"},
		{"endpoint": srv.URL(), "model": "m", "tool_calls": "text", "system_prompt": "Short prompt; tools {{join .Tools \",\"}}."},
	} {
		a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/p", profile, nil)
		var conv struct{ ID string }
		a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]any{"model_profile": "p"}, &conv)
		var cv agentcore.Context
		a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/context", nil, &cv)
		if cv.Window != 12000 {
			t.Errorf("profile %v: context window %d; want the endpoint's 12000", profile, cv.Window)
		}
	}
}
