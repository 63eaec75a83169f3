package sandboxtest

import (
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Exchange keeps swapping the paths a and b (renameat2 RENAME_EXCHANGE,
// as a sandboxed process can while the host walks its files), typically a
// directory and a symlink to somewhere else, until the returned stop is
// called; stop waits for the last swap. A failed swap fails t.
func Exchange(t testing.TB, a, b string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2 %s %s: %v", a, b, err)
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
