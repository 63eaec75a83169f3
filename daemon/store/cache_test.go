package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
)

// cachedBytes is what the cache holds of events' data.
func (c *eventCache) cachedBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.convs {
		for _, e := range r.evs {
			n += len(e.Data)
		}
	}
	return n
}

// The cache is bounded by bytes, not only by count: big events from many
// conversations (sharing one buffer here, so the test itself stays small)
// never add up to more than cacheBytes, and what it answers is right.
func TestEventCacheBytes(t *testing.T) {
	c := newEventCache()
	big := json.RawMessage(`"` + string(bytes.Repeat([]byte("x"), 256<<10)) + `"`)
	for conv := range 64 {
		for seq := int64(1); seq <= 64; seq++ {
			c.add(agentcore.Event{Conversation: fmt.Sprint("c", conv), Seq: seq, Type: "t", Data: big})
		}
	}
	if n := c.cachedBytes(); n > cacheBytes {
		t.Fatalf("the cache holds %d bytes of events, over its %d", n, cacheBytes)
	}
	// The newest conversation's newest events are still served from it,
	// contiguous.
	evs, ok := c.after("c63", 62, 0)
	if !ok || len(evs) != 2 || evs[0].Seq != 63 || evs[1].Seq != 64 {
		t.Fatalf("after(c63, 62) = %d events, %v", len(evs), ok)
	}
	// An event larger than the whole cache is not kept, and the run it
	// would have broken is dropped: reads go to the database.
	huge := json.RawMessage(bytes.Repeat([]byte("1"), cacheBytes+1))
	c.add(agentcore.Event{Conversation: "c63", Seq: 65, Type: "t", Data: huge})
	if _, ok := c.after("c63", 62, 0); ok {
		t.Fatal("the cache answers for a conversation whose newest event it does not hold")
	}
	if n := c.cachedBytes(); n > cacheBytes {
		t.Fatalf("the cache holds %d bytes", n)
	}
	c.add(agentcore.Event{Conversation: "c63", Seq: 66, Type: "t", Data: json.RawMessage(`{}`)})
	if evs, ok := c.after("c63", 65, 0); !ok || len(evs) != 1 || evs[0].Seq != 66 {
		t.Fatalf("after the huge event: %v %v", evs, ok)
	}
}

// Events another server announced: a run that lacks them answers nothing
// until one fill, which starts where it ends, brings it up to date; a
// conversation without a run gets one at its first announcement.
func TestEventCacheAnnounced(t *testing.T) {
	c := newEventCache()
	ev := func(seq int64) agentcore.Event { return agentcore.Event{Conversation: "c", Seq: seq, Type: "t"} }
	c.stored("c", 1)
	if _, ok := c.after("c", 0, 0); ok {
		t.Fatal("an empty run answers")
	}
	from, ok := c.behind("c", 0)
	if !ok || from != 0 {
		t.Fatalf("behind(c, 0) = %d, %v; want 0, true", from, ok)
	}
	c.fill("c", 0, []agentcore.Event{ev(1)})
	if evs, ok := c.after("c", 0, 0); !ok || len(evs) != 1 || evs[0].Seq != 1 {
		t.Fatalf("after the fill: %v %v", evs, ok)
	}
	c.stored("c", 3)
	if _, ok := c.after("c", 1, 0); ok {
		t.Fatal("a run without the newest announced event answers")
	}
	if from, ok := c.behind("c", 1); !ok || from != 1 {
		t.Fatalf("behind(c, 1) = %d, %v; want 1, true", from, ok)
	}
	// A fill that read only part of what was announced leaves the run
	// behind; one that no longer starts where the run ends is ignored.
	c.fill("c", 1, []agentcore.Event{ev(2)})
	if _, ok := c.after("c", 1, 0); ok {
		t.Fatal("a run filled up to 2 of 3 answers")
	}
	c.fill("c", 1, []agentcore.Event{ev(2), ev(3)})
	c.fill("c", 2, []agentcore.Event{ev(3)})
	evs, ok := c.after("c", 0, 0)
	if !ok || len(evs) != 3 || evs[0].Seq != 1 || evs[1].Seq != 2 || evs[2].Seq != 3 {
		t.Fatalf("after the fills: %v %v", evs, ok)
	}
	if _, ok := c.behind("c", 0); ok {
		t.Fatal("an up-to-date run is behind")
	}
	// This process's own next event extends the run as before.
	c.add(ev(4))
	if evs, ok := c.after("c", 3, 0); !ok || len(evs) != 1 || evs[0].Seq != 4 {
		t.Fatalf("after an add: %v %v", evs, ok)
	}
}
