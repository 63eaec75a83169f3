package agentcore

import (
	"bytes"
	"fmt"
	"sync"
	"unicode/utf8"
)

// headTail keeps the first head bytes written to it and the last tail
// bytes (a ring), and counts what lies between: a command's output
// shown to the model ends where the command's did, however much it
// printed, and holds no more than head+tail bytes meanwhile.
type headTail struct {
	mu    sync.Mutex
	head  []byte
	ring  []byte // len(ring) == tail once the head is full
	next  int    // where the ring's next byte goes
	full  bool   // the ring has wrapped
	total int64
	max   int // head size
	tail  int // ring size
}

// newHeadTail makes the buffers as output arrives: most commands print
// little or nothing.
func newHeadTail(head, tail int) *headTail {
	return &headTail{max: head, tail: tail}
}

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	h.total += int64(n)
	if room := h.max - len(h.head); room > 0 && len(p) > 0 {
		k := min(room, len(p))
		if len(h.head)+k > cap(h.head) {
			h.head = append(make([]byte, 0, min(h.max, max(2*cap(h.head), len(h.head)+k, 512))), h.head...)
		}
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if h.tail == 0 || len(p) == 0 {
		return n, nil
	}
	if h.ring == nil {
		h.ring = make([]byte, h.tail)
	}
	if len(p) > len(h.ring) {
		p = p[len(p)-len(h.ring):]
	}
	for len(p) > 0 {
		k := copy(h.ring[h.next:], p)
		p = p[k:]
		if h.next += k; h.next == len(h.ring) {
			h.next, h.full = 0, true
		}
	}
	return n, nil
}

// skip counts n bytes that were written but are not known: what the
// ring held before them no longer ends where the output does.
func (h *headTail) skip(n int64) {
	if n <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total += n
	h.next, h.full = 0, false
}

// Reset forgets everything written.
func (h *headTail) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.head, h.next, h.full, h.total = h.head[:0], 0, false, 0
}

// fits reports whether n bytes of output are shown whole.
func (h *headTail) fits(n int64) bool { return n <= int64(h.max+h.tail) }

// elided reports whether text leaves out a middle part.
func (h *headTail) elided() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total > int64(len(h.head)+h.tail)
}

// newOutput is the head-and-tail buffer of one command's output shown to
// the model: within MaxOutput, with room for the status lines.
func (e *Engine) newOutput() *headTail {
	budget := max(e.cfg.MaxOutput-1024, e.cfg.MaxOutput/2)
	return newHeadTail(budget*3/8, budget-budget*3/8)
}

// lineSlack is how far a cut moves to fall on a line end.
const lineSlack = 512

// text is all of the output if it fits, else its head and tail, cut at
// line ends where one is near, and the bytes elided between them. The
// output is redacted after it is cut, so margin bytes more are dropped
// on each side of the cut: a secret's form (at most margin bytes) that
// crosses it then leaves no piece of itself to pass redaction.
func (h *headTail) text(margin int) string { return h.textNote(margin, "") }

// textNote is text with note (a line) after the elision mark.
func (h *headTail) textNote(margin int, note string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var tail []byte
	if h.full {
		tail = append(append(tail, h.ring[h.next:]...), h.ring[:h.next]...)
	} else {
		tail = h.ring[:h.next]
	}
	kept := int64(len(h.head) + len(tail))
	if kept == h.total {
		return string(h.head) + string(tail)
	}
	head := h.head[:max(0, len(h.head)-margin)]
	tail = tail[min(len(tail), margin):]
	if i := bytes.LastIndexByte(head, '\n'); i >= 0 && len(head)-i-1 <= lineSlack {
		head = head[:i+1]
	}
	if i := bytes.IndexByte(tail, '\n'); i >= 0 && i < lineSlack {
		tail = tail[i+1:]
	}
	head, tail = wholeRunes(head), startRunes(tail)
	elided := h.total - int64(len(head)+len(tail))
	sep := "\n"
	if len(head) > 0 && head[len(head)-1] == '\n' {
		sep = ""
	}
	if note != "" {
		note += "\n"
	}
	return fmt.Sprintf("%s%s[… %s bytes elided …]\n%s%s", head, sep, commas(elided), note, tail)
}

// startRunes drops the continuation bytes of a rune cut off at the
// start of b.
func startRunes(b []byte) []byte {
	for i := 0; i < len(b) && i < utf8.UTFMax; i++ {
		if b[i]&0xC0 != 0x80 {
			return b[i:]
		}
	}
	return b
}
