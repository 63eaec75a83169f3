package daemon_test

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/store"
)

// A second server on a live instance is refused, naming the live one's
// pid, before it touches the database: the live turn, its pending
// approval and its history are as they were, and the live server goes on.
func TestSecondServerRefused(t *testing.T) {
	in := newInstance(t, llm(t,
		shellCall("echo hi"),
		llmtest.Step{Text: "Fine, not running it."},
	))
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "say hi")
	evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
	aid := approvalID(t, evs[len(evs)-1])

	second, err := in.run()
	if err == nil {
		second.kill()
		t.Fatal("a second codumentor api started on a live instance")
	}
	pid := strconv.Itoa(p.cmd.Process.Pid)
	if msg := err.Error(); !strings.Contains(msg, "in use") || !strings.Contains(msg, "pid "+pid) {
		t.Fatalf("second server's refusal does not name the holder (pid %s): %v", pid, err)
	}
	// Nothing was recovered: the approval is still pending, and the
	// next event is the decision below (one a recovery emitted would
	// come before it in the conversation's log).
	var approvals struct{ Approvals []agentcore.Approval }
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/approvals?status=pending", nil, &approvals)
	if len(approvals.Approvals) != 1 || approvals.Approvals[0].ID != aid {
		t.Fatalf("pending approvals after the refused start: %+v", approvals.Approvals)
	}
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+aid, map[string]string{"decision": "deny"}, nil)
	if ev := s.next(30 * time.Second); ev.Type != agentcore.EventApprovalDecided {
		t.Fatalf("the event after the refused start is %s %s, want the denial's %s", ev.Type, ev.Data, agentcore.EventApprovalDecided)
	}
	rest := s.until(agentcore.EventTurnFinished, 30*time.Second)
	for _, ev := range rest {
		if ev.Type == agentcore.EventTurnFailed {
			t.Fatalf("turn failed: %s", ev.Data)
		}
	}
	// Once the first has stopped, the instance is free again.
	s.close()
	p.stop()
	in.start().stop()
}

// A server whose address is taken fails before crash recovery: the
// interrupted turn of the last run is left for the server that can serve.
func TestListenBeforeRecovery(t *testing.T) {
	in := newInstance(t, llm(t, shellCall("echo hi")))
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "say hi")
	s.until(agentcore.EventApprovalPending, 30*time.Second)
	p.kill()

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "api", "--instance", in.dir, "--listen", taken.Addr().String()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "listen") {
		t.Fatalf("codumentor api on a taken address: %v, %s", err, out)
	}
	db := in.openDB()
	convs, err := store.NewConversations(db)
	if err != nil {
		t.Fatal(err)
	}
	as, err := convs.Approvals(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].Status != agentcore.ApprovalPending {
		t.Fatalf("approvals after a failed start: %+v (recovery ran before the listener)", as)
	}
}
