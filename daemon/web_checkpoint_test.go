package daemon_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// The conversation page's turn and message actions: "Undo changes"
// reverts the turn's workspace changes, Regenerate and Edit branch the
// history, Fork opens the new conversation.
func TestWebCheckpointActions(t *testing.T) {
	needSandbox(t)
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{
		shellCall("echo hi > a.txt"),
		{Expect: "exit status 0", Text: "wrote a.txt"},
	}}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\nsandbox:\n  shell_always_allow: true\n", srv.URL()))
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	defer s.close()
	a.send(conv, "write it")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	upper := filepath.Join(in.dir, "workspaces", "layers", conv, "upper")
	if _, err := os.Stat(filepath.Join(upper, "a.txt")); err != nil {
		t.Fatalf("the turn wrote no a.txt: %v", err)
	}

	w := newWebUI(t, p.URL)
	w.signIn("alice", pw)
	w.open("/c/"+conv, "document.querySelector('button.undo') && document.querySelector('.msg.user button.regenerate')")

	w.click("button.undo")
	s.until(agentcore.EventWorkspaceReverted, 30*time.Second)
	w.until("document.getElementById('transcript').innerText.includes('went back to where an earlier turn began')", 20*time.Second)
	if _, err := os.Lstat(filepath.Join(upper, "a.txt")); err == nil {
		t.Fatal("a.txt is still there after Undo changes")
	}

	w.click(".msg.user button.regenerate")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	if _, err := os.Stat(filepath.Join(upper, "a.txt")); err != nil {
		t.Fatalf("the regenerated turn wrote no a.txt: %v", err)
	}

	w.until("document.querySelectorAll('.msg.user button.edit').length === 2", 20*time.Second)
	eval[bool](w, "document.querySelectorAll('.msg.user button.edit')[1].click() || true")
	w.until("document.querySelector('form.editor textarea')", 10*time.Second)
	eval[bool](w, "(document.querySelector('form.editor textarea').value = 'write it again', true)")
	w.click("form.editor button.save")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	var res struct{ Messages []agentcore.Message }
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/messages", nil, &res)
	if got := strings.Join(contents(res.Messages), " | "); !strings.HasPrefix(got, "user: write it again |") || strings.Contains(got, "user: write it |") {
		t.Fatalf("active history after the edit: %s", got)
	}

	w.until("document.querySelectorAll('.msg.user button.fork').length === 3", 20*time.Second)
	eval[bool](w, "document.querySelectorAll('.msg.user button.fork')[2].click() || true")
	w.until("location.pathname.startsWith('/c/') && location.pathname !== '/c/"+conv+"'", 20*time.Second)
	if problems := w.seen(&w.problems); len(problems) > 0 {
		t.Errorf("console: %q", problems)
	}
}
