// Package agentcoretest holds what tests of programs built on agentcore
// share: an in-memory Store. The daemon's real Store is SQLite.
package agentcoretest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/codumentor/codumentor/agentcore"
)

// MemStore is an agentcore.Store in memory, safe for concurrent use.
// Sequence numbers start at 1 per conversation.
type MemStore struct {
	mu        sync.Mutex
	messages  map[string][]agentcore.Message // every branch, in the order written, with ID and Parent
	heads     map[string]int                 // conversation → index+1 of its active branch's last message
	events    map[string][]agentcore.Event
	approvals map[string]agentcore.Approval
	order     []string // approval ids, oldest first
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{messages: map[string][]agentcore.Message{}, heads: map[string]int{}, events: map[string][]agentcore.Event{}, approvals: map[string]agentcore.Approval{}}
}

func (s *MemStore) AppendMessages(ctx context.Context, conv string, msgs ...agentcore.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	head, ok := s.heads[conv]
	if !ok {
		head = len(s.messages[conv])
	}
	for _, m := range msgs {
		m.ID, m.Parent = strconv.Itoa(len(s.messages[conv])+1), ""
		if head > 0 {
			m.Parent = strconv.Itoa(head)
		}
		s.messages[conv] = append(s.messages[conv], m)
		head = len(s.messages[conv])
	}
	s.heads[conv] = head
	return nil
}

// Messages returns the active branch.
func (s *MemStore) Messages(ctx context.Context, conv string) ([]agentcore.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.branch(conv), nil
}

func (s *MemStore) branch(conv string) []agentcore.Message {
	all := s.messages[conv]
	head, ok := s.heads[conv]
	if !ok {
		head = len(all)
	}
	// Filled from the end: the branch has at most head messages. Room
	// is left for a turn's appends, as a slice built by append has.
	out := make([]agentcore.Message, head+8)
	n := head
	for i := head; i > 0; {
		m := all[i-1]
		n--
		out[n] = m
		i, _ = strconv.Atoi(m.Parent) // "" is 0: the first
	}
	return out[n:head]
}

// AllMessages returns every branch's messages, in the order written.
func (s *MemStore) AllMessages(ctx context.Context, conv string) ([]agentcore.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.messages[conv]), nil
}

// Rewind makes the active branch end just before message id.
func (s *MemStore) Rewind(ctx context.Context, conv, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.branch(conv) {
		if m.ID == id {
			s.heads[conv], _ = strconv.Atoi(m.Parent)
			return nil
		}
	}
	return fmt.Errorf("message %q of %s: %w", id, conv, agentcore.ErrNotFound)
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
