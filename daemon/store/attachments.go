package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/integrations/office"
	"github.com/codumentor/codumentor/sandboxkit/randid"
)

// Attachment is a document attached to a conversation, as the office
// worker read it. The file itself is not kept: only its text.
type Attachment struct {
	ID             string `json:"id"`
	ConversationID string `json:"-"`
	Name           string `json:"name"`
	Kind           string `json:"kind"`
	// Bytes is the size of the uploaded file; TextBytes of its text.
	Bytes     int64            `json:"bytes"`
	TextBytes int64            `json:"text_bytes"`
	Parts     []AttachmentPart `json:"parts"`
	Truncated bool             `json:"truncated,omitempty"`
	Created   time.Time        `json:"created"`
}

// AttachmentPart describes one part (a sheet, a slide, some pages).
type AttachmentPart struct {
	Title     string `json:"title"`
	TextBytes int    `json:"text_bytes"`
}

type attachmentRow struct {
	ID             string       `gorm:"primaryKey"`
	ConversationID string       `gorm:"index;not null"`
	Conversation   Conversation `gorm:"constraint:OnDelete:CASCADE"`
	Name           string       `gorm:"not null"`
	Kind           string       `gorm:"not null"`
	Bytes          int64
	Truncated      bool
	Parts          []byte `gorm:"not null"` // JSON []office.Part
	Created        time.Time
}

func (attachmentRow) TableName() string { return "attachments" }

// Attachments stores attachments' text. Callers check that the
// conversation is the user's (the API's owned middleware, the engine's
// call context) before they call it.
type Attachments struct{ db *gorm.DB }

// NewAttachments migrates the table.
func NewAttachments(db *gorm.DB) (*Attachments, error) {
	if err := db.AutoMigrate(&attachmentRow{}); err != nil {
		return nil, fmt.Errorf("store: migrating attachments: %w", err)
	}
	return &Attachments{db: db}, nil
}

// Upload is who attached a file, from where, and the file's digest: the
// attachment's audit record.
type Upload struct {
	User, Source string
	SHA256       string
}

// Add stores a parsed document attached to conversation, with its audit
// record (kind attachment) in the same transaction.
func (a *Attachments) Add(ctx context.Context, conversation, name string, size int64, doc *office.Document, up Upload) (Attachment, error) {
	parts, err := json.Marshal(doc.Parts)
	if err != nil {
		return Attachment{}, err
	}
	row := attachmentRow{ID: randid.New("att_"), ConversationID: conversation, Name: name, Kind: doc.Kind, Bytes: size, Truncated: doc.Truncated, Parts: parts, Created: time.Now().UTC()}
	err = a.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		_, err := audit.Append(tx, audit.Entry{Kind: audit.KindAttachment, User: up.User, Source: up.Source, Data: map[string]any{
			"conversation": conversation, "id": row.ID, "name": name, "kind": doc.Kind, "size": size, "sha256": up.SHA256,
		}})
		return err
	})
	if err != nil {
		return Attachment{}, fmt.Errorf("store: adding an attachment: %w", err)
	}
	return row.attachment(doc.Parts), nil
}

func (r attachmentRow) attachment(parts []office.Part) Attachment {
	at := Attachment{ID: r.ID, ConversationID: r.ConversationID, Name: r.Name, Kind: r.Kind, Bytes: r.Bytes, Truncated: r.Truncated, Created: r.Created, Parts: []AttachmentPart{}}
	for _, p := range parts {
		at.Parts = append(at.Parts, AttachmentPart{Title: p.Title, TextBytes: len(p.Text)})
		at.TextBytes += int64(len(p.Text))
	}
	return at
}

// List returns a conversation's attachments, oldest first.
func (a *Attachments) List(ctx context.Context, conversation string) ([]Attachment, error) {
	var rows []attachmentRow
	if err := a.db.WithContext(ctx).Where("conversation_id = ?", conversation).Order("created, id").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: listing attachments: %w", err)
	}
	out := []Attachment{}
	for _, r := range rows {
		var parts []office.Part
		if err := json.Unmarshal(r.Parts, &parts); err != nil {
			return nil, fmt.Errorf("store: attachment %s: %w", r.ID, err)
		}
		out = append(out, r.attachment(parts))
	}
	return out, nil
}

// Get returns an attachment of conversation and its parts' text;
// ErrNotFound when the conversation has no such attachment.
func (a *Attachments) Get(ctx context.Context, conversation, id string) (Attachment, []office.Part, error) {
	return a.get(a.db.WithContext(ctx).Where("id = ? AND conversation_id = ?", id, conversation))
}

// Find is Get by ID, or else by file name (the latest of that name):
// the model may name an attachment as the user does.
func (a *Attachments) Find(ctx context.Context, conversation, idOrName string) (Attachment, []office.Part, error) {
	at, parts, err := a.Get(ctx, conversation, idOrName)
	if err == ErrNotFound {
		return a.get(a.db.WithContext(ctx).Where("name = ? AND conversation_id = ?", idOrName, conversation).Order("created DESC, id DESC"))
	}
	return at, parts, err
}

func (a *Attachments) get(q *gorm.DB) (Attachment, []office.Part, error) {
	var r attachmentRow
	err := q.Take(&r).Error
	if err == gorm.ErrRecordNotFound {
		return Attachment{}, nil, ErrNotFound
	}
	if err != nil {
		return Attachment{}, nil, fmt.Errorf("store: reading an attachment: %w", err)
	}
	var parts []office.Part
	if err := json.Unmarshal(r.Parts, &parts); err != nil {
		return Attachment{}, nil, fmt.Errorf("store: attachment %s: %w", r.ID, err)
	}
	return r.attachment(parts), parts, nil
}
