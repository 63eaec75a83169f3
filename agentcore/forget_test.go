package agentcore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
)

// A conversation being deleted (Forget) takes no new turn, even from a
// request that checked ownership before the deletion, and its event
// streams end.
func TestForgetIsFinal(t *testing.T) {
	h := newHarness(t, echoScript("true", ""), nil)
	h.start("c", "go")
	h.pendingApproval("c", 0)
	evs := h.e.Subscribe(t.Context(), "c", 0)
	h.e.Forget("c")
	if _, err := h.e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: "c", Content: "again"}); !errors.Is(err, agentcore.ErrNotFound) {
		t.Fatalf("StartTurn after Forget = %v, want ErrNotFound", err)
	}
	if h.e.Turn("c") != nil {
		t.Fatal("a turn runs in a forgotten conversation")
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-evs:
			if !ok {
				goto closed
			}
		case <-timeout:
			t.Fatal("the event stream of a forgotten conversation stays open")
		}
	}
closed:
	select {
	case _, ok := <-h.e.Subscribe(t.Context(), "c", 0):
		if ok {
			t.Error("a new subscription to a forgotten conversation got an event")
		}
	case <-time.After(10 * time.Second):
		t.Error("a new subscription to a forgotten conversation stays open")
	}
	// Other conversations go on.
	h.start("d", "go")
	h.pendingApproval("d", 0)
}
