package auth_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/store/storetest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// clock is a settable time for the Limiter.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time          { return c.t }
func (c *clock) Advance(d time.Duration) { c.t = c.t.Add(d) }

// newLimiter is a Limiter with o's limits on a fresh database of the
// backend under test.
func newLimiter(t *testing.T, o auth.LimitOptions) *auth.Limiter {
	t.Helper()
	return limiterOn(t, storetest.Open(t), o)
}

func limiterOn(t *testing.T, db *gorm.DB, o auth.LimitOptions) *auth.Limiter {
	t.Helper()
	l, err := auth.NewLimiter(db, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)} }

func retryAfter(t *testing.T, err error) time.Duration {
	t.Helper()
	var rl *auth.RateLimitedError
	if !errors.Is(err, auth.ErrRateLimited) || !errors.As(err, &rl) {
		t.Fatalf("got %v, want a *RateLimitedError", err)
	}
	return rl.RetryAfter
}

// fail reserves an attempt and records it as failed; it fails the test
// if the attempt is refused.
func fail(t *testing.T, l *auth.Limiter, user, ip string) {
	t.Helper()
	r, err := l.Reserve(context.Background(), user, ip)
	if err != nil {
		t.Fatalf("attempt of %s from %s refused: %v", user, ip, err)
	}
	r.Failed(context.Background())
}

// try reserves an attempt and cancels it: nil if it was admitted.
func try(l *auth.Limiter, user, ip string) error {
	r, err := l.Reserve(context.Background(), user, ip)
	if err == nil {
		r.Cancel(context.Background())
	}
	return err
}

// An address's failures refuse its logins, for every name, until the
// oldest leaves the window.
func TestLimiterPerAddress(t *testing.T) {
	c := newClock()
	l := newLimiter(t, auth.LimitOptions{UserFailures: 100, IPFailures: 3, Window: 10 * time.Minute, Now: c.Now})
	for i := range 3 {
		fail(t, l, fmt.Sprint("user", i), "10.0.0.1")
		c.Advance(time.Minute)
	}
	// Failures at 0, 1, 2 min; now 3 min: the first leaves the window at 10.
	if d := retryAfter(t, try(l, "alice", "10.0.0.1")); d != 7*time.Minute {
		t.Fatalf("RetryAfter = %v, want 7m", d)
	}
	if err := try(l, "alice", "10.0.0.2"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	c.Advance(7*time.Minute - time.Second)
	retryAfter(t, try(l, "bob", "10.0.0.1"))
	c.Advance(time.Second)
	if err := try(l, "bob", "10.0.0.1"); err != nil {
		t.Fatalf("after the oldest failure left the window: %v", err)
	}
}

// Beyond UserFailures a name is slowed down, not locked: one attempt
// after a delay that doubles with each failure up to the cap, and the
// right password then gets in.
func TestLimiterUserDelay(t *testing.T) {
	c := newClock()
	l := newLimiter(t, auth.LimitOptions{UserFailures: 3, UserDelay: time.Second, MaxUserDelay: 8 * time.Second, IPFailures: 1000, Now: c.Now})
	for range 3 {
		fail(t, l, "alice", "")
	}
	for _, want := range []time.Duration{1, 2, 4, 8, 8} {
		want *= time.Second
		if d := retryAfter(t, try(l, "alice", "")); d != want {
			t.Fatalf("RetryAfter = %v, want %v", d, want)
		}
		c.Advance(want - time.Millisecond)
		retryAfter(t, try(l, "alice", ""))
		c.Advance(time.Millisecond)
		fail(t, l, "alice", "")
	}
	if err := try(l, "bob", ""); err != nil {
		t.Fatalf("another name: %v", err)
	}
	c.Advance(8 * time.Second)
	r, err := l.Reserve(context.Background(), "alice", "")
	if err != nil {
		t.Fatalf("after the delay: %v", err)
	}
	// One at a time while slowed down.
	retryAfter(t, try(l, "alice", ""))
	r.Succeeded(context.Background())
	for range 3 {
		fail(t, l, "alice", "")
	}
	retryAfter(t, try(l, "alice", ""))
}

// Attempts in flight count against both limits, so simultaneous guesses
// cannot all pass before the first fails; a cancelled one does not count.
func TestLimiterInFlight(t *testing.T) {
	c := newClock()
	l := newLimiter(t, auth.LimitOptions{UserFailures: 3, IPFailures: 5, Now: c.Now})
	var rs []*auth.Reservation
	for i := range 3 {
		r, err := l.Reserve(context.Background(), "alice", fmt.Sprint("10.0.0.", i))
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		rs = append(rs, r)
	}
	if d := retryAfter(t, try(l, "alice", "10.0.0.9")); d != time.Second {
		t.Fatalf("a 4th attempt in flight: RetryAfter %v, want 1s", d)
	}
	rs[0].Cancel(context.Background())
	rs[0].Failed(context.Background()) // after Cancel: nothing
	r, err := l.Reserve(context.Background(), "alice", "10.0.0.9")
	if err != nil {
		t.Fatalf("after a cancelled attempt: %v", err)
	}
	rs[0] = r
	// The address: 5 in flight from one address over several names.
	var ip []*auth.Reservation
	for i := range 5 {
		r, err := l.Reserve(context.Background(), fmt.Sprint("user", i), "192.0.2.1")
		if err != nil {
			t.Fatalf("address attempt %d: %v", i, err)
		}
		ip = append(ip, r)
	}
	retryAfter(t, try(l, "zed", "192.0.2.1"))
	ip[0].Succeeded(context.Background())
	if err := try(l, "zed", "192.0.2.1"); err != nil {
		t.Fatalf("after one attempt ended: %v", err)
	}
	for _, r := range append(rs, ip[1:]...) {
		r.Failed(context.Background())
	}
	// alice: 3 failures, 0 in flight: slowed down now, also from a new
	// address, since the failures came from new addresses.
	retryAfter(t, try(l, "alice", "10.0.0.50"))
}

// A guesser at one address keeps a name slowed down; its owner, from an
// address that is not failing, gets in at every attempt, and the owner's
// successes do not let the guesser start over.
func TestLimiterOwnerNotLockedOut(t *testing.T) {
	c := newClock()
	l := newLimiter(t, auth.LimitOptions{Now: c.Now}) // the defaults: 10, 1s … 1m, 30 per 15m
	const attacker, owner = "198.51.100.66", "192.0.2.10"
	guesses, refused := 0, 0
	var nextOwner time.Time
	// Four minutes in 100 ms steps: the guesser tries whenever it may,
	// the owner every 2 s.
	for end := c.Now().Add(4 * time.Minute); c.Now().Before(end); c.Advance(100 * time.Millisecond) {
		if r, err := l.Reserve(context.Background(), "alice", attacker); err == nil {
			guesses++
			r.Failed(context.Background())
		} else {
			retryAfter(t, err)
			refused++
		}
		if !c.Now().Before(nextOwner) {
			r, err := l.Reserve(context.Background(), "alice", owner)
			if err != nil {
				t.Fatalf("after %d guesses the owner is refused: %v", guesses, err)
			}
			r.Succeeded(context.Background())
			nextOwner = c.Now().Add(2 * time.Second)
		}
	}
	// 10 free, then after 1, 2, 4, 8, 16, 32, 60, 60 s: 18 in 4 minutes.
	if guesses < 10 || guesses > 19 || refused == 0 {
		t.Fatalf("%d guesses admitted and %d refused in 4 minutes, want at most 19: the guesses are not slowed down", guesses, refused)
	}
}

// Simultaneous reservations for one name: exactly the limit get in.
func TestLimiterRace(t *testing.T) {
	l := newLimiter(t, auth.LimitOptions{UserFailures: 10, IPFailures: 1000})
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 60 {
		wg.Go(func() {
			<-start
			r, err := l.Reserve(context.Background(), "alice", "")
			if err != nil {
				return
			}
			mu.Lock()
			admitted++
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			r.Failed(context.Background())
		})
	}
	close(start)
	wg.Wait()
	if admitted != 10 {
		t.Fatalf("%d of 60 simultaneous attempts admitted, want 10", admitted)
	}
}

func TestLimiterSuccessResetsUser(t *testing.T) {
	c := newClock()
	l := newLimiter(t, auth.LimitOptions{UserFailures: 3, IPFailures: 5, Now: c.Now})
	fail(t, l, "alice", "10.0.0.1")
	fail(t, l, "alice", "10.0.0.1")
	r, _ := l.Reserve(context.Background(), "alice", "10.0.0.1")
	r.Succeeded(context.Background())
	fail(t, l, "alice", "10.0.0.1")
	fail(t, l, "alice", "10.0.0.1")
	if err := try(l, "alice", ""); err != nil {
		t.Fatalf("2 failures since the success: %v", err)
	}
	// The address's 4 failures stay: one more and it is limited, for any name.
	fail(t, l, "carol", "10.0.0.1")
	retryAfter(t, try(l, "dave", "10.0.0.1"))
	if err := try(l, "dave", "10.0.0.9"); err != nil {
		t.Fatalf("another address: %v", err)
	}
}

func TestLimiterDefaults(t *testing.T) {
	c := newClock()
	l := newLimiter(t, auth.LimitOptions{Now: c.Now})
	for range 10 {
		fail(t, l, "alice", "")
	}
	if d := retryAfter(t, try(l, "alice", "")); d != time.Second {
		t.Fatalf("after 10 failures RetryAfter = %v, want 1s", d)
	}
	for i := range 30 {
		fail(t, l, fmt.Sprint("user", i), "10.0.0.1")
	}
	if d := retryAfter(t, try(l, "zed", "10.0.0.1")); d != 15*time.Minute {
		t.Fatalf("after 30 failures from one address RetryAfter = %v, want 15m", d)
	}
}

// A flood of names cannot grow the limiter beyond MaxKeys, and what it
// forgets first are the names that stopped failing longest ago.
func TestLimiterBounded(t *testing.T) {
	c := newClock()
	l := newLimiter(t, auth.LimitOptions{UserFailures: 2, UserDelay: time.Minute, IPFailures: 1000, MaxKeys: 10, Now: c.Now})
	fail(t, l, "victim", "")
	fail(t, l, "victim", "")
	c.Advance(time.Second)
	for i := range 9 {
		fail(t, l, fmt.Sprint("flood", i), "")
	}
	retryAfter(t, try(l, "victim", "")) // 10 keys: all kept
	fail(t, l, "flood-last", "")        // an 11th: the oldest, victim, goes
	if err := try(l, "victim", ""); err != nil {
		t.Fatalf("victim still tracked beyond MaxKeys: %v", err)
	}
	// Stale keys go before fresh ones.
	c.Advance(time.Hour)
	fail(t, l, "fresh", "")
	fail(t, l, "fresh", "")
	for i := range 9 {
		fail(t, l, fmt.Sprint("new", i), "")
	}
	retryAfter(t, try(l, "fresh", ""))
	if u, _ := l.Keys(); u > 10 {
		t.Fatalf("%d names tracked, MaxKeys 10", u)
	}
}

// A key keeps only the failures that can matter (UserFailures+32 for a
// name), however many it has in the window, and stays limited.
func TestLimiterTrimmed(t *testing.T) {
	c := newClock()
	l := newLimiter(t, auth.LimitOptions{UserFailures: 2, UserDelay: time.Millisecond, MaxUserDelay: time.Millisecond, IPFailures: 2, Window: time.Hour, Now: c.Now})
	for i := range 50 {
		if i > 0 {
			c.Advance(time.Millisecond) // the delay
		}
		fail(t, l, "alice", "")
	}
	if n := l.Failures("alice"); n != 2+32 {
		t.Fatalf("%d failures of alice kept after 50, want %d", n, 2+32)
	}
	if d := retryAfter(t, try(l, "alice", "")); d != time.Millisecond {
		t.Fatalf("after 50 failures: RetryAfter %v, want the 1ms delay", d)
	}
}

// Sweep forgets names and addresses whose failures left the window.
func TestLimiterSweep(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var reads atomic.Int64 // of the clock: each sweep reads it once
	clock := func() time.Time { reads.Add(1); mu.Lock(); defer mu.Unlock(); return now }
	l := newLimiter(t, auth.LimitOptions{Window: time.Minute, Now: clock})
	for i := range 100 {
		fail(t, l, fmt.Sprint("name", i), fmt.Sprint("10.0.0.", i))
	}
	held, _ := l.Reserve(context.Background(), "held", "10.9.9.9") // in flight: kept
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := reads.Load()
	go l.Sweep(ctx, 5*time.Millisecond)
	// A second sweep's read of the clock comes after the first sweep.
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if n := reads.Load() - base; n < 2 {
			return fmt.Errorf("%d sweeps, want 2", n)
		}
		return nil
	})
	if u, ips := l.Keys(); u != 101 || ips != 101 {
		t.Fatalf("within the window: %d names, %d addresses tracked, want 101", u, ips)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if u, ips := l.Keys(); u != 1 || ips != 1 {
			return fmt.Errorf("after the window: %d names, %d addresses still tracked, want 1 (in flight)", u, ips)
		}
		return nil
	})
	held.Cancel(context.Background())
}

// At most Checks password checks run at once; a login waits CheckWait
// for one, then is refused with ErrBusy.
func TestLimiterChecks(t *testing.T) {
	l := newLimiter(t, auth.LimitOptions{Checks: 2, CheckWait: 50 * time.Millisecond})
	ctx := context.Background()
	for range 2 {
		if err := l.AcquireCheck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := l.AcquireCheck(ctx); !errors.Is(err, auth.ErrBusy) {
		t.Fatalf("a third check: %v, want ErrBusy", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("refused after %v, want a wait of 50ms first", waited)
	}
	got := make(chan error, 1)
	go func() { got <- l.AcquireCheck(ctx) }()
	time.Sleep(10 * time.Millisecond)
	l.ReleaseCheck()
	if err := <-got; err != nil {
		t.Fatalf("a waiting check after one was released: %v", err)
	}
	// As many waiting as 64 per check: the next is refused at once.
	var wg sync.WaitGroup
	for range 128 {
		wg.Go(func() { l.AcquireCheck(ctx) })
	}
	time.Sleep(20 * time.Millisecond)
	start = time.Now()
	if err := l.AcquireCheck(ctx); !errors.Is(err, auth.ErrBusy) || time.Since(start) > 20*time.Millisecond {
		t.Fatalf("with 128 waiting: %v after %v, want ErrBusy at once", err, time.Since(start))
	}
	wg.Wait()
}

// The heap an argon2id check took is returned to the operating system
// when the last check ends, rather than kept resident by an idle server
// until the heap grows again.
func TestLimiterChecksReturnMemory(t *testing.T) {
	hash, err := auth.HashPassword("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, auth.LimitOptions{})
	retained := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapSys - m.HeapReleased
	}
	debug.FreeOSMemory()
	before := retained()
	if err := l.AcquireCheck(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := auth.CheckPassword(hash, "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	l.ReleaseCheck()
	// argon2id's 19 MiB: at most a quarter of it may stay.
	const slack = 5 << 20
	deadline := time.Now().Add(10 * time.Second)
	for retained() > before+slack {
		if time.Now().After(deadline) {
			t.Fatalf("the heap kept %d MiB more than before the check after 10s, want under %d MiB", (retained()-before)>>20, slack>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two servers on one database limit logins as one: the failures one
// records slow the name down and refuse the address on the other, and
// their attempts in flight count on both.
func TestLimiterShared(t *testing.T) {
	c := newClock()
	cfg := storetest.Config(t)
	o := auth.LimitOptions{UserFailures: 4, UserDelay: time.Minute, IPFailures: 6, Now: c.Now}
	a, b := limiterOn(t, storetest.OpenConfig(t, cfg), o), limiterOn(t, storetest.OpenConfig(t, cfg), o)
	servers := []*auth.Limiter{a, b}

	// The name: failures alternating between the servers, from one
	// address, slow it down on both after 4 in all.
	for i := range 4 {
		fail(t, servers[i%2], "alice", "10.0.0.1")
	}
	for i, l := range servers {
		if d := retryAfter(t, try(l, "alice", "10.0.0.1")); d != time.Minute {
			t.Fatalf("server %d after 4 failures on two servers: RetryAfter %v, want 1m", i, d)
		}
	}
	// The address: 2 more failures (other names) make 6 in all, and it is
	// refused on both for any name.
	fail(t, a, "bob", "10.0.0.1")
	fail(t, b, "carol", "10.0.0.1")
	for i, l := range servers {
		if d := retryAfter(t, try(l, "dave", "10.0.0.1")); d != 15*time.Minute {
			t.Fatalf("server %d after 6 failures from one address on two servers: RetryAfter %v, want 15m", i, d)
		}
	}
	// Attempts in flight on one server count on the other.
	var held []*auth.Reservation
	for i := range 4 {
		r, err := a.Reserve(context.Background(), "erin", fmt.Sprint("10.1.0.", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	if d := retryAfter(t, try(b, "erin", "10.1.0.9")); d != time.Second {
		t.Fatalf("4 attempts in flight on the other server: RetryAfter %v, want 1s", d)
	}
	for _, r := range held {
		if err := r.Cancel(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := try(b, "erin", "10.1.0.9"); err != nil {
		t.Fatalf("after the other server's attempts ended: %v", err)
	}
	// A success on one server forgets the name's failures from its
	// address on both.
	r, err := b.Reserve(context.Background(), "frank", "10.2.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		fail(t, a, "frank", "10.2.0.1")
	}
	if err := r.Succeeded(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 { // 5 from the address in all: under its limit
		fail(t, a, "frank", "10.2.0.1")
	}
	if err := try(a, "frank", "10.2.0.1"); err != nil {
		t.Fatalf("2 failures since a success on the other server: %v", err)
	}
}

// A client that hangs up during its password check still fails: the
// failure is recorded though the login's context ended.
func TestLimiterFailedAfterCancel(t *testing.T) {
	c := newClock()
	l := newLimiter(t, auth.LimitOptions{UserFailures: 1, UserDelay: time.Minute, Now: c.Now})
	ctx, cancel := context.WithCancel(context.Background())
	r, err := l.Reserve(ctx, "alice", "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := r.Failed(ctx); err != nil {
		t.Fatalf("Failed after the context ended: %v", err)
	}
	if d := retryAfter(t, try(l, "alice", "10.0.0.1")); d != time.Minute {
		t.Fatalf("RetryAfter %v, want 1m", d)
	}
}

// BenchmarkLimiter is one failed login's work in the limiter (Reserve,
// then Failed: two transactions) for ever new names from ever new
// addresses: with few names tracked, and with the table full (MaxKeys
// names in the window, so each new one evicts the oldest).
func BenchmarkLimiter(b *testing.B) {
	for _, bc := range []struct {
		name          string
		maxKeys, fill int
	}{{"few", 100000, 0}, {"full", 1000, 1000}, {"full10k", 10000, 10000}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			l, err := auth.NewLimiter(storetest.Open(b), auth.LimitOptions{MaxKeys: bc.maxKeys})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			attempt := func() {
				r, err := l.Reserve(ctx, fmt.Sprint("name", n), fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255))
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Failed(ctx); err != nil {
					b.Fatal(err)
				}
				n++
			}
			for range bc.fill {
				attempt()
			}
			b.ResetTimer()
			for b.Loop() {
				attempt()
			}
		})
	}
}

// BenchmarkLimiterRefused is one refused attempt (an address over its
// limit): a read, no write.
func BenchmarkLimiterRefused(b *testing.B) {
	ctx := context.Background()
	l, err := auth.NewLimiter(storetest.Open(b), auth.LimitOptions{IPFailures: 5})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 5 {
		r, err := l.Reserve(ctx, fmt.Sprint("name", i), "192.0.2.1")
		if err != nil {
			b.Fatal(err)
		}
		r.Failed(ctx)
	}
	for b.Loop() {
		if _, err := l.Reserve(ctx, "alice", "192.0.2.1"); !errors.Is(err, auth.ErrRateLimited) {
			b.Fatal(err)
		}
	}
}
