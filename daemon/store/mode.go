package store

import "context"

// ModeHostReadOnly is the Mode of a host read-only investigation: its
// sandbox sees the host's filesystem read-only instead of a workspace.
const ModeHostReadOnly = "host_readonly"

// SetMode sets the mode of user's conversation id, just created (a
// conversation's mode never changes afterwards).
func (s *Conversations) SetMode(ctx context.Context, user, id, mode string) error {
	return s.setColumn(ctx, user, id, "mode", mode)
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
