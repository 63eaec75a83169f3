package office

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/codumentor/codumentor/agentcore"
)

// Attachment is what the read_attachment tool shows of an attachment.
type Attachment struct {
	ID, Name, Kind string
	// Parts is how many parts it has.
	Parts int
}

// A Store holds the parsed attachments the read_attachment tool reads
// (the daemon's attachments' table). Conversation IDs come from the
// engine's call; the store returns only that conversation's attachments.
type Store interface {
	// List returns the conversation's attachments, none as an empty
	// list.
	List(ctx context.Context, conversation string) ([]Attachment, error)
	// Find returns the conversation's attachment whose ID, or else
	// whose file name, is idOrName, with its parts' text; an error
	// wrapping agentcore.ErrNotFound if it has none.
	Find(ctx context.Context, conversation, idOrName string) (Attachment, []Part, error)
}

// ReadTool is the read_attachment tool: the text of one part of an
// attachment of the call's conversation, or the list of them. Errors of
// the Store are told to the model only as "cannot be read right now".
type ReadTool struct{ Store Store }

// Spec implements agentcore.Tool.
func (ReadTool) Spec() agentcore.ToolSpec {
	return agentcore.ToolSpec{
		Name:        "read_attachment",
		Description: "Read a document the user attached to this conversation (spreadsheet, document, slides, PDF), one part at a time (a sheet, a slide, some pages). Without an id, lists the attachments and their parts.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","description":"the attachment's id (att_…) or its file name; omit to list the attachments"},"part":{"type":"integer","minimum":1,"description":"the part to read, from 1 (default 1)"}},"additionalProperties":false}`),
	}
}

// Run implements agentcore.Tool.
func (t ReadTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	var args struct {
		ID   string `json:"id"`
		Part int    `json:"part"`
	}
	if err := c.Args(&args); err != nil {
		return "", err
	}
	if args.ID == "" {
		list, err := t.Store.List(ctx, c.Conversation)
		if err != nil {
			return "", errors.New("the attachments cannot be listed right now")
		}
		if len(list) == 0 {
			return "This conversation has no attachments.", nil
		}
		var b strings.Builder
		for _, a := range list {
			fmt.Fprintf(&b, "%s %q (%s, %d parts)\n", a.ID, a.Name, a.Kind, a.Parts)
		}
		return b.String(), nil
	}
	at, parts, err := t.Store.Find(ctx, c.Conversation, args.ID)
	if errors.Is(err, agentcore.ErrNotFound) {
		return "", fmt.Errorf("no attachment %q in this conversation; call read_attachment without an id to list them", args.ID)
	}
	if err != nil {
		return "", errors.New("the attachment cannot be read right now")
	}
	if args.Part == 0 {
		args.Part = 1
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%q (%s) has no text.", at.Name, at.Kind), nil
	}
	if args.Part < 1 || args.Part > len(parts) {
		return "", fmt.Errorf("%q has parts 1 to %d", at.Name, len(parts))
	}
	p := parts[args.Part-1]
	return fmt.Sprintf("%q (%s), part %d of %d: %s\n\n%s", at.Name, at.Kind, args.Part, len(parts), p.Title, p.Text), nil
}
