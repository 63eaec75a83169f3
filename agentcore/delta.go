package agentcore

import (
	"time"
	"unicode/utf8"
)

// Text deltas are coalesced: a model sending a byte at a time must not
// cost an event (a store transaction and a wake-up of every subscriber)
// per byte. A delta is emitted once deltaBytes of text are ready or
// deltaInterval has passed since the last one, and at the end of the
// reply; text that arrives in a burst waits at most for the burst's next
// piece.
const (
	deltaBytes    = 4 << 10
	deltaInterval = 100 * time.Millisecond
	// deltaMaxHeld bounds the text held back when no safe place to cut
	// is found (a long run of overlapping secret forms).
	deltaMaxHeld = 64 << 10
)

// deltaWriter turns the text pieces of a model reply into the texts of
// text_delta events, redacted as one text: between pieces it holds back
// the tail that could be the beginning of a secret's form (the longest
// form minus one byte), so a value split across pieces is redacted whole.
type deltaWriter struct {
	red  *redactor
	buf  []byte    // received, not yet emitted
	last time.Time // when the last delta was emitted
}

// write adds a piece and returns the text to emit now, if any.
func (d *deltaWriter) write(piece string, now time.Time) (string, bool) {
	d.buf = append(d.buf, piece...)
	hold := max(d.red.longestForm()-1, 0)
	if len(d.buf) < hold+deltaBytes && now.Sub(d.last) < deltaInterval {
		return "", false
	}
	out := d.release(hold)
	if out == "" {
		return "", false
	}
	d.last = now
	return out, true
}

// flush returns all the text not yet emitted, redacted.
func (d *deltaWriter) flush() string {
	out := d.red.String(string(d.buf))
	d.buf = d.buf[:0]
	return out
}

// release returns the redacted text up to a cut that leaves hold bytes
// and splits no secret's form, and keeps the rest.
func (d *deltaWriter) release(hold int) string {
	buf := string(d.buf)
	cut := len(buf) - hold
	if cut <= 0 {
		return ""
	}
	if hold > 0 {
		// Move the cut back while a form crosses it: the text around
		// the cut then redacts differently in two parts than whole. A
		// form is at most hold+1 bytes, so the window sees all of it.
		lo := max(0, cut-2*(hold+1))
		whole := d.red.String(buf[lo:])
		found := false
		for c := cut; c > lo; c-- {
			if !utf8.RuneStart(buf[c]) {
				continue
			}
			if d.red.String(buf[lo:c])+d.red.String(buf[c:]) == whole {
				cut, found = c, true
				break
			}
		}
		if !found {
			if len(buf) < deltaMaxHeld {
				return ""
			}
			// Best effort past the bound.
		}
	}
	for cut > 0 && cut < len(buf) && !utf8.RuneStart(buf[cut]) {
		cut--
	}
	out := d.red.String(buf[:cut])
	d.buf = append(d.buf[:0], buf[cut:]...)
	return out
}

// longestForm is the length of the longest text r replaces (0: none).
func (r *redactor) longestForm() int {
	if r == nil || r.r == nil {
		return 0
	}
	return r.longest
}
