package daemon_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// The admin page shows the system prompt template and its rendering,
// readable by axe at both sizes; a user who is not an admin gets the
// page's refusal.
func TestWebSystemPromptPage(t *testing.T) {
	srv, err := llmtest.StartServer(&llmtest.Script{}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %[1]s\n  model: test\n  allowed_endpoints: [%[1]s]\nplugins:\n  - workspace_isolation\nsandbox:\n  approval_rules:\n    - command: \"make check\"\n", srv.URL()))
	in.addUser("alice", pw, false)
	in.addUser("root", pw, true)
	p := in.start()
	w := newWebUI(t, p.URL)

	w.signIn("alice", pw)
	// A profile's own template: a bad one is refused, naming the problem.
	w.open("/profiles", "document.querySelector('#profile-endpoint option')")
	w.fill("#profile-name", "own")
	w.fill("#profile-model", "m")
	w.fill("#profile-prompt", "{{.Repo}}")
	w.click("#profile-form button[type=submit]")
	w.until("document.getElementById('status').textContent.includes('system_prompt')", 20*time.Second)
	if st := eval[string](w, "document.getElementById('status').textContent"); !strings.Contains(st, "can't evaluate field Repo") {
		t.Errorf("saving a bad template says %q", st)
	}
	w.fill("#profile-prompt", "Own prompt for {{.Repository}}.")
	w.click("#profile-form button[type=submit]")
	w.until("document.getElementById('profiles').innerText.includes('its own system prompt')", 20*time.Second)
	w.checkPage("profiles-prompt", "document.querySelector('#profiles li')", "")
	w.open("/admin/system-prompt", "document.querySelector('h1')")
	if h := eval[string](w, "document.querySelector('h1').textContent"); h != "Not allowed" || eval[bool](w, "!!document.getElementById('prompt-rendered')") {
		t.Errorf("alice's /admin/system-prompt: heading %q; want the refusal, without the prompt", h)
	}
	w.open("/", "document.getElementById('signout')")
	w.click("#signout")
	w.until("location.pathname === '/login'", 20*time.Second)

	w.signIn("root", pw)
	w.open("/admin/users", "document.querySelector('nav[aria-label=Admin] a[href=\"/admin/system-prompt\"]')")
	w.click("nav[aria-label=Admin] a[href=\"/admin/system-prompt\"]")
	ready := "document.getElementById('prompt-rendered') && document.getElementById('prompt-rendered').textContent !== ''"
	w.until(ready, 20*time.Second)
	rendered := eval[string](w, "document.getElementById('prompt-rendered').textContent")
	for _, want := range []string{"example/project", "/workspace", "shell, shell_kill, shell_output", "make check", time.Now().UTC().Format(time.DateOnly)[:7]} {
		if !strings.Contains(rendered, want) {
			t.Errorf("the rendered prompt lacks %q:\n%s", want, rendered)
		}
	}
	if got := eval[string](w, "document.getElementById('prompt-template').textContent"); got != agentcore.DefaultPrompt() {
		t.Errorf("the page's template is not the built-in one:\n%s", got)
	}
	if s := eval[string](w, "document.getElementById('prompt-source').textContent"); !strings.Contains(s, "built-in") {
		t.Errorf("the page names the source %q; want built-in", s)
	}
	w.checkPage("sysprompt", ready, "")
	if pr := w.seen(&w.problems); len(pr) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(pr, "\n"))
	}
}
