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
// It is correct because the process's own appends (the agent engine and
// Recover, both through Conversations) pass through add, and another
// server's on a shared PostgreSQL database are announced (Listen): a run
// that does not hold the newest event announced answers nothing until it
// is filled (fill) from the database, once for all the subscribers that
// wait for it.
type eventCache struct {
	mu    sync.Mutex
	convs map[string]*eventRun
	tick  uint64
	bytes int // eventSize of every event held
}

type eventRun struct {
	evs  []agentcore.Event // contiguous Seq, oldest first
	used uint64
	// announced is the newest Seq another server announced; the run
	// answers only while it holds it.
	announced int64
}

// eventSize is what an event is counted as against cacheBytes: its
// variable parts plus the fixed ones.
func eventSize(e agentcore.Event) int {
	return len(e.Data) + len(e.Type) + len(e.Conversation) + len(e.Turn) + 128
}

const (
	// cachePerConversation bounds the events kept per conversation.
	cachePerConversation = 512
	// cacheConversations bounds the conversations kept; the least
	// recently used one is dropped beyond it.
	cacheConversations = 1024
	// cacheBytes bounds the events kept, all conversations together:
	// beyond it the least recently used conversations are dropped, then
	// the oldest events of the one being appended to. An event larger
	// than this is not kept at all.
	cacheBytes = 64 << 20
)

func newEventCache() *eventCache { return &eventCache{convs: map[string]*eventRun{}} }

// add records a newly stored event.
func (c *eventCache) add(e agentcore.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	size := eventSize(e)
	r := c.convs[e.Conversation]
	if size > cacheBytes {
		// Kept nowhere; the run would no longer end at the newest
		// event, so it goes too.
		c.removeLocked(e.Conversation)
		return
	}
	if r == nil || len(r.evs) > 0 && r.evs[len(r.evs)-1].Seq+1 != e.Seq {
		// New, or not contiguous (after an event too big to keep):
		// start over from this event.
		var announced int64
		if r != nil {
			announced = r.announced
		}
		c.removeLocked(e.Conversation)
		if len(c.convs) >= cacheConversations {
			c.evictLocked(e.Conversation)
		}
		r = &eventRun{announced: announced}
		c.convs[e.Conversation] = r
	}
	c.appendLocked(r, e, size)
}

// appendLocked appends e, of eventSize size, to r, the run of its
// conversation, and keeps the cache within its bounds.
func (c *eventCache) appendLocked(r *eventRun, e agentcore.Event, size int) {
	if len(r.evs) == cachePerConversation {
		c.dropOldestLocked(r)
	}
	r.evs = append(r.evs, e)
	c.bytes += size
	r.used = c.tick
	for c.bytes > cacheBytes && c.evictLocked(e.Conversation) {
	}
	for c.bytes > cacheBytes && len(r.evs) > 1 {
		c.dropOldestLocked(r)
	}
}

// dropOldestLocked drops the oldest event of r.
func (c *eventCache) dropOldestLocked(r *eventRun) {
	c.bytes -= eventSize(r.evs[0])
	r.evs[0] = agentcore.Event{}
	r.evs = r.evs[1:]
}

// removeLocked drops a conversation's run.
func (c *eventCache) removeLocked(conversation string) {
	if r := c.convs[conversation]; r != nil {
		for _, e := range r.evs {
			c.bytes -= eventSize(e)
		}
		delete(c.convs, conversation)
	}
}

// evictLocked drops the least recently used conversation but keep, and
// reports whether there was one.
func (c *eventCache) evictLocked(keep string) bool {
	var oldest string
	var min uint64
	for id, r := range c.convs {
		if id != keep && (oldest == "" || r.used < min) {
			oldest, min = id, r.used
		}
	}
	if oldest == "" {
		return false
	}
	c.removeLocked(oldest)
	return true
}

// after returns the cached events with Seq > after, if the cache holds
// all of them.
func (c *eventCache) after(conversation string, after int64, limit int) ([]agentcore.Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.convs[conversation]
	if r == nil || len(r.evs) == 0 || after < r.evs[0].Seq-1 || r.evs[len(r.evs)-1].Seq < r.announced {
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
	c.removeLocked(conversation)
	c.mu.Unlock()
}

// stored learns that another process stored event seq of conversation:
// a run that ends before it answers nothing until fill brings it up to
// date. A conversation without a run gets an empty one, for fill to
// start: its followers here read each new event once between them.
func (c *eventCache) stored(conversation string, seq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.convs[conversation]
	if r == nil {
		if len(c.convs) >= cacheConversations {
			c.evictLocked(conversation)
		}
		c.tick++
		r = &eventRun{used: c.tick}
		c.convs[conversation] = r
	}
	r.announced = max(r.announced, seq)
}

// behind reports whether conversation's run lacks events another process
// announced and a read after after would be served by it once filled;
// from is where the fill starts (the run's newest Seq, or after if it
// is empty).
func (c *eventCache) behind(conversation string, after int64) (from int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.convs[conversation]
	switch {
	case r == nil:
		return 0, false
	case len(r.evs) == 0:
		return after, r.announced > after
	case after < r.evs[0].Seq-1:
		return 0, false
	}
	last := r.evs[len(r.evs)-1].Seq
	return last, last < r.announced
}

// fill appends to conversation's run the events read from the database
// after from (contiguous, oldest first), if the run still ends at from.
func (c *eventCache) fill(conversation string, from int64, evs []agentcore.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.convs[conversation]
	if r == nil || len(r.evs) > 0 && r.evs[len(r.evs)-1].Seq != from {
		return
	}
	c.tick++
	for _, e := range evs {
		size := eventSize(e)
		if e.Seq != from+1 || size > cacheBytes {
			return
		}
		c.appendLocked(r, e, size)
		from = e.Seq
	}
}

// clear drops every run.
func (c *eventCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.convs, c.bytes = map[string]*eventRun{}, 0
}
