package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"github.com/hashicorp/go-hclog"
	"gorm.io/gorm"
)

// openDB opens the database c once more, as another process would.
func openDB(t *testing.T, c store.Config) *gorm.DB {
	t.Helper()
	return storetest.OpenConfig(t, c)
}

// tempDB opens a fresh database of the backend under test and returns
// its configuration for openDB.
func tempDB(t *testing.T) (*gorm.DB, store.Config) {
	t.Helper()
	c := storetest.Config(t)
	return openDB(t, c), c
}

func newQueue(t *testing.T, db *gorm.DB, o Options) *Queue {
	t.Helper()
	if o.Poll == 0 {
		o.Poll = 5 * time.Millisecond
	}
	if o.MinBackoff == 0 {
		o.MinBackoff, o.MaxBackoff = time.Millisecond, 2*time.Millisecond
	}
	if o.Logger == nil && testing.Verbose() {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug})
	}
	q, err := New(db, o)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// start runs q until the test ends, and checks that Run returns then.
func start(t *testing.T, q *Queue) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run did not return 10s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if !cond() {
			return errors.New("waiting for " + what)
		}
		return nil
	})
}

// ticks counts the reads of a queue's clock: each claim, lease check and
// schedule reads it, so more reads prove the queue polled (and what it
// did not start, it did not find due), however loaded the machine.
type ticks struct {
	n   atomic.Int64
	now func() time.Time
}

func countTicks(now func() time.Time) *ticks { return &ticks{now: now} }

func (c *ticks) Now() time.Time {
	c.n.Add(1)
	return c.now()
}

// wait returns after n more reads of the clock.
func (c *ticks) wait(t *testing.T, n int64) {
	t.Helper()
	end := c.n.Load() + n
	waitFor(t, fmt.Sprintf("%d reads of the queue's clock", n), func() bool { return c.n.Load() >= end })
}

func waitJob(t *testing.T, q *Queue, id string, cond func(Job) bool) Job {
	t.Helper()
	var j Job
	waitFor(t, "job "+id, func() bool {
		var err error
		j, err = q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return cond(j)
	})
	return j
}

func hasStatus(s Status) func(Job) bool { return func(j Job) bool { return j.Status == s } }

func mustEnqueue(t *testing.T, q *Queue, kind string, payload any, o EnqueueOptions) Job {
	t.Helper()
	j, err := q.Enqueue(context.Background(), kind, payload, o)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestRunSucceeds(t *testing.T) {
	ctx := context.Background()
	db, _ := tempDB(t)
	q := newQueue(t, db, Options{})
	q.Handle("greet", func(ctx context.Context, j *Job) (any, error) {
		var p struct{ Name string }
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			return nil, Permanent(err)
		}
		return map[string]string{"greeting": "hello " + p.Name}, nil
	})
	if _, err := q.Enqueue(ctx, "nope", nil, EnqueueOptions{}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("Enqueue of an unknown kind: %v, want an error naming it", err)
	}
	if _, err := q.Get(ctx, "job_missing"); !errors.Is(err, ErrNotFound) || !errors.Is(err, agentcore.ErrNotFound) {
		t.Errorf("Get of an unknown job: %v, want ErrNotFound wrapping agentcore.ErrNotFound", err)
	}

	queued := mustEnqueue(t, q, "greet", map[string]string{"name": "alice"}, EnqueueOptions{Owner: "u1"})
	if !strings.HasPrefix(queued.ID, "job_") || queued.Status != StatusQueued || queued.MaxAttempts != DefaultMaxAttempts || queued.Owner != "u1" {
		t.Fatalf("Enqueue = %+v", queued)
	}
	start(t, q)
	j := waitJob(t, q, queued.ID, hasStatus(StatusSucceeded))
	if string(j.Result) != `{"greeting":"hello alice"}` || j.Attempts != 1 || j.LastError != "" || j.Started.IsZero() || j.Finished.Before(j.Started) {
		t.Fatalf("succeeded job = %+v (result %s)", j, j.Result)
	}

	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"id", "kind", "owner", "payload", "status", "attempts", "max_attempts", "result", "run_at", "created", "updated", "started", "finished"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON of a job lacks %q: %s", k, b)
		}
	}
	for _, k := range []string{"claim", "Claim", "lease_until", "LeaseUntil"} {
		if _, ok := m[k]; ok {
			t.Errorf("JSON of a job shows %q: %s", k, b)
		}
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestRetryAfterBackoff(t *testing.T) {
	db, _ := tempDB(t)
	clk := &clock{t: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}
	tk := countTicks(clk.Now)
	q := newQueue(t, db, Options{Now: tk.Now, MinBackoff: time.Minute, MaxBackoff: time.Hour})
	var calls atomic.Int32
	q.Handle("flaky", func(ctx context.Context, j *Job) (any, error) {
		if n := calls.Add(1); n < 3 {
			return nil, fmt.Errorf("failure %d", n)
		}
		return "done", nil
	})
	id := mustEnqueue(t, q, "flaky", nil, EnqueueOptions{}).ID
	start(t, q)

	// Attempt n waits MinBackoff·2^(n-1), less up to half of it.
	for n, backoff := range []time.Duration{time.Minute, 2 * time.Minute} {
		attempt := n + 1
		j := waitJob(t, q, id, func(j Job) bool { return j.Attempts == attempt && j.Status == StatusQueued })
		now := clk.Now()
		if j.LastError != fmt.Sprint("failure ", attempt) {
			t.Errorf("after attempt %d: last error %q", attempt, j.LastError)
		}
		if wait := j.RunAt.Sub(now); wait < backoff/2 || wait > backoff {
			t.Fatalf("after attempt %d: next attempt in %v, want between %v and %v", attempt, wait, backoff/2, backoff)
		}
		tk.wait(t, 20) // many polls: none may start it early
		if c := calls.Load(); int(c) != attempt {
			t.Fatalf("the job ran %d times before its RunAt, want %d", c, attempt)
		}
		clk.Add(backoff + time.Second)
	}
	j := waitJob(t, q, id, hasStatus(StatusSucceeded))
	if j.Attempts != 3 || string(j.Result) != `"done"` || j.LastError != "failure 2" {
		t.Fatalf("job after two failures = %+v (result %s)", j, j.Result)
	}
}

func TestBackoffCapped(t *testing.T) {
	db, _ := tempDB(t)
	q := newQueue(t, db, Options{MinBackoff: 2 * time.Second, MaxBackoff: 5 * time.Minute})
	for n := 1; n < 40; n++ {
		want := min(2*time.Second<<(min(n, 20)-1), 5*time.Minute)
		if d := q.backoff(n); d < want/2 || d > want {
			t.Fatalf("backoff(%d) = %v, want between %v and %v", n, d, want/2, want)
		}
	}
}

func TestOutOfAttempts(t *testing.T) {
	db, _ := tempDB(t)
	tk := countTicks(time.Now)
	q := newQueue(t, db, Options{Now: tk.Now})
	var calls atomic.Int32
	q.Handle("fail", func(ctx context.Context, j *Job) (any, error) {
		return nil, fmt.Errorf("boom %d", calls.Add(1))
	})
	id := mustEnqueue(t, q, "fail", nil, EnqueueOptions{MaxAttempts: 3}).ID
	start(t, q)
	j := waitJob(t, q, id, hasStatus(StatusFailed))
	if j.Attempts != 3 || j.LastError != "boom 3" || j.Finished.IsZero() || len(j.Result) != 0 {
		t.Fatalf("failed job = %+v", j)
	}
	tk.wait(t, 10)
	if c := calls.Load(); c != 3 {
		t.Fatalf("handler ran %d times, want 3", c)
	}
}

func TestPermanent(t *testing.T) {
	db, _ := tempDB(t)
	q := newQueue(t, db, Options{})
	bad := errors.New("payload has no name")
	q.Handle("strict", func(ctx context.Context, j *Job) (any, error) {
		return nil, fmt.Errorf("strict: %w", Permanent(bad))
	})
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	if !errors.Is(Permanent(bad), bad) {
		t.Error("Permanent(err) does not wrap err")
	}
	if !errors.Is(fmt.Errorf("x: %w", Permanent(bad)), ErrPermanent) || errors.Is(bad, ErrPermanent) {
		t.Error("errors.Is(err, ErrPermanent) does not tell Permanent errors")
	}
	id := mustEnqueue(t, q, "strict", nil, EnqueueOptions{}).ID
	start(t, q)
	j := waitJob(t, q, id, hasStatus(StatusFailed))
	if j.Attempts != 1 || j.LastError != "strict: payload has no name" {
		t.Fatalf("job with a permanent error = %+v", j)
	}
}

func TestPanic(t *testing.T) {
	db, _ := tempDB(t)
	q := newQueue(t, db, Options{Workers: 1})
	var calls atomic.Int32
	q.Handle("panicky", func(ctx context.Context, j *Job) (any, error) {
		if calls.Add(1) == 1 {
			panic("kaboom")
		}
		return "recovered", nil
	})
	start(t, q)
	id := mustEnqueue(t, q, "panicky", nil, EnqueueOptions{}).ID
	j := waitJob(t, q, id, hasStatus(StatusSucceeded))
	if j.Attempts != 2 || j.LastError != "panic: kaboom" || string(j.Result) != `"recovered"` {
		t.Fatalf("job that panicked once = %+v", j)
	}
}

// A process that died with a job running leaves it "running"; once its
// lease expires, another Queue runs it again.
func TestRestartReclaimsExpiredLease(t *testing.T) {
	ctx := context.Background()
	_, c := tempDB(t)
	db1 := openDB(t, c)
	q1 := newQueue(t, db1, Options{})
	q1.Handle("work", func(ctx context.Context, j *Job) (any, error) { return nil, nil })
	dead := mustEnqueue(t, q1, "work", nil, EnqueueOptions{}).ID
	deadLast := mustEnqueue(t, q1, "work", nil, EnqueueOptions{MaxAttempts: 1}).ID
	alive := mustEnqueue(t, q1, "work", nil, EnqueueOptions{}).ID
	now := time.Now().UTC()
	claim := func(id string, lease time.Time) {
		err := db1.Model(&Job{}).Where("id = ?", id).Updates(map[string]any{
			"status": StatusRunning, "attempts": 1, "claim": "claim-" + id, "started": now.Add(-time.Hour), "lease_until": lease,
		}).Error
		if err != nil {
			t.Fatal(err)
		}
	}
	claim(dead, now.Add(-time.Minute))
	claim(deadLast, now.Add(-time.Minute))
	claim(alive, now.Add(time.Hour)) // another process still holds it
	store.Close(db1)

	db2 := openDB(t, c)
	tk := countTicks(time.Now)
	q2 := newQueue(t, db2, Options{Now: tk.Now})
	var ran sync.Map
	q2.Handle("work", func(ctx context.Context, j *Job) (any, error) {
		ran.Store(j.ID, true)
		return "again", nil
	})
	start(t, q2)
	j := waitJob(t, q2, dead, hasStatus(StatusSucceeded))
	if j.Attempts != 2 || j.LastError != interrupted || string(j.Result) != `"again"` {
		t.Errorf("reclaimed job = %+v", j)
	}
	j = waitJob(t, q2, deadLast, hasStatus(StatusFailed))
	if j.Attempts != 1 || j.LastError != interrupted {
		t.Errorf("reclaimed job out of attempts = %+v", j)
	}
	tk.wait(t, 10)
	if j, err := q2.Get(ctx, alive); err != nil || j.Status != StatusRunning || j.Claim != "claim-"+alive {
		t.Errorf("job under a live lease = %+v, %v; want it left running", j, err)
	}
	if _, ok := ran.Load(deadLast); ok {
		t.Error("a job out of attempts ran again")
	}
}

// A job running longer than its lease keeps it: another Queue on the
// database does not take it over while the heartbeat renews it.
func TestLeaseRenewed(t *testing.T) {
	_, c := tempDB(t)
	var runs atomic.Int32
	var queues []*Queue
	for range 2 {
		// A lease short against the job, long against a renewal's
		// database write on a loaded 2-core machine under -race (a 100 ms
		// lease renewed every 33 ms was taken over there now and then).
		q := newQueue(t, openDB(t, c), Options{Lease: 600 * time.Millisecond})
		q.Handle("slow", func(ctx context.Context, j *Job) (any, error) {
			runs.Add(1)
			select {
			case <-time.After(2 * time.Second):
				return "slow", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		queues = append(queues, q)
	}
	id := mustEnqueue(t, queues[0], "slow", nil, EnqueueOptions{}).ID
	for _, q := range queues {
		start(t, q)
	}
	j := waitJob(t, queues[0], id, hasStatus(StatusSucceeded))
	if r := runs.Load(); r != 1 || j.Attempts != 1 || j.LastError != "" {
		t.Fatalf("job longer than its lease: %d runs, %+v; want one attempt", r, j)
	}
}

// A worker whose lease was taken over stops its handler and records
// nothing: the job belongs to the new claim.
func TestLeaseLost(t *testing.T) {
	db, _ := tempDB(t)
	tk := countTicks(time.Now)
	q := newQueue(t, db, Options{Lease: 30 * time.Millisecond, Now: tk.Now})
	started, canceled := make(chan struct{}), make(chan struct{})
	// A 30 ms lease that a loaded machine fails to renew in time is lost
	// to the queue itself, which runs the job again: at least once.
	var startOnce, cancelOnce sync.Once
	q.Handle("victim", func(ctx context.Context, j *Job) (any, error) {
		startOnce.Do(func() { close(started) })
		<-ctx.Done()
		cancelOnce.Do(func() { close(canceled) })
		return "stale outcome", nil
	})
	id := mustEnqueue(t, q, "victim", nil, EnqueueOptions{}).ID
	start(t, q)
	<-started
	// Another process took the job over and holds it for an hour.
	err := db.Model(&Job{}).Where("id = ?", id).Updates(map[string]any{"claim": "someone-else", "lease_until": time.Now().UTC().Add(time.Hour)}).Error
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end when its lease was taken over")
	}
	tk.wait(t, 10)
	j, err := q.Get(context.Background(), id)
	if err != nil || j.Status != StatusRunning || j.Claim != "someone-else" || len(j.Result) != 0 {
		t.Fatalf("job after its lease was taken over = %+v, %v; want it left to the new claim", j, err)
	}
}

// Stopping the queue puts a running job back without counting the attempt.
func TestShutdownRequeues(t *testing.T) {
	db, _ := tempDB(t)
	q := newQueue(t, db, Options{})
	started := make(chan struct{})
	q.Handle("long", func(ctx context.Context, j *Job) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	id := mustEnqueue(t, q, "long", nil, EnqueueOptions{}).ID
	stop := start(t, q)
	<-started
	stop()
	j, err := q.Get(context.Background(), id)
	if err != nil || j.Status != StatusQueued || j.Attempts != 0 || j.LastError != interrupted || j.Claim != "" {
		t.Fatalf("job running at shutdown = %+v, %v; want queued, 0 attempts, %q", j, err, interrupted)
	}
}

func TestTwoQueuesRunEachJobOnce(t *testing.T) {
	ctx := context.Background()
	_, c := tempDB(t)
	var mu sync.Mutex
	runs := make(map[string]int)
	handler := func(ctx context.Context, j *Job) (any, error) {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		time.Sleep(time.Millisecond)
		return nil, nil
	}
	var queues []*Queue
	for range 2 {
		q := newQueue(t, openDB(t, c), Options{Workers: 4, Poll: 2 * time.Millisecond})
		q.Handle("count", handler)
		queues = append(queues, q)
	}
	const n = 50
	ids := make(map[string]bool)
	for i := range n {
		ids[mustEnqueue(t, queues[i%2], "count", i, EnqueueOptions{}).ID] = true
	}
	for _, q := range queues {
		start(t, q)
	}
	db := queues[0].db
	waitFor(t, "every job to succeed", func() bool {
		var done int64
		if err := db.WithContext(ctx).Model(&Job{}).Where("status = ?", StatusSucceeded).Count(&done).Error; err != nil {
			t.Fatal(err)
		}
		return done == n
	})
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != n {
		t.Errorf("%d jobs ran, want %d", len(runs), n)
	}
	for id, c := range runs {
		if c != 1 || !ids[id] {
			t.Errorf("job %s ran %d times", id, c)
		}
	}
}

// Claims racing for the one due job, from two processes' connections
// and outside any transaction, take it once: on PostgreSQL (READ
// COMMITTED) the claim's UPDATE re-checks its WHERE on the row another
// claim changed meanwhile, and finds it no longer queued.
func TestConcurrentClaimsTakeAJobOnce(t *testing.T) {
	ctx := context.Background()
	_, c := tempDB(t)
	var queues []*Queue
	for range 2 {
		q := newQueue(t, openDB(t, c), Options{})
		q.Handle("once", func(ctx context.Context, j *Job) (any, error) { return nil, nil })
		queues = append(queues, q)
	}
	const rounds, claimers = 20, 8
	for round := range rounds {
		id := mustEnqueue(t, queues[0], "once", round, EnqueueOptions{}).ID
		var wg sync.WaitGroup
		var taken atomic.Int32
		begin := make(chan struct{})
		for i := range claimers {
			wg.Go(func() {
				<-begin
				j, err := queues[i%2].claim(ctx)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if j != nil {
					if j.ID != id || j.Attempts != 1 {
						t.Errorf("claimed %s (attempt %d); want %s, attempt 1", j.ID, j.Attempts, id)
					}
					taken.Add(1)
				}
			})
		}
		close(begin)
		wg.Wait()
		if n := taken.Load(); n != 1 {
			t.Fatalf("round %d: the job was claimed %d times; want once", round, n)
		}
		j, err := queues[1].Get(ctx, id)
		if err != nil || j.Status != StatusRunning || j.Attempts != 1 {
			t.Fatalf("round %d: the claimed job = %+v, %v; want running, 1 attempt", round, j, err)
		}
	}
}

// A claim that chose a due job and then waited for its row while
// another connection ran an attempt and queued the job again for later
// does not take it early. On SQLite the claim waits for the write lock
// before it reads anything; on PostgreSQL it waits for the row, then
// re-checks its outer WHERE on the row as the other left it.
func TestClaimRechecksTheRowItWaitedFor(t *testing.T) {
	ctx := context.Background()
	_, c := tempDB(t)
	q := newQueue(t, openDB(t, c), Options{})
	q.Handle("later", func(ctx context.Context, j *Job) (any, error) { return nil, nil })
	id := mustEnqueue(t, q, "later", nil, EnqueueOptions{}).ID

	other := openDB(t, c)
	sqlDB, err := other.DB()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pg := store.Backend(other) == store.BackendPostgres
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if pg {
		exec("BEGIN")
	} else {
		exec("BEGIN IMMEDIATE")
	}
	exec("UPDATE jobs SET status = 'running', attempts = 1 WHERE id = $1", id)

	type claimed struct {
		j   *Job
		err error
	}
	done := make(chan claimed, 1)
	go func() {
		j, err := q.claim(ctx)
		done <- claimed{j, err}
	}()
	if pg {
		waitFor(t, "the claim to wait for the job's row", func() bool {
			var n int64
			if err := other.Raw("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE jobs%'").Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			return n > 0
		})
	}
	exec("UPDATE jobs SET status = 'queued', run_at = $1 WHERE id = $2", time.Now().Add(time.Hour), id)
	exec("COMMIT")
	if r := <-done; r.j != nil || r.err != nil {
		t.Fatalf("claim = %+v, %v; want no job (the job is due in an hour)", r.j, r.err)
	}
}

func TestSchedulerRunsPeriodicallyOneAtATime(t *testing.T) {
	ctx := context.Background()
	db, _ := tempDB(t)
	q := newQueue(t, db, Options{Workers: 4, Poll: 2 * time.Millisecond})
	var inflight, most, runs atomic.Int32
	q.Handle("tick", func(ctx context.Context, j *Job) (any, error) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(15 * time.Millisecond) // longer than the interval
		runs.Add(1)
		return nil, nil
	})
	q.Every("ticker", 5*time.Millisecond, "tick", map[string]int{"n": 1})
	start(t, q)
	waitFor(t, "three runs", func() bool { return runs.Load() >= 3 })
	if m := most.Load(); m != 1 {
		t.Errorf("%d jobs of one schedule ran at once, want 1", m)
	}
	var active int64
	db.WithContext(ctx).Model(&Job{}).Where("schedule = ? AND status IN ?", "ticker", []Status{StatusQueued, StatusRunning}).Count(&active)
	if active > 1 {
		t.Errorf("%d jobs of one schedule queued or running, want at most 1", active)
	}
	var j Job
	if err := db.WithContext(ctx).Where("schedule = ?", "ticker").Take(&j).Error; err != nil || string(j.Payload) != `{"n":1}` || j.Kind != "tick" {
		t.Errorf("scheduled job = %+v, %v", j, err)
	}
}

// A schedule that fell due several times while no server ran runs once,
// even with two servers starting together.
func TestSchedulerCatchesUpOnce(t *testing.T) {
	ctx := context.Background()
	_, c := tempDB(t)
	var runs atomic.Int32
	var queues []*Queue
	var clocks []*ticks
	for i := range 2 {
		db := openDB(t, c)
		tk := countTicks(time.Now)
		clocks = append(clocks, tk)
		q := newQueue(t, db, Options{Now: tk.Now})
		q.Handle("hourly", func(ctx context.Context, j *Job) (any, error) {
			runs.Add(1)
			return nil, nil
		})
		q.Every("hourly", time.Hour, "hourly", nil)
		if i == 0 {
			last := time.Now().UTC().Add(-10 * time.Hour)
			if err := db.Create(&scheduleRow{Name: "hourly", LastRun: last}).Error; err != nil {
				t.Fatal(err)
			}
		}
		queues = append(queues, q)
	}
	for _, q := range queues {
		start(t, q)
	}
	waitFor(t, "the overdue run", func() bool { return runs.Load() >= 1 })
	for _, tk := range clocks {
		tk.wait(t, 20)
	}
	var jobs int64
	queues[0].db.WithContext(ctx).Model(&Job{}).Where("schedule = ?", "hourly").Count(&jobs)
	if r := runs.Load(); r != 1 || jobs != 1 {
		t.Fatalf("after 10 missed hours: %d runs, %d jobs; want 1", r, jobs)
	}
	var s scheduleRow
	if err := queues[0].db.Where("name = ?", "hourly").Take(&s).Error; err != nil || time.Since(s.LastRun) > time.Minute {
		t.Errorf("schedule row = %+v, %v; want last run now", s, err)
	}
}

func TestRunRefusesMisuse(t *testing.T) {
	db, _ := tempDB(t)
	q := newQueue(t, db, Options{})
	q.Every("orphan", time.Hour, "unhandled", nil)
	if err := q.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "unhandled") {
		t.Errorf("Run with a schedule of an unhandled kind: %v", err)
	}

	q = newQueue(t, db, Options{})
	start(t, q)
	waitFor(t, "Run to start", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.running
	})
	if err := q.Run(context.Background()); err == nil {
		t.Error("a second Run did not fail")
	}
}

func TestWorkspaceGC(t *testing.T) {
	layers, err := overlay.Open(filepath.Join(t.TempDir(), "workspaces"))
	if err != nil {
		t.Fatal(err)
	}
	old, err := layers.Create("c1")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Touch(time.Now().Add(-40 * 24 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := layers.Create("c2"); err != nil {
		t.Fatal(err)
	}

	db, _ := tempDB(t)
	q := newQueue(t, db, Options{})
	q.Handle(KindWorkspaceGC, WorkspaceGC(layers, overlay.DefaultTTL))
	id := mustEnqueue(t, q, KindWorkspaceGC, nil, EnqueueOptions{}).ID
	start(t, q)
	j := waitJob(t, q, id, hasStatus(StatusSucceeded))
	if string(j.Result) != `{"removed":["c1"]}` {
		t.Errorf("result %s, want c1 removed", j.Result)
	}
	if _, err := layers.Get("c1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("old layer after GC: %v, want it gone", err)
	}
	if _, err := layers.Get("c2"); err != nil {
		t.Errorf("fresh layer after GC: %v", err)
	}

	// Nothing left to remove: an empty list, not null.
	id = mustEnqueue(t, q, KindWorkspaceGC, nil, EnqueueOptions{}).ID
	if j := waitJob(t, q, id, hasStatus(StatusSucceeded)); string(j.Result) != `{"removed":[]}` {
		t.Errorf("second GC's result %s", j.Result)
	}
}

// A running job's progress is visible while it runs, and stays.
func TestProgress(t *testing.T) {
	db, _ := tempDB(t)
	q := newQueue(t, db, Options{})
	reported := make(chan struct{})
	release := make(chan struct{})
	q.Handle("counted", func(ctx context.Context, j *Job) (any, error) {
		if err := q.SetProgress(ctx, j, Progress{Done: 3, Total: 10, Unit: "files"}); err != nil {
			return nil, err
		}
		close(reported)
		<-release
		return nil, q.SetProgress(ctx, j, Progress{Done: 10, Total: 10, Unit: "files"})
	})
	start(t, q)
	j := mustEnqueue(t, q, "counted", nil, EnqueueOptions{})
	<-reported
	got, err := q.Get(context.Background(), j.ID)
	if err != nil || got.Progress == nil || *got.Progress != (Progress{3, 10, "files"}) || got.Status != StatusRunning {
		t.Fatalf("running job: %+v %v", got, err)
	}
	close(release)
	got = waitJob(t, q, j.ID, hasStatus(StatusSucceeded))
	if got.Progress == nil || got.Progress.Done != 10 {
		t.Fatalf("finished job's progress: %+v", got.Progress)
	}
}

// Two servers with one schedule enqueue it once per period between
// them, however often each looks.
func TestSchedulerOncePerPeriodOnTwoQueues(t *testing.T) {
	ctx := context.Background()
	_, c := tempDB(t)
	clk := &clock{t: time.Now().UTC()}
	var runs atomic.Int32
	var queues []*Queue
	var ticks []*ticks
	for range 2 {
		tk := countTicks(clk.Now)
		q := newQueue(t, openDB(t, c), Options{Now: tk.Now})
		q.Handle("hourly", func(ctx context.Context, j *Job) (any, error) {
			runs.Add(1)
			return nil, nil
		})
		q.Every("hourly", time.Hour, "hourly", nil)
		queues, ticks = append(queues, q), append(ticks, tk)
	}
	for _, q := range queues {
		start(t, q)
	}
	const periods = 4
	for p := 1; p <= periods; p++ {
		waitFor(t, fmt.Sprintf("run %d", p), func() bool { return runs.Load() >= int32(p) })
		// Both looked many times within the period, and found nothing
		// more due.
		for _, tk := range ticks {
			tk.wait(t, 20)
		}
		if r := runs.Load(); r != int32(p) {
			t.Fatalf("period %d: %d runs, want %d", p, r, p)
		}
		clk.Add(time.Hour)
	}
	var n int64
	queues[0].db.WithContext(ctx).Model(&Job{}).Where("schedule = ?", "hourly").Count(&n)
	if n != periods {
		t.Fatalf("%d jobs of the schedule over %d periods, want %d", n, periods, periods)
	}
}

// A node's jobs run on that node alone: two queues of different nodes
// on one database each run their own GC schedule and their own enqueued
// jobs, never the other's, and both run the jobs of no node.
func TestNodeJobsRunOnTheirNode(t *testing.T) {
	ctx := context.Background()
	_, c := tempDB(t)
	type run struct{ node, job string }
	var mu sync.Mutex
	var runs []run
	nodes := []string{"node_a", "node_b"}
	var queues []*Queue
	for _, node := range nodes {
		q := newQueue(t, openDB(t, c), Options{Node: node, Workers: 4})
		record := func(ctx context.Context, j *Job) (any, error) {
			mu.Lock()
			runs = append(runs, run{node, j.ID})
			mu.Unlock()
			return nil, nil
		}
		q.Handle("gc", record)
		q.Handle("work", record)
		q.EveryNode("gc", time.Hour, "gc", nil)
		queues = append(queues, q)
	}
	// Jobs for each node enqueued through the other's queue (as a
	// replica that received the request would), and jobs of no node.
	want := map[string]string{} // job ID → the node it must run on ("" either)
	for i := range 20 {
		node := nodes[i%2]
		if i%4 == 3 {
			node = ""
		}
		j := mustEnqueue(t, queues[(i+1)%2], "work", i, EnqueueOptions{Node: node})
		want[j.ID] = node
	}
	for _, q := range queues {
		start(t, q)
	}
	waitFor(t, "every job and both GC runs", func() bool {
		var done int64
		queues[0].db.WithContext(ctx).Model(&Job{}).Where("status = ?", StatusSucceeded).Count(&done)
		return done == int64(len(want)+len(nodes))
	})
	var gcs []Job
	if err := queues[0].db.WithContext(ctx).Where("kind = ?", "gc").Order("node").Find(&gcs).Error; err != nil {
		t.Fatal(err)
	}
	if len(gcs) != 2 || gcs[0].Node != "node_a" || gcs[0].Schedule != "gc@node_a" || gcs[1].Node != "node_b" || gcs[1].Schedule != "gc@node_b" {
		t.Fatalf("GC jobs = %+v, want one per node, each of its node's schedule", gcs)
	}
	for _, j := range gcs {
		want[j.ID] = j.Node
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]int{}
	for _, r := range runs {
		seen[r.job]++
		node, ok := want[r.job]
		if !ok || node != "" && node != r.node {
			t.Errorf("job %s of node %q ran on %s", r.job, node, r.node)
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("job %s (node %q) ran %d times, want once", id, want[id], seen[id])
		}
	}
}

// On a Queue of no node (one server on SQLite), EveryNode is Every: its
// jobs are of no node, its row the schedule's name.
func TestEveryNodeWithoutNode(t *testing.T) {
	ctx := context.Background()
	db, _ := tempDB(t)
	q := newQueue(t, db, Options{})
	var runs atomic.Int32
	q.Handle("gc", func(ctx context.Context, j *Job) (any, error) { runs.Add(1); return nil, nil })
	q.EveryNode("gc", time.Hour, "gc", nil)
	start(t, q)
	waitFor(t, "the GC run", func() bool { return runs.Load() == 1 })
	var j Job
	if err := db.WithContext(ctx).Where("kind = ?", "gc").Take(&j).Error; err != nil || j.Node != "" || j.Schedule != "gc" {
		t.Fatalf("GC job = %+v, %v; want one of no node, schedule gc", j, err)
	}
}
