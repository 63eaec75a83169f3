package store

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
)

func contentsOf(msgs []agentcore.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Content)
	}
	return out
}

// A branch: Rewind to before a message, append; Messages is the new
// branch, AllMessages still has the old one, and every message names
// its parent.
func TestBranches(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	c, err := s.Create(ctx, "usr_a", "t")
	if err != nil {
		t.Fatal(err)
	}
	msg := func(role agentcore.Role, content string) agentcore.Message {
		return agentcore.Message{Role: role, Content: content, ID: "ignored", Parent: "ignored"}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.AppendMessages(ctx, c.ID, msg(agentcore.RoleUser, "q1"), msg(agentcore.RoleAssistant, "a1")))
	must(s.AppendMessages(ctx, c.ID, msg(agentcore.RoleUser, "q2"), msg(agentcore.RoleAssistant, "a2")))
	msgs, err := s.Messages(ctx, c.ID)
	must(err)
	if got := contentsOf(msgs); !slices.Equal(got, []string{"q1", "a1", "q2", "a2"}) {
		t.Fatalf("history %q", got)
	}
	for i, m := range msgs {
		want := ""
		if i > 0 {
			want = msgs[i-1].ID
		}
		if m.ID == "" || m.Parent != want {
			t.Fatalf("message %d: id %q parent %q, want parent %q", i, m.ID, m.Parent, want)
		}
	}
	must(s.Rewind(ctx, c.ID, msgs[2].ID)) // edit q2
	must(s.AppendMessages(ctx, c.ID, msg(agentcore.RoleUser, "q2'"), msg(agentcore.RoleAssistant, "a2'")))
	got, err := s.Messages(ctx, c.ID)
	must(err)
	if !slices.Equal(contentsOf(got), []string{"q1", "a1", "q2'", "a2'"}) || got[2].Parent != msgs[1].ID {
		t.Fatalf("after the edit: %+v", got)
	}
	all, err := s.AllMessages(ctx, c.ID)
	must(err)
	if !slices.Equal(contentsOf(all), []string{"q1", "a1", "q2", "a2", "q2'", "a2'"}) {
		t.Fatalf("all branches %q", contentsOf(all))
	}
	// Not on the active branch any more: refused, nothing changes.
	if err := s.Rewind(ctx, c.ID, msgs[3].ID); !errors.Is(err, agentcore.ErrNotFound) {
		t.Fatalf("Rewind to an old branch's message: %v", err)
	}
	must(s.Rewind(ctx, c.ID, msgs[0].ID)) // edit the first message
	if got, _ := s.Messages(ctx, c.ID); len(got) != 0 {
		t.Fatalf("rewound to the start: %q", contentsOf(got))
	}
	must(s.AppendMessages(ctx, c.ID, msg(agentcore.RoleUser, "fresh")))
	if got, _ := s.Messages(ctx, c.ID); !slices.Equal(contentsOf(got), []string{"fresh"}) || got[0].Parent != "" {
		t.Fatalf("new root branch: %+v", got)
	}
}

// Rows written before branches (no parent, no head) read as one line.
func TestBranchesLegacyRows(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	c, err := s.Create(ctx, "usr_a", "t")
	if err != nil {
		t.Fatal(err)
	}
	for i, content := range []string{"q1", "a1", "q2"} {
		if err := s.db.Create(&messageRow{ConversationID: c.ID, Seq: int64(i + 1), Data: []byte(`{"role":"user","content":"` + content + `"}`)}).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendMessages(ctx, c.ID, agentcore.Message{Role: agentcore.RoleAssistant, Content: "a2"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Messages(ctx, c.ID)
	if err != nil || !slices.Equal(contentsOf(got), []string{"q1", "a1", "q2", "a2"}) {
		t.Fatalf("legacy history %q, %v", contentsOf(got), err)
	}
}
