package agentcore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/codumentor/codumentor/agentcore"
)

// memStore is the in-memory Store of the tests.
type memStore struct {
	mu        sync.Mutex
	messages  map[string][]agentcore.Message
	events    map[string][]agentcore.Event
	approvals map[string]agentcore.Approval
	order     []string // approval ids, oldest first
}

func newMemStore() *memStore {
	return &memStore{messages: map[string][]agentcore.Message{}, events: map[string][]agentcore.Event{}, approvals: map[string]agentcore.Approval{}}
}

func (s *memStore) AppendMessages(ctx context.Context, conv string, msgs ...agentcore.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.messages[conv] = append(s.messages[conv], msgs...)
	return nil
}

func (s *memStore) Messages(ctx context.Context, conv string) ([]agentcore.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.messages[conv]), nil
}

func (s *memStore) AppendEvent(ctx context.Context, e agentcore.Event) (agentcore.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.Seq = int64(len(s.events[e.Conversation])) + 1
	s.events[e.Conversation] = append(s.events[e.Conversation], e)
	return e, nil
}

func (s *memStore) Events(ctx context.Context, conv string, after int64, limit int) ([]agentcore.Event, error) {
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

func (s *memStore) SaveApproval(ctx context.Context, a agentcore.Approval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.approvals[a.ID]; !ok {
		s.order = append(s.order, a.ID)
	}
	s.approvals[a.ID] = a
	return nil
}

func (s *memStore) Approval(ctx context.Context, id string) (agentcore.Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.approvals[id]
	if !ok {
		return a, fmt.Errorf("approval %s: %w", id, agentcore.ErrNotFound)
	}
	return a, nil
}

func (s *memStore) Approvals(ctx context.Context, conv string) ([]agentcore.Approval, error) {
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

// allEvents returns every event of conv.
func (s *memStore) allEvents(conv string) []agentcore.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events[conv])
}
