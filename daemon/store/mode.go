package store

import (
	"context"
	"fmt"
)

// ModeHostReadOnly is the Mode of a host read-only investigation: its
// sandbox sees the host's filesystem read-only instead of a workspace.
const ModeHostReadOnly = "host_readonly"

// SetMode sets the mode of user's conversation id, just created (a
// conversation's mode never changes afterwards).
func (s *Conversations) SetMode(ctx context.Context, user, id, mode string) error {
	res := s.db.WithContext(ctx).Model(&Conversation{}).Where("id = ? AND user_id = ?", id, user).Update("mode", mode)
	if res.Error != nil {
		return fmt.Errorf("store: setting the mode of conversation %s: %w", id, res.Error)
	}
	if res.RowsAffected != 1 {
		return ErrNotFound
	}
	return nil
}

// HostReadOnly reports whether user's conversation id is a host
// read-only investigation (agentcore.Config.HostReadOnly).
func (s *Conversations) HostReadOnly(ctx context.Context, user, id string) (bool, error) {
	c, err := s.Get(ctx, user, id)
	if err != nil {
		return false, err
	}
	return c.Mode == ModeHostReadOnly, nil
}
