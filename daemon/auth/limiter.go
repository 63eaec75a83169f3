package auth

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
)

// LimitOptions configures a Limiter. Zero fields take the defaults.
type LimitOptions struct {
	// UserFailures is how many failed logins one user name may have
	// within Window before its logins are slowed down: after that, one
	// attempt at a time, each UserDelay after the last failure, the delay
	// doubling with every further failure up to MaxUserDelay. The right
	// password still gets in after the delay.
	//
	// Attempts from an address that is not failing (no failure within
	// Window and no attempt in flight, whatever the name) are slowed down
	// only by the name's failures that came from such addresses, so a
	// guesser at a few addresses cannot keep the owner out; guessing from
	// ever new addresses slows those down too, after UserFailures of
	// them. Default 10.
	UserFailures int
	// UserDelay is the first delay beyond UserFailures. Default 1s.
	UserDelay time.Duration
	// MaxUserDelay caps the delay. Default 1 minute.
	MaxUserDelay time.Duration
	// IPFailures is how many failed logins one client address may have
	// within Window, whatever names it tries, before its logins are
	// refused until the oldest failure leaves the window. Default 30.
	IPFailures int
	// Window is the sliding window failures are counted in. Default 15
	// minutes.
	Window time.Duration
	// MaxKeys bounds how many user names and how many addresses are
	// tracked (each), so a flood of made-up names cannot exhaust memory.
	// When full, stale keys are dropped first, then the ones whose last
	// failure is oldest. Default 10000.
	MaxKeys int
	// Checks is how many password checks may run at once: an argon2id
	// check holds 19 MiB for its ~25 ms, so this bounds the memory a
	// burst of logins can take. Default GOMAXPROCS, at least 2 and at
	// most 8 (more than the CPUs adds memory, not throughput).
	Checks int
	// CheckWait is how long a login waits for a free check before it is
	// refused with ErrBusy. Default 2s.
	CheckWait time.Duration
	// RecordEvery is how often, at most, the refusals of one key (an
	// address or a name that the limits refuse) are written to the audit
	// log: one login_rate_limited record with their count, so that a
	// flood of refused logins cannot flood the log. Default 1 minute.
	RecordEvery time.Duration
	// Now is the clock; default time.Now. Tests set it.
	Now func() time.Time
}

// Limiter bounds logins: failures per user name and per client address
// in a sliding window, attempts in flight counted as if they had failed
// (so that simultaneous guesses cannot all pass a check made before any
// of them fails), and how many password checks run at once. It lives in
// the process's memory: counts are lost on restart and not shared
// between servers. Safe for concurrent use.
type Limiter struct {
	o       LimitOptions
	checks  chan struct{} // a token per running password check
	freeing atomic.Bool   // a FreeOSMemory after the last check is running
	// waiting counts logins waiting for a check, bounded so that a flood
	// is refused at once rather than queued.
	waiting int

	mu    sync.Mutex
	users map[string]*attempts
	ips   map[string]*attempts
	// refused counts the logins the limits refused, per key, not yet
	// written to the audit log (at most MaxKeys keys, and refusedOverflow
	// for the rest); db is where Sweep writes them, set by
	// NewAuthenticator.
	refused map[string]*refusals
	db      *gorm.DB
}

// refusals are a key's refused logins since its last audit record.
type refusals struct {
	limit, name, ip string // the limit that refused; the latest attempt's name and address
	count           int    // refused since the last record
	recorded        time.Time
}

// refusedOverflow is the key that counts the refusals of every key
// beyond MaxKeys, in one record.
const refusedOverflow = "*"

// attempts are one key's failures within the window, oldest first, and
// its attempts in flight.
type attempts struct {
	failed   []failure
	inFlight int
	// fresh and freshInFlight are the failures and attempts in flight
	// (among the above) of a name's attempts from addresses that were
	// not failing.
	fresh         []failure
	freshInFlight int
}

// failure is one failed login: when, and for a name's failures, from
// which address (so that a success forgets only its own address's).
type failure struct {
	at time.Time
	ip string
}

// RateLimitedError refuses a login because of too many recent failures
// (or attempts in flight). errors.Is(err, ErrRateLimited) matches it.
type RateLimitedError struct {
	// RetryAfter is when a login may be tried again (the Retry-After
	// header's value).
	RetryAfter time.Duration
	limit      string // "address" or "name": which limit refused
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
	if o.UserDelay <= 0 {
		o.UserDelay = time.Second
	}
	if o.MaxUserDelay <= 0 {
		o.MaxUserDelay = time.Minute
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
	if o.Checks <= 0 {
		o.Checks = min(max(runtime.GOMAXPROCS(0), 2), 8)
	}
	if o.CheckWait <= 0 {
		o.CheckWait = 2 * time.Second
	}
	if o.RecordEvery <= 0 {
		o.RecordEvery = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Limiter{o: o, checks: make(chan struct{}, o.Checks), users: map[string]*attempts{}, ips: map[string]*attempts{}, refused: map[string]*refusals{}}
}

// retrySoon is the Retry-After of a refusal caused by attempts in flight,
// which end within a password check's time.
const retrySoon = time.Second

// Reserve admits one login attempt of user from ip (either may be empty)
// or returns a *RateLimitedError. The attempt counts as in flight, against
// both limits, until the Reservation's Failed, Succeeded or Cancel.
func (l *Limiter) Reserve(user, ip string) (*Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.o.Now()
	if wait := l.ipWait(ip, now); wait > 0 {
		return nil, &RateLimitedError{RetryAfter: wait, limit: "address"}
	}
	// ipWait pruned the address: its key is gone if it is not failing.
	fresh := ip != "" && l.ips[ip] == nil
	if wait := l.userWait(user, fresh, now); wait > 0 {
		return nil, &RateLimitedError{RetryAfter: wait, limit: "name"}
	}
	u := l.entry(l.users, user, now)
	u.inFlight++
	if fresh {
		u.freshInFlight++
	}
	l.entry(l.ips, ip, now).inFlight++
	return &Reservation{l: l, user: user, ip: ip, fresh: fresh}, nil
}

func (l *Limiter) ipWait(ip string, now time.Time) time.Duration {
	a := l.prune(l.ips, ip, now)
	if a == nil || len(a.failed)+a.inFlight < l.o.IPFailures {
		return 0
	}
	if len(a.failed) < l.o.IPFailures {
		return retrySoon
	}
	return a.failed[len(a.failed)-l.o.IPFailures].at.Add(l.o.Window).Sub(now)
}

// userWait is how long an attempt on user must wait because of the
// name's failures: all of them, or for an attempt from a fresh address
// (one that is not failing) those from fresh addresses.
func (l *Limiter) userWait(user string, fresh bool, now time.Time) time.Duration {
	a := l.prune(l.users, user, now)
	if a == nil {
		return 0
	}
	if fresh {
		return l.slowdown(a.fresh, a.freshInFlight, now)
	}
	return l.slowdown(a.failed, a.inFlight, now)
}

// slowdown is the wait that failed and inFlight of one name impose.
func (l *Limiter) slowdown(failed []failure, inFlight int, now time.Time) time.Duration {
	if len(failed)+inFlight < l.o.UserFailures {
		return 0
	}
	if inFlight > 0 {
		return retrySoon
	}
	// Beyond the free failures: one at a time, each after a delay that
	// doubles with every failure.
	delay := l.o.MaxUserDelay
	if extra := len(failed) - l.o.UserFailures; extra < 30 && l.o.UserDelay<<extra < delay {
		delay = l.o.UserDelay << extra
	}
	return failed[len(failed)-1].at.Add(delay).Sub(now)
}

// A Reservation is one admitted login attempt. Exactly one of its
// methods is called when the attempt is over; later calls do nothing.
type Reservation struct {
	l        *Limiter
	user, ip string
	fresh    bool // from an address that was not failing
	done     bool
}

// Failed records the attempt as a failed login.
func (r *Reservation) Failed() {
	r.end(func(l *Limiter, now time.Time) {
		f := failure{now, r.ip}
		if a := l.record(l.users, r.user, f); a != nil && r.fresh {
			a.fresh = l.trim(append(a.fresh, f))
		}
		l.record(l.ips, r.ip, failure{at: now})
	})
}

// Succeeded ends the attempt and forgets the user's failures from its
// address (all of them if the address is unknown): the owner who
// mistyped is not slowed down next time, but a guesser elsewhere stays
// slowed. The address's failures stay: one good password must not reset
// a guesser trying many names.
func (r *Reservation) Succeeded() {
	r.end(func(l *Limiter, _ time.Time) {
		if a := l.users[r.user]; a != nil {
			own := func(f failure) bool { return r.ip == "" || f.ip == r.ip }
			a.failed = slices.DeleteFunc(a.failed, own)
			a.fresh = slices.DeleteFunc(a.fresh, own)
		}
	})
}

// Cancel ends an attempt that decided nothing (the server failed), so it
// does not count.
func (r *Reservation) Cancel() { r.end(func(*Limiter, time.Time) {}) }

func (r *Reservation) end(f func(*Limiter, time.Time)) {
	l := r.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	for _, k := range []struct {
		m   map[string]*attempts
		key string
	}{{l.users, r.user}, {l.ips, r.ip}} {
		if a := k.m[k.key]; a != nil && a.inFlight > 0 {
			a.inFlight--
		}
	}
	if a := l.users[r.user]; a != nil && r.fresh && a.freshInFlight > 0 {
		a.freshInFlight--
	}
	f(l, l.o.Now())
}

// entry returns key's attempts, creating them (and making room) if need
// be; nil for the empty key.
func (l *Limiter) entry(m map[string]*attempts, key string, now time.Time) *attempts {
	if key == "" {
		return &attempts{}
	}
	a := m[key]
	if a == nil {
		if len(m) >= l.o.MaxKeys {
			l.evict(m, now)
		}
		a = &attempts{}
		m[key] = a
	}
	return a
}

// record adds f to key's failures and returns its attempts (nil for the
// empty key).
func (l *Limiter) record(m map[string]*attempts, key string, f failure) *attempts {
	if key == "" {
		return nil
	}
	a := l.entry(m, key, f.at)
	a.failed = l.trim(append(a.failed, f))
	return a
}

// trim keeps the failures that can matter: only the last ones decide
// (the limit, and for names the failures that double the delay up to
// its cap).
func (l *Limiter) trim(failed []failure) []failure {
	if keep := max(l.o.UserFailures+32, l.o.IPFailures); len(failed) > keep {
		return append(failed[:0], failed[len(failed)-keep:]...)
	}
	return failed
}

// prune drops key's failures that left the window and returns what is
// left, nil (and the key forgotten) if nothing is.
func (l *Limiter) prune(m map[string]*attempts, key string, now time.Time) *attempts {
	a, ok := m[key]
	if !ok {
		return nil
	}
	cut := now.Add(-l.o.Window)
	inWindow := func(fs []failure) []failure {
		i := 0
		for i < len(fs) && !fs[i].at.After(cut) {
			i++
		}
		return fs[i:]
	}
	a.failed, a.fresh = inWindow(a.failed), inWindow(a.fresh)
	if len(a.failed) == 0 && len(a.fresh) == 0 && a.inFlight == 0 {
		delete(m, key)
		return nil
	}
	return a
}

// evict makes room for one key: it drops every stale key, and if none
// was stale, the key whose latest failure is oldest. Keys with attempts
// in flight stay.
func (l *Limiter) evict(m map[string]*attempts, now time.Time) {
	l.sweepMap(m, now)
	var oldest string
	var oldestT time.Time
	for k, a := range m {
		if a.inFlight > 0 || len(a.failed) == 0 {
			continue
		}
		if last := a.failed[len(a.failed)-1].at; oldest == "" || last.Before(oldestT) {
			oldest, oldestT = k, last
		}
	}
	if len(m) >= l.o.MaxKeys && oldest != "" {
		delete(m, oldest)
	}
}

// sweepMap drops m's keys whose failures all left the window and that
// have no attempt in flight.
func (l *Limiter) sweepMap(m map[string]*attempts, now time.Time) {
	cut := now.Add(-l.o.Window)
	for k, a := range m {
		if a.inFlight == 0 && (len(a.failed) == 0 || !a.failed[len(a.failed)-1].at.After(cut)) {
			delete(m, k)
		}
	}
}

// Sweep forgets, every interval until ctx ends, the names and addresses
// whose failures all left the window, so that keys of names tried once
// do not stay in memory until MaxKeys pushes them out.
func (l *Limiter) Sweep(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		now := l.o.Now()
		l.sweepMap(l.users, now)
		l.sweepMap(l.ips, now)
		l.mu.Unlock()
		// A log that cannot be written now keeps the counts for the
		// next sweep.
		_ = l.recordRefusals(ctx, false)
	}
}

// noteRefusal counts a login that e refused and returns the record to
// write now, if the key's last one is at least RecordEvery old.
func (l *Limiter) noteRefusal(e *RateLimitedError, name, ip string) *refusals {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := e.limit + ":" + ip
	if e.limit == "name" {
		key = e.limit + ":" + name
	}
	r := l.refused[key]
	if r == nil {
		if len(l.refused) >= l.o.MaxKeys {
			l.dropRecorded(l.o.Now())
		}
		if len(l.refused) >= l.o.MaxKeys {
			key = refusedOverflow
			e = &RateLimitedError{limit: "overflow"}
		}
		if r = l.refused[key]; r == nil {
			r = &refusals{}
			l.refused[key] = r
		}
	}
	r.limit, r.name, r.ip = e.limit, name, ip
	r.count++
	now := l.o.Now()
	if now.Sub(r.recorded) < l.o.RecordEvery {
		return nil
	}
	out := *r
	r.count, r.recorded = 0, now
	return &out
}

// dropRecorded forgets the keys with no refusal since their last record
// that is at least RecordEvery old.
func (l *Limiter) dropRecorded(now time.Time) {
	for k, r := range l.refused {
		if r.count == 0 && now.Sub(r.recorded) >= l.o.RecordEvery {
			delete(l.refused, k)
		}
	}
}

// recordRefusals writes the refusals counted since each key's last
// record that is at least RecordEvery old (all of them if all), in one
// transaction. Their counts are taken before the write and given back if
// it fails, so that noteRefusal meanwhile never counts them twice.
func (l *Limiter) recordRefusals(ctx context.Context, all bool) error {
	l.mu.Lock()
	db, now := l.db, l.o.Now()
	due := map[string]refusals{}
	if db != nil {
		for k, r := range l.refused {
			if r.count > 0 && (all || now.Sub(r.recorded) >= l.o.RecordEvery) {
				due[k] = *r
				r.count, r.recorded = 0, now
			}
		}
	}
	l.dropRecorded(now)
	l.mu.Unlock()
	if len(due) == 0 {
		return nil
	}
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, r := range due {
			if _, err := audit.Append(tx, r.entry()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		for k, d := range due {
			if r := l.refused[k]; r != nil {
				r.count += d.count
			} else {
				l.refused[k] = &d
			}
		}
	}
	return err
}

// entry is r's audit record: Source is the latest refused address.
func (r refusals) entry() audit.Entry {
	return audit.Entry{Kind: audit.KindLoginRateLimited, Source: r.ip, Data: map[string]any{"limit": r.limit, "name": r.name, "count": r.count}}
}

// waitingPerCheck bounds the logins waiting for a password check: about
// as many as one check serves within the default CheckWait.
const waitingPerCheck = 64

// acquireCheck waits up to CheckWait for one of the password checks;
// release it with releaseCheck. Past the wait, or with as many logins
// waiting as could be served in it, it refuses with ErrBusy.
func (l *Limiter) acquireCheck(ctx context.Context) error {
	select {
	case l.checks <- struct{}{}:
		return nil
	default:
	}
	l.mu.Lock()
	full := l.waiting >= waitingPerCheck*cap(l.checks)
	if !full {
		l.waiting++
	}
	l.mu.Unlock()
	if full {
		return fmt.Errorf("%w: %d password checks running and %d logins waiting", ErrBusy, cap(l.checks), waitingPerCheck*cap(l.checks))
	}
	defer func() {
		l.mu.Lock()
		l.waiting--
		l.mu.Unlock()
	}()
	t := time.NewTimer(l.o.CheckWait)
	defer t.Stop()
	select {
	case l.checks <- struct{}{}:
		return nil
	case <-t.C:
		return fmt.Errorf("%w: no password check free within %v", ErrBusy, l.o.CheckWait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// releaseCheck ends a password check. The last check of a burst returns
// the heap to the operating system: an argon2id check leaves 19 MiB of
// garbage that, with the heap goal it raised, no GC cycle would collect
// until the heap grew again, so an idle server would keep it resident.
// One collection runs at a time, outside the login's path.
func (l *Limiter) releaseCheck() {
	<-l.checks
	if len(l.checks) == 0 && l.freeing.CompareAndSwap(false, true) {
		go func() {
			debug.FreeOSMemory()
			l.freeing.Store(false)
		}()
	}
}
