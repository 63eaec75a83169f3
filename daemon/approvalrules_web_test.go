package daemon_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/store"
)

// The approval card's "always allow commands like this" names the exact
// prefix it adds; clicking it adds the rule and runs the command, and
// the next command like it runs without a card, said so in the
// transcript with its rule.
func TestWebApprovalRule(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, llm(t,
		shellCall("touch first.txt"),
		llmtest.Step{Expect: "exit status 0", ToolCalls: shellCall("touch second.txt").ToolCalls},
		llmtest.Step{Expect: "exit status 0", Text: "Both made."},
	)+"sandbox:\n  user_rules:\n    - prefix: [touch]\n")
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	w := newWebUI(t, p.URL)
	w.signIn("alice", pw)
	w.open("/c/"+conv, "document.getElementById('message')")
	w.fill("#message", "make two files")
	w.click("#send")
	w.until("document.querySelector('.approval .allow-rule')", 60*time.Second)
	if got := eval[string](w, "document.querySelector('.approval .allow-rule').textContent"); got != "Always allow commands like this: touch …" {
		t.Fatalf("the button says %q", got)
	}
	w.checkPage("approval-rule", "document.querySelector('.approval .allow-rule')", "")
	w.click(".approval .allow-rule")
	w.until(transcriptText+".includes('Both made.') && document.getElementById('turn-state').textContent === ''", 60*time.Second)
	if n := eval[int](w, "document.querySelectorAll('.approval').length"); n != 0 {
		t.Errorf("%d approval cards left", n)
	}
	auto := eval[string](w, "[...document.querySelectorAll('.auto-approved')].map(e => e.textContent).join('\\n')")
	if !strings.Contains(auto, "touch second.txt") || !strings.Contains(auto, `prefix "touch"`) || strings.Contains(auto, "first.txt") {
		t.Errorf("the transcript says of auto-approved commands: %q", auto)
	}
	var list struct{ Rules []store.UserRule }
	a.must(http.StatusOK, "GET", "/api/v1/me/approval-rules", nil, &list)
	if len(list.Rules) != 1 || strings.Join(list.Rules[0].Rule.Prefix, " ") != "touch" {
		t.Fatalf("alice's rules: %+v", list.Rules)
	}
	diff := string(a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/diff", nil, nil))
	if !strings.Contains(diff, "first.txt") || !strings.Contains(diff, "second.txt") {
		t.Fatalf("diff:\n%s", diff)
	}
}
