package auth

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
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
	// tracked (each) in table login_attempts, so a flood of made-up
	// names cannot grow it without bound. When full, the transaction
	// that adds a key drops the stale keys first, then, if that freed
	// less than a tenth of MaxKeys, the keys whose last failure is
	// oldest, up to a tenth. Default 10000.
	MaxKeys int
	// Checks is how many password checks may run at once in this
	// process: an argon2id check holds 19 MiB for its ~25 ms, so this
	// bounds the memory a burst of logins can take. Default GOMAXPROCS,
	// at least 2 and at most 8 (more than the CPUs adds memory, not
	// throughput).
	Checks int
	// CheckWait is how long a login waits for a free check before it is
	// refused with ErrBusy. Default 2s.
	CheckWait time.Duration
	// RecordEvery is how often, at most, the refusals of one key (an
	// address or a name that the limits refuse) are written to the audit
	// log by this process: one login_rate_limited record with their
	// count, so that a flood of refused logins cannot flood the log.
	// Default 1 minute.
	RecordEvery time.Duration
	// Now is the clock; default time.Now. Tests set it.
	Now func() time.Time
}

// Limiter bounds logins: failures per user name and per client address
// in a sliding window, attempts in flight counted as if they had failed
// (so that simultaneous guesses cannot all pass a check made before any
// of them fails), and how many password checks run at once.
//
// The failures and the attempts in flight are rows of table
// login_attempts, read and written in the database's serialized
// transactions, so every server on one database limits logins as one
// server would: a flood spread over replicas is refused at the same
// count. They survive a restart. What stays in the process is what
// bounds the process: the password checks running and waiting, and the
// refusals not yet written to the audit log. Safe for concurrent use.
type Limiter struct {
	db      *gorm.DB
	o       LimitOptions
	checks  chan struct{} // a token per running password check
	freeing atomic.Bool   // a FreeOSMemory after the last check is running

	mu sync.Mutex
	// waiting counts logins waiting for a check, bounded so that a flood
	// is refused at once rather than queued.
	waiting int
	// refused counts the logins the limits refused, per key, not yet
	// written to the audit log (at most MaxKeys keys, and refusedOverflow
	// for the rest); Sweep writes them to db.
	refused map[string]*refusals
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

// Kinds of the keys in table login_attempts.
const (
	kindName    = "name"
	kindAddress = "address"
)

// loginAttempt is a row of table login_attempts: one failed login of a
// name or from an address, or one attempt in flight (Pending) until its
// Reservation ends. A name's row says from which address (so that a
// success forgets only its own address's failures) and whether that
// address was failing. At is in microseconds since the epoch: compared as
// a number, the same on both backends.
type loginAttempt struct {
	ID      int64  `gorm:"primaryKey"`
	Kind    string `gorm:"not null;index:login_attempts_key,priority:1"` // kindName or kindAddress
	Key     string `gorm:"column:key_value;not null;index:login_attempts_key,priority:2"`
	At      int64  `gorm:"column:at_us;not null;index:login_attempts_key,priority:3;index:login_attempts_at"`
	Address string `gorm:"not null"` // a name's attempt: its client's address
	Fresh   bool   `gorm:"not null"` // a name's attempt from an address that was not failing
	Pending bool   `gorm:"not null"` // in flight; At is when it was admitted
}

func (loginAttempt) TableName() string { return "login_attempts" }

// pendingLease is how long an attempt in flight counts at most. An
// attempt ends within seconds (CheckWait, then one password check or
// LDAP bind); one older than this belongs to a server that stopped
// without ending it, and must not slow its name down for long.
const pendingLease = 5 * time.Minute

// endTimeout bounds the transaction that ends an attempt. It runs even
// if the login's context ended: a client that hangs up during the
// password check must not take its failure with it. If it fails, the
// attempt still counts as in flight until pendingLease.
const endTimeout = 10 * time.Second

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

// NewLimiter migrates tables login_attempts and login_attempt_keys in db and returns a Limiter
// with o's limits on it.
func NewLimiter(db *gorm.DB, o LimitOptions) (*Limiter, error) {
	if db == nil {
		return nil, fmt.Errorf("auth: NewLimiter needs the database")
	}
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
	if err := db.AutoMigrate(&loginAttempt{}, &keyCount{}); err != nil {
		return nil, fmt.Errorf("auth: migrating tables login_attempts and login_attempt_keys: %w", err)
	}
	return &Limiter{db: db, o: o, checks: make(chan struct{}, o.Checks), refused: map[string]*refusals{}}, nil
}

// retrySoon is the Retry-After of a refusal caused by attempts in flight,
// which end within a password check's time.
const retrySoon = time.Second

// Reserve admits one login attempt of user from ip (either may be empty)
// or returns a *RateLimitedError. The attempt counts as in flight, against
// both limits and on every server, until the Reservation's Failed,
// Succeeded or Cancel. Any other error is the database's.
func (l *Limiter) Reserve(ctx context.Context, user, ip string) (*Reservation, error) {
	// A flood is mostly refusals: answer them from a read, without the
	// write lock. (The read may be a moment old; failures only leave the
	// window later than it says, or go with a success elsewhere, so at
	// worst it refuses what the next attempt admits.) What it admits is
	// checked again in the transaction.
	if _, err := l.check(l.db.WithContext(ctx), user, ip); err != nil {
		return nil, err
	}
	r := &Reservation{l: l, user: user, ip: ip}
	// One transaction: the check and the attempt's rows are one step for
	// every server (transactions that write are serialized).
	err := l.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		c, err := l.check(tx, user, ip)
		if err != nil {
			return err
		}
		for _, k := range []struct {
			a    loginAttempt
			live []loginAttempt
		}{
			{loginAttempt{Kind: kindName, Key: user, Address: ip, Fresh: c.fresh}, c.name},
			{loginAttempt{Kind: kindAddress, Key: ip}, c.addr},
		} {
			if k.a.Key == "" {
				continue
			}
			if len(k.live) == 0 {
				if err := l.makeRoom(tx, k.a.Kind, c.now); err != nil {
					return err
				}
			}
			k.a.At, k.a.Pending = c.now.UnixMicro(), true
			if err := tx.Create(&k.a).Error; err != nil {
				return err
			}
			h := held{loginAttempt: k.a}
			for _, a := range k.live {
				if !a.Pending && a.Fresh == k.a.Fresh {
					h.failures++
				}
			}
			r.held = append(r.held, h)
		}
		return nil
	})
	var limited *RateLimitedError
	if errors.As(err, &limited) {
		return nil, limited
	}
	if err != nil {
		return nil, fmt.Errorf("auth: admitting a login attempt: %w", err)
	}
	return r, nil
}

// admission is what check read of an attempt's keys.
type admission struct {
	now        time.Time
	name, addr []loginAttempt // the keys' live rows
	fresh      bool           // from an address that is not failing
}

// check reads the live rows of user and ip in db and returns them, or a
// *RateLimitedError if they refuse the attempt.
func (l *Limiter) check(db *gorm.DB, user, ip string) (admission, error) {
	c := admission{now: l.o.Now()}
	var err error
	if c.addr, err = l.live(db, kindAddress, ip, c.now); err != nil {
		return c, fmt.Errorf("auth: reading the failures from %s: %w", ip, err)
	}
	if wait := l.ipWait(c.addr, c.now); wait > 0 {
		return c, &RateLimitedError{RetryAfter: wait, limit: "address"}
	}
	c.fresh = ip != "" && len(c.addr) == 0
	if c.name, err = l.live(db, kindName, user, c.now); err != nil {
		return c, fmt.Errorf("auth: reading the failures of %s: %w", user, err)
	}
	if wait := l.userWait(c.name, c.fresh, c.now); wait > 0 {
		return c, &RateLimitedError{RetryAfter: wait, limit: "name"}
	}
	return c, nil
}

// live returns key's failures within the window and its attempts in
// flight, oldest first; none for the empty key.
func (l *Limiter) live(tx *gorm.DB, kind, key string, now time.Time) ([]loginAttempt, error) {
	if key == "" {
		return nil, nil
	}
	var rows []loginAttempt
	err := tx.Where("kind = ? AND key_value = ?", kind, key).
		Where("(NOT pending AND at_us > ?) OR (pending AND at_us > ?)", now.Add(-l.o.Window).UnixMicro(), now.Add(-pendingLease).UnixMicro()).
		Order("at_us, id").Find(&rows).Error
	return rows, err
}

// split returns the times of rows' failures, oldest first, and how many
// of rows are in flight; only the fresh ones if onlyFresh.
func split(rows []loginAttempt, onlyFresh bool) (failed []time.Time, inFlight int) {
	for _, a := range rows {
		switch {
		case onlyFresh && !a.Fresh:
		case a.Pending:
			inFlight++
		default:
			failed = append(failed, time.UnixMicro(a.At))
		}
	}
	return failed, inFlight
}

func (l *Limiter) ipWait(rows []loginAttempt, now time.Time) time.Duration {
	failed, inFlight := split(rows, false)
	if len(failed)+inFlight < l.o.IPFailures {
		return 0
	}
	if len(failed) < l.o.IPFailures {
		return retrySoon
	}
	return failed[len(failed)-l.o.IPFailures].Add(l.o.Window).Sub(now)
}

// userWait is how long an attempt on a name must wait because of its
// rows: all of them, or for an attempt from a fresh address (one that is
// not failing) those from fresh addresses.
func (l *Limiter) userWait(rows []loginAttempt, fresh bool, now time.Time) time.Duration {
	failed, inFlight := split(rows, fresh)
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
	return failed[len(failed)-1].Add(delay).Sub(now)
}

// A Reservation is one admitted login attempt. Exactly one of its
// methods is called when the attempt is over; later calls do nothing.
// Each writes the outcome in a transaction of its own that runs to its
// end even if ctx ends meanwhile (bounded by endTimeout).
type Reservation struct {
	l        *Limiter
	user, ip string
	held     []held // the attempt's rows in flight
	done     atomic.Bool
}

// held is one of an attempt's rows in flight, and how many failures its
// key had in the window when the attempt was admitted (for a name, from
// addresses as fresh as this one's).
type held struct {
	loginAttempt
	failures int
}

// Failed records the attempt as a failed login of its name and from its
// address.
func (r *Reservation) Failed(ctx context.Context) error {
	return r.end(ctx, func(tx *gorm.DB, now time.Time) error {
		for _, a := range r.held {
			res := tx.Model(&loginAttempt{}).Where("id = ? AND pending", a.ID).
				Updates(map[string]any{"pending": false, "at_us": now.UnixMicro()})
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				// Swept or evicted while in flight: record it anew.
				if err := r.l.makeRoom(tx, a.Kind, now); err != nil {
					return err
				}
				b := loginAttempt{Kind: a.Kind, Key: a.Key, At: now.UnixMicro(), Address: a.Address, Fresh: a.Fresh}
				if err := tx.Create(&b).Error; err != nil {
					return err
				}
			}
			// Each attempt adds one failure: a key with fewer than
			// keep needs no trim. (Attempts admitted together may pass
			// keep by their number; the next one trims.)
			if a.failures+1 > r.l.keep() {
				if err := r.l.trim(tx, a.loginAttempt); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Succeeded ends the attempt and forgets the user's failures from its
// address (all of them if the address is unknown): the owner who
// mistyped is not slowed down next time, but a guesser elsewhere stays
// slowed. The address's failures stay: one good password must not reset
// a guesser trying many names.
func (r *Reservation) Succeeded(ctx context.Context) error {
	return r.end(ctx, func(tx *gorm.DB, _ time.Time) error {
		if err := r.release(tx); err != nil || r.user == "" {
			return err
		}
		own := tx.Where("kind = ? AND key_value = ? AND NOT pending", kindName, r.user)
		if r.ip != "" {
			own = own.Where("address = ?", r.ip)
		}
		return own.Delete(&loginAttempt{}).Error
	})
}

// Cancel ends an attempt that decided nothing (the server failed), so it
// does not count.
func (r *Reservation) Cancel(ctx context.Context) error {
	return r.end(ctx, func(tx *gorm.DB, _ time.Time) error { return r.release(tx) })
}

// release deletes the attempt's rows in flight.
func (r *Reservation) release(tx *gorm.DB) error {
	ids := make([]int64, len(r.held))
	for i, a := range r.held {
		ids[i] = a.ID
	}
	if len(ids) == 0 {
		return nil
	}
	return tx.Where("id IN ? AND pending", ids).Delete(&loginAttempt{}).Error
}

func (r *Reservation) end(ctx context.Context, f func(*gorm.DB, time.Time) error) error {
	if !r.done.CompareAndSwap(false, true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	err := r.l.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return f(tx, r.l.o.Now()) })
	if err != nil {
		return fmt.Errorf("auth: recording the end of a login attempt: %w", err)
	}
	return nil
}

// trim drops a's key's oldest failures beyond those that can matter:
// only the last ones decide (the limit, and for names the failures that
// double the delay up to its cap). A name's failures from fresh and from
// failing addresses are kept apart, as they are counted apart.
func (l *Limiter) trim(tx *gorm.DB, a loginAttempt) error {
	keep := l.keep()
	same := func() *gorm.DB {
		return tx.Model(&loginAttempt{}).Where("kind = ? AND key_value = ? AND fresh = ? AND NOT pending", a.Kind, a.Key, a.Fresh)
	}
	// The newest failure beyond keep, if there is one, and all older.
	var edge []loginAttempt
	if err := same().Order("at_us DESC, id DESC").Offset(keep).Limit(1).Find(&edge).Error; err != nil || len(edge) == 0 {
		return err
	}
	e := edge[0]
	return same().Where("at_us < ? OR (at_us = ? AND id <= ?)", e.At, e.At, e.ID).Delete(&loginAttempt{}).Error
}

// keep is how many failures of one key can matter (see trim).
func (l *Limiter) keep() int { return max(l.o.UserFailures+32, l.o.IPFailures) }

// stale selects kind's rows that no longer count: failures that left the
// window, attempts in flight past pendingLease.
func (l *Limiter) stale(tx *gorm.DB, now time.Time) *gorm.DB {
	return tx.Where("(NOT pending AND at_us <= ?) OR (pending AND at_us <= ?)", now.Add(-l.o.Window).UnixMicro(), now.Add(-pendingLease).UnixMicro())
}

// keyCount is an upper bound on how many keys of a kind table
// login_attempts holds (table login_attempt_keys): makeRoom adds one for
// each key that may be new and counts them exactly only when the bound
// reaches MaxKeys, so that adding a key does not cost a scan of the
// table. Removals are not subtracted; Sweep and makeRoom set the exact
// count.
type keyCount struct {
	Kind string `gorm:"primaryKey"`
	Keys int64  `gorm:"not null"`
}

func (keyCount) TableName() string { return "login_attempt_keys" }

// makeRoom makes room for key among kind's keys, in the transaction that
// adds it, so that a flood of made-up names or addresses cannot grow the
// table beyond MaxKeys keys of each kind. When MaxKeys are tracked it
// drops every stale row of kind and then, if that left less room than a
// tenth of MaxKeys, the keys whose latest failure is oldest until it
// does (a tenth at once, so that the scan this takes is paid once per
// tenth of MaxKeys new keys). Keys with attempts in flight stay.
func (l *Limiter) makeRoom(tx *gorm.DB, kind string, now time.Time) error {
	c := keyCount{Kind: kind}
	if err := tx.Where(&c).FirstOrCreate(&c).Error; err != nil {
		return err
	}
	if c.Keys++; c.Keys > int64(l.o.MaxKeys) {
		n, err := l.countKeys(tx, kind)
		if err != nil {
			return err
		}
		room := int64(max(l.o.MaxKeys/10, 1))
		if n > int64(l.o.MaxKeys)-room {
			if err := l.stale(tx.Where("kind = ?", kind), now).Delete(&loginAttempt{}).Error; err != nil {
				return err
			}
			if n, err = l.countKeys(tx, kind); err != nil {
				return err
			}
		}
		if over := n - (int64(l.o.MaxKeys) - room); over > 0 {
			var oldest []string
			err := tx.Model(&loginAttempt{}).Where("kind = ?", kind).
				Group("key_value").Having("SUM(CASE WHEN pending THEN 1 ELSE 0 END) = 0").
				Order("MAX(at_us), key_value").Limit(int(over)).Pluck("key_value", &oldest).Error
			if err != nil {
				return err
			}
			if len(oldest) > 0 {
				if err := tx.Where("kind = ? AND key_value IN ?", kind, oldest).Delete(&loginAttempt{}).Error; err != nil {
					return err
				}
			}
			n -= int64(len(oldest))
		}
		c.Keys = n + 1
	}
	return tx.Save(&c).Error
}

// countKeys is how many keys of kind table login_attempts holds.
func (l *Limiter) countKeys(tx *gorm.DB, kind string) (int64, error) {
	var n int64
	err := tx.Model(&loginAttempt{}).Where("kind = ?", kind).Distinct("key_value").Count(&n).Error
	return n, err
}

// Sweep deletes, every interval until ctx ends, the rows of table
// login_attempts that no longer count, so that keys of names tried once
// do not stay until MaxKeys pushes them out, and writes the refusals due
// to the audit log. With several servers on one database each sweeps;
// the deletes are idempotent.
func (l *Limiter) Sweep(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A database or a log that cannot be written now is swept at the
		// next tick; the refusals' counts are kept for it.
		_ = l.sweep(ctx)
		_ = l.recordRefusals(ctx, false)
	}
}

// sweep deletes the rows that no longer count and sets the keys' counts
// exact, in one transaction.
func (l *Limiter) sweep(ctx context.Context) error {
	return l.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := l.stale(tx, l.o.Now()).Delete(&loginAttempt{}).Error; err != nil {
			return err
		}
		for _, kind := range []string{kindName, kindAddress} {
			n, err := l.countKeys(tx, kind)
			if err != nil {
				return err
			}
			if err := tx.Save(&keyCount{Kind: kind, Keys: n}).Error; err != nil {
				return err
			}
		}
		return nil
	})
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
	for k, r := range l.refused {
		if r.count > 0 && (all || now.Sub(r.recorded) >= l.o.RecordEvery) {
			due[k] = *r
			r.count, r.recorded = 0, now
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
