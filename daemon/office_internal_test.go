package daemon

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
	"github.com/codumentor/codumentor/integrations/office"
)

// TestReadAttachmentTool: the read_attachment tool over the attachments'
// table lists a conversation's attachments, reads one by ID or name and
// part, and says what is wrong with a call; another conversation's
// attachments are not there.
func TestReadAttachmentTool(t *testing.T) {
	ctx := t.Context()
	db := storetest.Open(t)
	convs, err := store.NewConversations(db)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.NewAttachments(db)
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := convs.Create(ctx, "usr_a", "mine")
	other, _ := convs.Create(ctx, "usr_b", "other")
	empty, _ := convs.Create(ctx, "usr_a", "empty")
	doc := &office.Document{Kind: office.KindDOCX, Parts: []office.Part{{Title: "Intro", Text: "hello"}, {Title: "Body", Text: "the body"}}}
	at, err := st.Add(ctx, mine.ID, "r.docx", 10, doc, store.Upload{User: "usr_a", SHA256: "00"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Add(ctx, other.ID, "secret.docx", 10, &office.Document{Kind: office.KindDOCX}, store.Upload{User: "usr_b", SHA256: "00"}); err != nil {
		t.Fatal(err)
	}
	tool := office.ReadTool{Store: attachmentStore{st}}
	for _, tt := range []struct {
		name, conv, args string
		want, wantErr    string
	}{
		{"list", mine.ID, `{}`, at.ID + ` "r.docx" (docx, 2 parts)`, ""},
		{"list none", empty.ID, `{}`, "This conversation has no attachments.", ""},
		{"by ID", mine.ID, `{"id":"` + at.ID + `","part":2}`, "\"r.docx\" (docx), part 2 of 2: Body\n\nthe body", ""},
		{"by name, part 1", mine.ID, `{"id":"r.docx"}`, "\"r.docx\" (docx), part 1 of 2: Intro\n\nhello", ""},
		{"part out of range", mine.ID, `{"id":"r.docx","part":3}`, "", `"r.docx" has parts 1 to 2`},
		{"unknown", mine.ID, `{"id":"nope.docx"}`, "", `no attachment "nope.docx" in this conversation`},
		{"another conversation's", mine.ID, `{"id":"secret.docx"}`, "", `no attachment "secret.docx"`},
		{"no text", other.ID, `{"id":"secret.docx"}`, `"secret.docx" (docx) has no text.`, ""},
	} {
		out, err := tool.Run(ctx, &agentcore.Call{Name: "read_attachment", Conversation: tt.conv, Arguments: json.RawMessage(tt.args)})
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: %q, %v; want the error %q", tt.name, out, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || strings.TrimSpace(out) != tt.want):
			t.Errorf("%s: %q, %v; want %q", tt.name, out, err, tt.want)
		}
	}
}
