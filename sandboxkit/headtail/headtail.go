// Package headtail holds Buffer, an io.Writer that keeps the first and
// the last bytes of an output of any size in bounded memory: a command's
// stderr shown in an error, a job's output, a tool's result.
package headtail

import "sync"

// Buffer keeps the first head bytes written to it and the last tail
// bytes after them (a ring), and counts what lies between, so what it
// shows ends where the output did, however much was written, and it
// holds no more than head+tail bytes meanwhile. Its buffers are made as
// output arrives: most outputs are small or empty. A Buffer is safe for
// concurrent use (exec's stdout and stderr copiers).
type Buffer struct {
	mu    sync.Mutex
	head  []byte
	ring  []byte // len(ring) == tail once the head is full
	next  int    // where the ring's next byte goes
	full  bool   // the ring has wrapped
	total int64
	max   int // head size
	tail  int // ring size
}

// New returns a Buffer keeping the first head and the last tail bytes;
// either may be 0.
func New(head, tail int) *Buffer {
	return &Buffer{max: head, tail: tail}
}

// Write keeps what p adds to the head and the tail, and always reports
// all of p written: a writer must never block or fail on a full buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	if room := b.max - len(b.head); room > 0 && len(p) > 0 {
		k := min(room, len(p))
		if len(b.head)+k > cap(b.head) {
			b.head = append(make([]byte, 0, min(b.max, max(2*cap(b.head), len(b.head)+k, 512))), b.head...)
		}
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if b.tail == 0 || len(p) == 0 {
		return n, nil
	}
	if b.ring == nil {
		b.ring = make([]byte, b.tail)
	}
	if len(p) > len(b.ring) {
		p = p[len(p)-len(b.ring):]
	}
	for len(p) > 0 {
		k := copy(b.ring[b.next:], p)
		p = p[k:]
		if b.next += k; b.next == len(b.ring) {
			b.next, b.full = 0, true
		}
	}
	return n, nil
}

// Skip counts n bytes that were written elsewhere and are not known: the
// tail kept before them no longer ends where the output does, so it is
// dropped.
func (b *Buffer) Skip(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += n
	b.next, b.full = 0, false
}

// Reset forgets everything written.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.head, b.next, b.full, b.total = b.head[:0], 0, false, 0
}

// Parts returns copies of the head and the tail kept, and how many bytes
// were written (and skipped) in all: the output is whole when total ==
// len(head)+len(tail), else the bytes between head and tail are missing.
func (b *Buffer) Parts() (head, tail []byte, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	head = append([]byte(nil), b.head...)
	if b.full {
		tail = append(append(tail, b.ring[b.next:]...), b.ring[:b.next]...)
	} else {
		tail = append(tail, b.ring[:b.next]...)
	}
	return head, tail, b.total
}

// Len returns how many bytes were written (and skipped) in all.
func (b *Buffer) Len() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// String returns the head followed by the tail, with nothing marking
// what is missing between them: with a tail of 0, the first bytes
// written; with a head of 0, the last.
func (b *Buffer) String() string {
	head, tail, _ := b.Parts()
	return string(head) + string(tail)
}
