package store

import (
	"context"
	"fmt"
)

// setColumn sets one column of user's conversation id.
func (s *Conversations) setColumn(ctx context.Context, user, id, column, value string) error {
	res := s.db.WithContext(ctx).Model(&Conversation{}).Where("id = ? AND user_id = ?", id, user).Update(column, value)
	if res.Error != nil {
		return fmt.Errorf("store: setting the %s of conversation %s: %w", column, id, res.Error)
	}
	if res.RowsAffected != 1 {
		return ErrNotFound
	}
	return nil
}
