package store

import (
	"sync"

	"github.com/codumentor/codumentor/agentcore"
)

// eventCache keeps the newest events of the conversations this process
// appended to, so that a thousand subscribers woken by one new event read
// it from memory rather than with a thousand queries. It holds a
// contiguous run of each conversation's events ending at the newest one;
// a read that starts before the run goes to the database.
//
// It is correct because only the serving process appends events (the
// agent engine and Recover, both through Conversations).
type eventCache struct {
	mu    sync.Mutex
	convs map[string]*eventRun
	tick  uint64
}

type eventRun struct {
	evs  []agentcore.Event // contiguous Seq, oldest first
	used uint64
}

const (
	// cachePerConversation bounds the events kept per conversation.
	cachePerConversation = 512
	// cacheConversations bounds the conversations kept; the least
	// recently used one is dropped beyond it.
	cacheConversations = 1024
)

func newEventCache() *eventCache { return &eventCache{convs: map[string]*eventRun{}} }

// add records a newly stored event.
func (c *eventCache) add(e agentcore.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	r := c.convs[e.Conversation]
	if r == nil || len(r.evs) > 0 && r.evs[len(r.evs)-1].Seq+1 != e.Seq {
		// New, or not contiguous (cannot happen while one process
		// appends): start over from this event.
		if r == nil && len(c.convs) >= cacheConversations {
			c.evictLocked()
		}
		r = &eventRun{}
		c.convs[e.Conversation] = r
	}
	if len(r.evs) == cachePerConversation {
		copy(r.evs, r.evs[1:])
		r.evs = r.evs[:len(r.evs)-1]
	}
	r.evs = append(r.evs, e)
	r.used = c.tick
}

func (c *eventCache) evictLocked() {
	var oldest string
	var min uint64
	for id, r := range c.convs {
		if oldest == "" || r.used < min {
			oldest, min = id, r.used
		}
	}
	delete(c.convs, oldest)
}

// after returns the cached events with Seq > after, if the cache holds
// all of them.
func (c *eventCache) after(conversation string, after int64, limit int) ([]agentcore.Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.convs[conversation]
	if r == nil || len(r.evs) == 0 || after < r.evs[0].Seq-1 {
		return nil, false
	}
	c.tick++
	r.used = c.tick
	i := int(after - r.evs[0].Seq + 1)
	if i >= len(r.evs) {
		return nil, true
	}
	evs := r.evs[i:]
	if limit > 0 && len(evs) > limit {
		evs = evs[:limit]
	}
	return append([]agentcore.Event(nil), evs...), true
}

func (c *eventCache) drop(conversation string) {
	c.mu.Lock()
	delete(c.convs, conversation)
	c.mu.Unlock()
}
