package auth

import (
	"fmt"
	"sync"
	"time"
)

// LimitOptions configures a Limiter. Zero fields take the defaults.
type LimitOptions struct {
	// UserFailures is how many failed logins one user name may have
	// within Window before its logins are refused. Default 10.
	UserFailures int
	// IPFailures is the same for one client address, whatever names it
	// tries. Default 30.
	IPFailures int
	// Window is the sliding window failures are counted in. Default 15
	// minutes.
	Window time.Duration
	// MaxKeys bounds how many user names and how many addresses are
	// tracked (each), so a flood of made-up names cannot exhaust memory.
	// When full, stale keys are dropped first, then the ones whose last
	// failure is oldest. Default 10000.
	MaxKeys int
	// Now is the clock; default time.Now. Tests set it.
	Now func() time.Time
}

// Limiter counts failed logins per user name and per client address in a
// sliding window. It lives in the process's memory: counts are lost on
// restart and not shared between servers. Safe for concurrent use.
type Limiter struct {
	o     LimitOptions
	mu    sync.Mutex
	users map[string][]time.Time // failure times, oldest first, at most UserFailures
	ips   map[string][]time.Time
}

// RateLimitedError refuses a login because of too many recent failures.
// errors.Is(err, ErrRateLimited) matches it.
type RateLimitedError struct {
	// RetryAfter is when the oldest counted failure leaves the window
	// (the Retry-After header's value).
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("auth: too many failed logins; retry in %v", e.RetryAfter.Round(time.Second))
}

func (e *RateLimitedError) Is(target error) bool { return target == ErrRateLimited }

// NewLimiter returns a Limiter with o's limits.
func NewLimiter(o LimitOptions) *Limiter {
	if o.UserFailures <= 0 {
		o.UserFailures = 10
	}
	if o.IPFailures <= 0 {
		o.IPFailures = 30
	}
	if o.Window <= 0 {
		o.Window = 15 * time.Minute
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 10000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Limiter{o: o, users: map[string][]time.Time{}, ips: map[string][]time.Time{}}
}

// Check returns a *RateLimitedError if user or ip (either may be empty)
// has used up its failures, nil otherwise. It records nothing.
func (l *Limiter) Check(user, ip string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Now()
	wait := max(l.wait(l.users, user, l.o.UserFailures, now), l.wait(l.ips, ip, l.o.IPFailures, now))
	if wait > 0 {
		return &RateLimitedError{RetryAfter: wait}
	}
	return nil
}

// Failed records a failed login of user from ip.
func (l *Limiter) Failed(user, ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Now()
	l.record(l.users, user, l.o.UserFailures, now)
	l.record(l.ips, ip, l.o.IPFailures, now)
}

// Succeeded forgets user's failures. The address's failures stay: one
// good password must not reset a guesser trying many names.
func (l *Limiter) Succeeded(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.users, user)
}

// wait is how long key must wait, 0 if it may try now.
func (l *Limiter) wait(m map[string][]time.Time, key string, limit int, now time.Time) time.Duration {
	if key == "" {
		return 0
	}
	ts := l.prune(m, key, now)
	if len(ts) < limit {
		return 0
	}
	return ts[len(ts)-limit].Add(l.o.Window).Sub(now)
}

func (l *Limiter) record(m map[string][]time.Time, key string, limit int, now time.Time) {
	if key == "" {
		return
	}
	ts := l.prune(m, key, now)
	if ts == nil && len(m) >= l.o.MaxKeys {
		l.evict(m, now)
	}
	ts = append(ts, now)
	if len(ts) > limit {
		// Only the last limit failures decide; older ones cannot matter.
		ts = append(ts[:0], ts[len(ts)-limit:]...)
	}
	m[key] = ts
}

// prune drops key's failures that left the window and returns the rest.
func (l *Limiter) prune(m map[string][]time.Time, key string, now time.Time) []time.Time {
	ts, ok := m[key]
	if !ok {
		return nil
	}
	cut := now.Add(-l.o.Window)
	i := 0
	for i < len(ts) && !ts[i].After(cut) {
		i++
	}
	if i == len(ts) {
		delete(m, key)
		return nil
	}
	ts = ts[i:]
	m[key] = ts
	return ts
}

// evict makes room for one key: it drops every stale key, and if none
// was stale, the key whose latest failure is oldest.
func (l *Limiter) evict(m map[string][]time.Time, now time.Time) {
	cut := now.Add(-l.o.Window)
	var oldest string
	var oldestT time.Time
	for k, ts := range m {
		last := ts[len(ts)-1]
		if !last.After(cut) {
			delete(m, k)
			continue
		}
		if oldest == "" || last.Before(oldestT) {
			oldest, oldestT = k, last
		}
	}
	if len(m) >= l.o.MaxKeys && oldest != "" {
		delete(m, oldest)
	}
}
