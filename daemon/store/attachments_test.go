package store

import (
	"errors"
	"testing"

	"github.com/codumentor/codumentor/integrations/office"
)

// TestAttachments: attachments belong to their conversation, are found
// by ID or by name (the latest), and go with it.
func TestAttachments(t *testing.T) {
	ctx := t.Context()
	s, _ := openTest(t)
	a, err := NewAttachments(s.db)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := s.Create(ctx, "usr_a", "one")
	c2, _ := s.Create(ctx, "usr_a", "two")
	doc := func(text string) *office.Document {
		return &office.Document{Kind: office.KindDOCX, Parts: []office.Part{{Title: "A", Text: text}, {Title: "B", Text: "bb"}}}
	}
	old, err := a.Add(ctx, c1.ID, "r.docx", 10, doc("old"), Upload{User: "u", SHA256: "00"})
	if err != nil {
		t.Fatal(err)
	}
	at, err := a.Add(ctx, c1.ID, "r.docx", 20, doc("new"), Upload{User: "u", SHA256: "00"})
	if err != nil || at.TextBytes != 5 || len(at.Parts) != 2 || at.Parts[1].TextBytes != 2 {
		t.Fatalf("Add: %+v %v", at, err)
	}
	if _, parts, err := a.Get(ctx, c1.ID, old.ID); err != nil || parts[0].Text != "old" {
		t.Errorf("Get by ID: %v %v", parts, err)
	}
	if got, parts, err := a.Find(ctx, c1.ID, "r.docx"); err != nil || got.ID != at.ID || parts[0].Text != "new" {
		t.Errorf("Find by name: %+v %v %v", got, parts, err)
	}
	if _, _, err := a.Get(ctx, c2.ID, at.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("another conversation's attachment: %v", err)
	}
	if _, _, err := a.Find(ctx, c2.ID, "r.docx"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another conversation's attachment by name: %v", err)
	}
	if err := s.Delete(ctx, "usr_a", c1.ID); err != nil {
		t.Fatal(err)
	}
	if list, err := a.List(ctx, c1.ID); err != nil || len(list) != 0 {
		t.Errorf("after the conversation was deleted: %v %v", list, err)
	}
}
