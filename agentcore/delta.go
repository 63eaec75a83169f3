package agentcore

import (
	"bytes"
	"strings"
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
// the tail that could be the beginning of a secret's form (at most the
// longest form), so a value split across pieces is redacted whole.
type deltaWriter struct {
	red  *redactor
	buf  []byte    // received, not yet emitted
	last time.Time // when the last delta was emitted
}

// write adds a piece and returns the text to emit now, if any.
func (d *deltaWriter) write(piece string, now time.Time) (string, bool) {
	d.buf = append(d.buf, piece...)
	if len(d.buf) < d.red.longestForm()+deltaBytes && now.Sub(d.last) < deltaInterval {
		return "", false
	}
	out := d.release(d.red.formStart(d.buf))
	if out == "" {
		return "", false
	}
	d.last = now
	return out, true
}

// waiting reports whether text could be released now: more than the
// tail that may begin a secret's form.
func (d *deltaWriter) waiting() bool { return len(d.buf) > d.red.formStart(d.buf) }

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
		// the cut then redacts differently in two parts than whole.
		// The window starts a form's length before the earliest cut
		// tried, so no form crossing a cut tried starts before it.
		longest := d.red.longestSpan()
		lo := max(0, cut-2*longest)
		stop := lo
		if lo > 0 {
			stop = lo + longest
		}
		whole := d.red.String(buf[lo:])
		found := false
		for c := cut; c > stop; c-- {
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
	if r == nil || len(r.forms) == 0 {
		return 0
	}
	return len(r.forms[0])
}

// longestSpan bounds the length of a text r replaces as it appears: a
// wrapped form has line breaks between its characters (unwrap joins
// them at any width, LF or CRLF).
func (r *redactor) longestSpan() int {
	n := r.longestForm()
	if r != nil && len(r.wrapped) > 0 {
		n = max(n, 3*len(r.wrapped[0].s))
	}
	return n
}

// formStart is the length of the longest tail of b that is the beginning
// (not the whole) of a text r replaces, also of a wrapped form with line
// breaks in it; or the whole of a short form, which the next byte may
// put inside a word (see redactor.whole).
func (r *redactor) formStart(b []byte) int {
	w := r.wrappedStart(b)
	for k := min(len(b), r.longestForm()); k > w; k-- {
		tail := string(b[len(b)-k:])
		for _, f := range r.forms {
			if (len(f) > k || len(f) == k && k < minAnywhere) && strings.HasPrefix(f, tail) {
				return k
			}
		}
	}
	return w
}

// wrappedStart is formStart for the wrapped forms: the longest tail of b
// that, with its line breaks taken out, is the beginning of one.
func (r *redactor) wrappedStart(b []byte) int {
	if r == nil || len(r.wrapped) == 0 {
		return 0
	}
	longest := len(r.wrapped[0].s)
	i := len(b)
	for i > 0 && len(b)-i < 3*longest && (isEncodingChar(b[i-1]) || b[i-1] == '\n' || b[i-1] == '\r') {
		i--
	}
	run := b[i:]
	if !bytes.ContainsAny(run, "\r\n") {
		return 0 // without a line break, formStart's own search covers it
	}
	var joined []byte
	var pos []int // pos[j]: where joined[j] is in run
	for j, c := range run {
		if c != '\n' && c != '\r' {
			joined = append(joined, c)
			pos = append(pos, j)
		}
	}
	for k := min(len(joined), longest-1); k > 0; k-- {
		tail := string(joined[len(joined)-k:])
		for _, f := range r.wrapped {
			if len(f.s) > k && strings.HasPrefix(f.s, tail) {
				return len(run) - pos[len(joined)-k]
			}
		}
	}
	return 0
}
