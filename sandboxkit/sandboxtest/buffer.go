package sandboxtest

import "sync"

// Buffer collects output that another goroutine writes while the test
// reads it: a command's or a server's stdout and stderr (exec's copying
// goroutine), or a logger shared by many goroutines. The zero value is
// ready to use.
type Buffer struct {
	// Max, if positive, bounds the bytes kept: older output is dropped
	// first, so a long-running server's log keeps its end.
	Max int

	mu sync.Mutex
	b  []byte
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if b.Max > 0 && len(b.b) > b.Max {
		b.b = append(b.b[:0], b.b[len(b.b)-b.Max:]...)
	}
	return len(p), nil
}

// String is what was written (the last Max bytes of it, with Max set).
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}
