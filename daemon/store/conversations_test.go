package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
)

func openTest(t *testing.T) (*Conversations, Config) {
	t.Helper()
	c := testConfig(t)
	s, err := NewConversations(openTestDB(t, c))
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestOwnership(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	c, err := s.Create(ctx, "usr_a", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "usr_a", c.ID); err != nil || got.Title != "hello" {
		t.Fatalf("owner Get = %+v, %v", got, err)
	}
	for _, tc := range []struct{ user, id string }{{"usr_b", c.ID}, {"usr_a", "conv_unknown"}} {
		if _, err := s.Get(ctx, tc.user, tc.id); !errors.Is(err, agentcore.ErrNotFound) {
			t.Errorf("Get(%s, %s) = %v, want ErrNotFound", tc.user, tc.id, err)
		}
		if err := s.Delete(ctx, tc.user, tc.id); !errors.Is(err, agentcore.ErrNotFound) {
			t.Errorf("Delete(%s, %s) = %v, want ErrNotFound", tc.user, tc.id, err)
		}
	}
	if cs, _ := s.List(ctx, "usr_b", 10); len(cs) != 0 {
		t.Fatalf("usr_b lists %d conversations of usr_a", len(cs))
	}
}

func TestEventsConcurrentAppend(t *testing.T) {
	ctx := context.Background()
	s, cfg := openTest(t)
	c, _ := s.Create(ctx, "usr_a", "")
	const writers, each = 8, 40
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := s.AppendEvent(ctx, agentcore.Event{Type: "text_delta", Conversation: c.ID, Time: time.Now(), Data: json.RawMessage(`{"text":"x"}`)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	check := func(name string, s *Conversations) {
		evs, err := s.Events(ctx, c.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != writers*each {
			t.Fatalf("%s: %d events, want %d", name, len(evs), writers*each)
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("%s: event %d has seq %d", name, i, e.Seq)
			}
		}
		tail, err := s.Events(ctx, c.ID, 300, 5)
		if err != nil || len(tail) != 5 || tail[0].Seq != 301 || tail[4].Seq != 305 {
			t.Fatalf("%s: Events(after 300, limit 5) = %v, %v", name, tail, err)
		}
		if none, err := s.Events(ctx, c.ID, writers*each, 10); err != nil || len(none) != 0 {
			t.Fatalf("%s: Events after the last = %v, %v", name, none, err)
		}
	}
	check("warm", s)
	// A second process's view: nothing cached, everything from the file.
	s2, _ := NewConversations(openTestDB(t, cfg))
	check("cold", s2)
}

func TestAppendEventUnknownConversation(t *testing.T) {
	s, _ := openTest(t)
	_, err := s.AppendEvent(context.Background(), agentcore.Event{Type: "x", Conversation: "conv_none"})
	if !errors.Is(err, agentcore.ErrNotFound) {
		t.Fatalf("AppendEvent to an unknown conversation = %v, want ErrNotFound", err)
	}
}

func TestRecover(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	c, _ := s.Create(ctx, "usr_a", "")
	other, _ := s.Create(ctx, "usr_a", "")
	ev := func(conv, typ, turn string) {
		if _, err := s.AppendEvent(ctx, agentcore.Event{Type: typ, Conversation: conv, Turn: turn, Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	ev(other.ID, agentcore.EventTurnStarted, "turn_done")
	ev(other.ID, agentcore.EventTurnFinished, "turn_done")
	ev(c.ID, agentcore.EventTurnStarted, "turn_1")
	s.AppendMessages(ctx, c.ID,
		agentcore.Message{Role: agentcore.RoleUser, Content: "hi"},
		agentcore.Message{Role: agentcore.RoleAssistant, ToolCalls: []agentcore.ToolCall{{ID: "call_1", Name: "shell"}, {ID: "call_2", Name: "shell"}}},
		agentcore.Message{Role: agentcore.RoleTool, ToolCallID: "call_1", Content: "ok"})
	s.SaveApproval(ctx, agentcore.Approval{ID: "appr_1", User: "usr_a", Conversation: c.ID, Turn: "turn_1", Status: agentcore.ApprovalPending})

	ids, err := s.Recover(ctx, "interrupted: the server stopped")
	if err != nil || len(ids) != 1 || ids[0] != c.ID {
		t.Fatalf("Recover = %v, %v; want [%s]", ids, err, c.ID)
	}
	evs, _ := s.Events(ctx, c.ID, 1, 10)
	if len(evs) != 2 || evs[0].Type != agentcore.EventApprovalDecided || evs[1].Type != agentcore.EventTurnFailed || evs[1].Turn != "turn_1" {
		t.Fatalf("events after recovery: %+v", evs)
	}
	msgs, _ := s.Messages(ctx, c.ID)
	if last := msgs[len(msgs)-1]; last.Role != agentcore.RoleTool || last.ToolCallID != "call_2" {
		t.Fatalf("dangling call not answered: last message %+v", last)
	}
	if a, _ := s.Approval(ctx, "appr_1"); a.Status != agentcore.ApprovalCancelled {
		t.Fatalf("pending approval left %s", a.Status)
	}
	if got, _ := s.Get(ctx, "usr_a", c.ID); got.ActiveTurn != "" {
		t.Fatalf("turn still active: %q", got.ActiveTurn)
	}
	if ids, err := s.Recover(ctx, "again"); err != nil || len(ids) != 0 {
		t.Fatalf("second Recover = %v, %v; want nothing", ids, err)
	}
}

func TestDeleteCascades(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	c, _ := s.Create(ctx, "usr_a", "")
	s.AppendMessages(ctx, c.ID, agentcore.Message{Role: agentcore.RoleUser, Content: "hi"})
	s.AppendEvent(ctx, agentcore.Event{Type: "x", Conversation: c.ID})
	s.SaveApproval(ctx, agentcore.Approval{ID: "appr_x", Conversation: c.ID, Status: agentcore.ApprovalPending})
	if err := s.Delete(ctx, "usr_a", c.ID); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, table := range []string{"messages", "events", "approvals"} {
		s.db.Table(table).Where("conversation_id = ?", c.ID).Count(&n)
		if n != 0 {
			t.Errorf("%d rows left in %s", n, table)
		}
	}
	if evs, _ := s.Events(ctx, c.ID, 0, 10); len(evs) != 0 {
		t.Errorf("events still served after delete: %v", evs)
	}
}

// The model profile's change is refused while the store records a turn
// as running, by the same statement that changes it: a turn that began
// between the API's check and the change is seen.
func TestUpdateDuringTurn(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	c, _ := s.Create(ctx, "usr_a", "")
	work, none, title := "work", "", "renamed"
	if _, err := s.AppendEvent(ctx, agentcore.Event{Type: agentcore.EventTurnStarted, Conversation: c.ID, Turn: "turn_1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "usr_a", c.ID, Change{Title: &title, ModelProfile: &work}); !errors.Is(err, agentcore.ErrTurnInProgress) {
		t.Fatalf("Update of the model profile during a turn = %v, want ErrTurnInProgress", err)
	}
	got, err := s.Update(ctx, "usr_a", c.ID, Change{Title: &title, ModelProfile: &none})
	if err != nil || got.Title != title || got.ModelProfile != "" {
		t.Fatalf("Update keeping the model profile during a turn = %+v, %v", got, err)
	}
	if _, err := s.Update(ctx, "usr_b", c.ID, Change{Title: &title}); !errors.Is(err, agentcore.ErrNotFound) {
		t.Fatalf("Update by another user = %v, want ErrNotFound", err)
	}
	if _, err := s.AppendEvent(ctx, agentcore.Event{Type: agentcore.EventTurnFinished, Conversation: c.ID, Turn: "turn_1"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Update(ctx, "usr_a", c.ID, Change{ModelProfile: &work}); err != nil || got.ModelProfile != work || got.Title != title {
		t.Fatalf("Update after the turn = %+v, %v", got, err)
	}
}

func TestProposeTitle(t *testing.T) {
	long := "Refactor the session store so that tokens are revoked when a user is disabled by an administrator"
	for _, tc := range []struct{ content, want string }{
		{"Fix the build", "Fix the build"},
		{"\n \t\n  Why does   it\tfail?  \nDetails below.", "Why does it fail?"},
		{"bidi \u202eevil\u202c and zero\u200bwidth\x1b[31m", "bidi evil and zerowidth[31m"},
		{"\u200b\u2060\n\nsecond line", "second line"},
		{long, "Refactor the session store so that tokens are revoked when a user is disabled…"},
		{strings.Repeat("x", 100), strings.Repeat("x", 77) + "…"},
		{strings.Repeat("日", 30), strings.Repeat("日", 25) + "…"},
		{"a " + strings.Repeat("y", 90), "a " + strings.Repeat("y", 75) + "…"},
		{"   \n\t\n", ""},
		{"bad \xff byte", "bad byte"},
	} {
		got := proposeTitle(tc.content)
		if got != tc.want || len(got) > maxProposedTitle {
			t.Errorf("proposeTitle(%q) = %q (%d bytes), want %q", tc.content, got, len(got), tc.want)
		}
		if _, err := checkTitle(got); err != nil {
			t.Errorf("proposeTitle(%q) = %q, which checkTitle refuses: %v", tc.content, got, err)
		}
	}
}
