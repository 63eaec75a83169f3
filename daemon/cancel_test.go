package daemon_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// POST …/cancel ends the owner's running turn, one waiting for an
// approval (turn_cancelled, the approval withdrawn) and one whose model
// stalls mid-reply. Another user gets 404; with no turn, 409.
func TestCancelTurn(t *testing.T) {
	in := newInstance(t, llm(t,
		shellCall("sleep 100"),
		llmtest.Step{Text: "Thinking very slowly", Stall: true},
	))
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a, b := p.login("alice", pw), p.login("bob", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	turn := a.send(conv, "sleep")
	evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
	aid := approvalID(t, evs[len(evs)-1])

	for _, path := range []string{"/api/v1/conversations/" + conv + "/cancel", "/api/v1/conversations/conv_000000000000000000000000/cancel"} {
		status, body, _ := b.do("POST", path, nil)
		if status != http.StatusNotFound || !strings.Contains(string(body), "not_found") {
			t.Fatalf("bob POST %s: %d %s", path, status, body)
		}
	}

	var res struct {
		TurnID string `json:"turn_id"`
		Status string `json:"status"`
	}
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/cancel", nil, &res)
	if res.TurnID != turn || res.Status != "cancelled" {
		t.Fatalf("cancel answered %+v, want turn %s cancelled", res, turn)
	}
	// Bob's attempts emitted nothing: the next event is the approval's
	// end by alice's cancel (one they emitted would come before it).
	if ev := s.next(10 * time.Second); ev.Type != agentcore.EventApprovalDecided {
		t.Fatalf("the event after bob's attempts is %s %s, want the cancelled approval's %s", ev.Type, ev.Data, agentcore.EventApprovalDecided)
	}
	s.until(agentcore.EventTurnCancelled, 10*time.Second)
	var approvals struct{ Approvals []agentcore.Approval }
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/approvals", nil, &approvals)
	if len(approvals.Approvals) != 1 || approvals.Approvals[0].ID != aid || approvals.Approvals[0].Status != agentcore.ApprovalCancelled {
		t.Fatalf("approvals after cancel: %+v", approvals.Approvals)
	}
	if status, body, _ := a.do("POST", "/api/v1/conversations/"+conv+"/cancel", nil); status != http.StatusConflict || !strings.Contains(string(body), "no_turn") {
		t.Fatalf("cancel without a turn: %d %s", status, body)
	}
	turn = a.send(conv, "something else")
	s.until(agentcore.EventTextDelta, 30*time.Second)
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/cancel", nil, &res)
	if res.TurnID != turn || res.Status != "cancelled" {
		t.Fatalf("cancel of the stalled turn answered %+v", res)
	}
	s.until(agentcore.EventTurnCancelled, 10*time.Second)
}

// Deleting a conversation ends its open event streams, and the
// conversation takes no further message.
func TestDeleteEndsStream(t *testing.T) {
	in := newInstance(t, llm(t, shellCall("true")))
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "go")
	s.until(agentcore.EventApprovalPending, 30*time.Second)
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+conv, nil, nil)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-s.events:
			continue
		case err := <-s.err:
			if !strings.Contains(err.Error(), "stream ended") {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("the event stream of a deleted conversation stays open")
		}
		break
	}
	a.must(http.StatusNotFound, "POST", "/api/v1/conversations/"+conv+"/messages", map[string]string{"content": "more"}, nil)
}
