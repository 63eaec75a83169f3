package daemon_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/api"
)

// In seccomp log mode (the default) a blocklisted call runs, and the
// conversation says which command made it: an event as it happens, and
// the sum over the conversation.
func TestSeccompViolations(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, llm(t,
		shellCall("unshare -U true; unshare -U true; echo tried"),
		llmtest.Step{Expect: "tried", Text: "done"},
	)+"sandbox:\n  shell_always_allow: true\n")
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "try a user namespace")
	evs := s.until(agentcore.EventTurnFinished, 60*time.Second)
	s.close()
	var events int
	for _, ev := range evs {
		if ev.Type != agentcore.EventSeccompViolation {
			continue
		}
		events++
		var d map[string]any
		if err := json.Unmarshal(eventData(t, ev), &d); err != nil {
			t.Fatal(err)
		}
		if d["syscall"] != "unshare" || d["command"] != "unshare" || d["refusal"] != "EPERM" || d["count"] != 2.0 || d["name"] != "shell" {
			t.Fatalf("seccomp_violation event: %v", d)
		}
	}
	if events != 1 {
		t.Fatalf("%d seccomp_violation events, want 1: %+v", events, evs)
	}
	var got api.Violations
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/sandbox/violations", nil, &got)
	if len(got.Violations) != 1 || got.Violations[0].Syscall != "unshare" || got.Violations[0].Count != 2 || got.Violations[0].First.IsZero() {
		t.Fatalf("violations: %+v", got)
	}
	p.login("bob", pw).must(http.StatusNotFound, "GET", "/api/v1/conversations/"+conv+"/sandbox/violations", nil, nil)
}
