package auth_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/auth"
)

// clock is a settable time for the Limiter.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time          { return c.t }
func (c *clock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func newClock() *clock { return &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)} }

func retryAfter(t *testing.T, err error) time.Duration {
	t.Helper()
	var rl *auth.RateLimitedError
	if !errors.Is(err, auth.ErrRateLimited) || !errors.As(err, &rl) {
		t.Fatalf("got %v, want a *RateLimitedError", err)
	}
	return rl.RetryAfter
}

func TestLimiterPerUser(t *testing.T) {
	c := newClock()
	l := auth.NewLimiter(auth.LimitOptions{UserFailures: 3, IPFailures: 100, Window: 10 * time.Minute, Now: c.Now})
	for i := range 3 {
		if err := l.Check("alice", "10.0.0.1"); err != nil {
			t.Fatalf("attempt %d refused: %v", i+1, err)
		}
		l.Failed("alice", "10.0.0.1")
		c.Advance(time.Minute)
	}
	// Failures at 0, 1, 2 min; now 3 min: the first leaves the window at 10.
	if d := retryAfter(t, l.Check("alice", "10.0.0.2")); d != 7*time.Minute {
		t.Fatalf("RetryAfter = %v, want 7m", d)
	}
	if err := l.Check("bob", "10.0.0.1"); err != nil {
		t.Fatalf("another user from the same address: %v", err)
	}
	c.Advance(7*time.Minute - time.Second)
	retryAfter(t, l.Check("alice", ""))
	c.Advance(time.Second)
	if err := l.Check("alice", ""); err != nil {
		t.Fatalf("after the oldest failure left the window: %v", err)
	}
	// One more failure: three within the window again (1, 2 and 10 min).
	l.Failed("alice", "")
	if d := retryAfter(t, l.Check("alice", "")); d != time.Minute {
		t.Fatalf("RetryAfter = %v, want 1m", d)
	}
}

func TestLimiterSuccessResetsUser(t *testing.T) {
	c := newClock()
	l := auth.NewLimiter(auth.LimitOptions{UserFailures: 3, IPFailures: 5, Now: c.Now})
	l.Failed("alice", "10.0.0.1")
	l.Failed("alice", "10.0.0.1")
	l.Succeeded("alice")
	l.Failed("alice", "10.0.0.1")
	l.Failed("alice", "10.0.0.1")
	if err := l.Check("alice", ""); err != nil {
		t.Fatalf("2 failures since the success: %v", err)
	}
	// The address's 4 failures stay: one more and it is limited, for any name.
	l.Failed("carol", "10.0.0.1")
	retryAfter(t, l.Check("dave", "10.0.0.1"))
	if err := l.Check("dave", "10.0.0.9"); err != nil {
		t.Fatalf("another address: %v", err)
	}
}

func TestLimiterDefaults(t *testing.T) {
	c := newClock()
	l := auth.NewLimiter(auth.LimitOptions{Now: c.Now})
	for range 9 {
		l.Failed("alice", "")
	}
	if err := l.Check("alice", ""); err != nil {
		t.Fatalf("after 9 failures: %v", err)
	}
	l.Failed("alice", "")
	if d := retryAfter(t, l.Check("alice", "")); d != 15*time.Minute {
		t.Fatalf("after 10 failures RetryAfter = %v, want 15m", d)
	}
	for i := range 30 {
		l.Failed(fmt.Sprint("user", i), "10.0.0.1")
	}
	retryAfter(t, l.Check("zed", "10.0.0.1"))
}

// A flood of names cannot grow the limiter beyond MaxKeys, and what it
// forgets first are the names that stopped failing longest ago.
func TestLimiterBounded(t *testing.T) {
	c := newClock()
	l := auth.NewLimiter(auth.LimitOptions{UserFailures: 2, IPFailures: 1000, MaxKeys: 10, Now: c.Now})
	l.Failed("victim", "")
	l.Failed("victim", "")
	c.Advance(time.Second)
	for i := range 9 {
		l.Failed(fmt.Sprint("flood", i), "")
	}
	c.Advance(time.Second)
	retryAfter(t, l.Check("victim", "")) // 10 keys: all kept
	l.Failed("flood-last", "")           // an 11th: the oldest, victim, goes
	if err := l.Check("victim", ""); err != nil {
		t.Fatalf("victim still tracked beyond MaxKeys: %v", err)
	}
	// Stale keys go before fresh ones.
	c.Advance(time.Hour)
	l.Failed("fresh", "")
	l.Failed("fresh", "")
	for i := range 9 {
		l.Failed(fmt.Sprint("new", i), "")
	}
	retryAfter(t, l.Check("fresh", ""))
}
