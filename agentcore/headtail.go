package agentcore

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/codumentor/codumentor/sandboxkit/headtail"
)

// headTail is a command's output shown to the model: it ends where the
// command's did, however much it printed, and holds no more than
// head+tail bytes meanwhile.
type headTail struct {
	*headtail.Buffer
	max  int // head size
	tail int // tail size
}

func newHeadTail(head, tail int) *headTail {
	return &headTail{Buffer: headtail.New(head, tail), max: head, tail: tail}
}

// fits reports whether n bytes of output are shown whole.
func (h *headTail) fits(n int64) bool { return n <= int64(h.max+h.tail) }

// elided reports whether text leaves out a middle part.
func (h *headTail) elided() bool {
	head, _, total := h.Parts()
	return total > int64(len(head)+h.tail)
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
	head, tail, total := h.Parts()
	if int64(len(head)+len(tail)) == total {
		return string(head) + string(tail)
	}
	head = head[:max(0, len(head)-margin)]
	tail = tail[min(len(tail), margin):]
	if i := bytes.LastIndexByte(head, '\n'); i >= 0 && len(head)-i-1 <= lineSlack {
		head = head[:i+1]
	}
	if i := bytes.IndexByte(tail, '\n'); i >= 0 && i < lineSlack {
		tail = tail[i+1:]
	}
	head, tail = wholeRunes(head), startRunes(tail)
	elided := total - int64(len(head)+len(tail))
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
