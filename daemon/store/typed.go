package store

import (
	"context"
	"fmt"

	"github.com/codumentor/codumentor/agentcore"
)

// EventsOfType returns at most limit events of the conversation of type
// typ, in Seq order.
func (s *Conversations) EventsOfType(ctx context.Context, conversation, typ string, limit int) ([]agentcore.Event, error) {
	var rows []eventRow
	if err := s.db.WithContext(ctx).Where("conversation_id = ? AND type = ?", conversation, typ).Order("seq").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("store: reading %s events: %w", typ, err)
	}
	evs := make([]agentcore.Event, len(rows))
	for i, r := range rows {
		evs[i] = agentcore.Event{Seq: r.Seq, Type: r.Type, Conversation: r.ConversationID, Turn: r.Turn, Time: r.Time, Data: r.Data}
	}
	return evs, nil
}
