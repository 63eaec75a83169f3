package api

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"golang.org/x/sync/semaphore"
)

// An upload's body as it arrives: a client that is gone or too slow is
// a 400 (not the 500 of an OS error), a body past the limit a 413, and
// the end is noted (the connection may serve another request).
func TestStreamBody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		r      io.Reader
		limit  int64
		status int // 0: read to its end
	}{
		{"whole", strings.NewReader("0123456789"), 10, 0},
		{"past the limit", strings.NewReader("0123456789a"), 10, http.StatusRequestEntityTooLarge},
		{"too slow", iotest.ErrReader(os.ErrDeadlineExceeded), 10, http.StatusBadRequest},
		{"gone", io.MultiReader(strings.NewReader("01"), iotest.ErrReader(io.ErrUnexpectedEOF)), 10, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &streamBody{r: tc.r, left: tc.limit, limit: tc.limit}
			_, err := io.ReadAll(b)
			var ae *Error
			switch {
			case tc.status == 0 && (err != nil || !b.eof):
				t.Errorf("ReadAll: %v, eof %v; want the whole body", err, b.eof)
			case tc.status != 0 && (!errors.As(err, &ae) || ae.Status != tc.status || b.eof):
				t.Errorf("ReadAll: %v (eof %v), want a %d", err, b.eof, tc.status)
			}
		})
	}
}

// readAll charges what it allocates to the budget before it reads, and
// gives the charge back to the caller to release.
func TestReadAllBudget(t *testing.T) {
	s := &Server{bodies: semaphore.NewWeighted(bodyChunk)}
	body, held, err := s.readAll(strings.NewReader("small"), 5, defaultBodyLimit)
	if string(body) != "small" || held != 5 || err != nil {
		t.Fatalf("a small body: %q, held %d, %v", body, held, err)
	}
	// With those 5 bytes held, a body of unknown length needs a first
	// buffer of bodyChunk: busy.
	if _, held2, err := s.readAll(strings.NewReader("more"), -1, defaultBodyLimit); err != errBodyBusy || held2 != 0 {
		t.Errorf("over the budget: held %d, %v; want errBodyBusy", held2, err)
	}
	s.bodies.Release(held)
	// Chunked past the limit: refused, and what was charged is returned.
	_, held, err = s.readAll(strings.NewReader(strings.Repeat("x", 100)), -1, 10)
	if ae, ok := err.(*Error); !ok || ae.Status != http.StatusRequestEntityTooLarge || held != 11 {
		t.Errorf("past the limit: held %d, %v", held, err)
	}
	s.bodies.Release(held)
	// Shorter than declared: the client went away.
	if _, held, err = s.readAll(strings.NewReader("abc"), 10, defaultBodyLimit); err == nil || held != 10 {
		t.Errorf("shorter than declared: held %d, %v", held, err)
	}
	s.bodies.Release(held)
	if !s.bodies.TryAcquire(bodyChunk) {
		t.Error("the budget was not all given back")
	}
}
