// Package agentcoretest holds what tests of programs built on agentcore
// share: an in-memory Store. The daemon's real Store is SQLite.
package agentcoretest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/codumentor/codumentor/agentcore"
)

// MemStore is an agentcore.Store in memory, safe for concurrent use.
// Sequence numbers start at 1 per conversation.
type MemStore struct {
	mu        sync.Mutex
	messages  map[string][]agentcore.Message
	events    map[string][]agentcore.Event
	approvals map[string]agentcore.Approval
	order     []string // approval ids, oldest first
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{messages: map[string][]agentcore.Message{}, events: map[string][]agentcore.Event{}, approvals: map[string]agentcore.Approval{}}
}

func (s *MemStore) AppendMessages(ctx context.Context, conv string, msgs ...agentcore.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.messages[conv] = append(s.messages[conv], msgs...)
	return nil
}

func (s *MemStore) Messages(ctx context.Context, conv string) ([]agentcore.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.messages[conv]), nil
}

func (s *MemStore) AppendEvent(ctx context.Context, e agentcore.Event) (agentcore.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Seq = int64(len(s.events[e.Conversation])) + 1
	s.events[e.Conversation] = append(s.events[e.Conversation], e)
	return e, nil
}

func (s *MemStore) Events(ctx context.Context, conv string, after int64, limit int) ([]agentcore.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.events[conv]
	if after >= int64(len(evs)) {
		return nil, nil
	}
	evs = evs[after:]
	return slices.Clone(evs[:min(limit, len(evs))]), nil
}

func (s *MemStore) SaveApproval(ctx context.Context, a agentcore.Approval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.approvals[a.ID]; !ok {
		s.order = append(s.order, a.ID)
	}
	s.approvals[a.ID] = a
	return nil
}

func (s *MemStore) Approval(ctx context.Context, id string) (agentcore.Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.approvals[id]
	if !ok {
		return a, fmt.Errorf("approval %s: %w", id, agentcore.ErrNotFound)
	}
	return a, nil
}

func (s *MemStore) Approvals(ctx context.Context, conv string) ([]agentcore.Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []agentcore.Approval
	for _, id := range s.order {
		if a := s.approvals[id]; a.Conversation == conv {
			out = append(out, a)
		}
	}
	return out, nil
}

// AllEvents returns every event of conv, oldest first.
func (s *MemStore) AllEvents(conv string) []agentcore.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events[conv])
}
