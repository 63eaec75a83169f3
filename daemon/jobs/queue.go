// Package jobs runs the server's background work (ingestion, workspace GC)
// from a queue in the server's database (SQLite or PostgreSQL), with
// retries and periodic schedules.
//
// A job is claimed by one conditional UPDATE, so several processes on one
// database (the replicas of a deployment, or a server and codumentorctl)
// never run it twice at once. A job may name a node (EnqueueOptions.Node):
// only the Queue of that node (Options.Node) claims it, for work on a
// node's own files; EveryNode schedules such work on every node.
//
// A running job holds a lease that its worker renews; a job whose lease
// expired (its process died) is put back in the queue by the next Queue
// that looks, and that interrupted attempt counts, so a job that kills
// its server cannot do so forever. Delivery is therefore at least
// once: a handler must cope with being run again after a crash.
//
// A queue with handlers and a daily schedule:
//
//	q, err := jobs.New(db, jobs.Options{Logger: log})
//	q.Handle(jobs.KindWorkspaceGC, jobs.WorkspaceGC(layers, ttl))
//	q.EveryNode("workspace_gc", 24*time.Hour, jobs.KindWorkspaceGC, nil)
//	go q.Run(ctx)
//	j, err := q.Enqueue(ctx, "ingest", payload, jobs.EnqueueOptions{Owner: user})
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/sandboxkit/randid"
	"github.com/hashicorp/go-hclog"
	"gorm.io/gorm"
)

// ErrNotFound is wrapped by Get's error for an unknown job. It wraps
// agentcore.ErrNotFound.
var ErrNotFound = fmt.Errorf("jobs: %w", agentcore.ErrNotFound)

// Status is where a job is in its life.
type Status string

const (
	StatusQueued    Status = "queued"    // waiting for RunAt and a worker
	StatusRunning   Status = "running"   // claimed by a worker
	StatusSucceeded Status = "succeeded" // the handler returned no error; Result is set
	StatusFailed    Status = "failed"    // out of attempts, or a Permanent error; see LastError
)

// Defaults of Options and EnqueueOptions.
const (
	DefaultWorkers     = 2
	DefaultPoll        = time.Second
	DefaultLease       = time.Minute
	DefaultMinBackoff  = 2 * time.Second
	DefaultMaxBackoff  = 5 * time.Minute
	DefaultMaxAttempts = 5
)

// interrupted is the LastError of an attempt cut short by its process
// stopping.
const interrupted = "interrupted: server stopped"

// Job is one unit of work in table jobs, as GET /api/v1/jobs/{id} shows it.
type Job struct {
	ID          string          `json:"id" gorm:"primaryKey"`
	Kind        string          `json:"kind" gorm:"not null"`
	Owner       string          `json:"owner" gorm:"not null;index"`               // user ID, or "" for the system's jobs
	Schedule    string          `json:"schedule,omitempty" gorm:"not null;index"`  // the Every that enqueued it
	Node        string          `json:"node,omitempty" gorm:"not null;default:''"` // the only node whose Queue may run it; "" any
	Payload     json.RawMessage `json:"payload"`
	Status      Status          `json:"status" gorm:"not null;index:jobs_status_run_at,priority:1"`
	Attempts    int             `json:"attempts" gorm:"not null"` // started attempts, the running one included
	MaxAttempts int             `json:"max_attempts" gorm:"not null"`
	LastError   string          `json:"last_error,omitempty" gorm:"not null"` // of the last failed attempt
	Result      json.RawMessage `json:"result,omitempty"`
	RunAt       time.Time       `json:"run_at" gorm:"not null;index:jobs_status_run_at,priority:2"` // earliest start of the next attempt
	Created     time.Time       `json:"created" gorm:"not null"`
	Updated     time.Time       `json:"updated" gorm:"not null"`
	Started     time.Time       `json:"started,omitzero"`  // of the last attempt
	Finished    time.Time       `json:"finished,omitzero"` // when it succeeded or failed for good

	// Progress is what the running attempt last reported (SetProgress).
	Progress *Progress `json:"progress,omitempty" gorm:"serializer:json"`

	// Claim identifies the attempt that holds the job, so that a worker
	// whose lease was taken over cannot record its outcome.
	Claim      string    `json:"-" gorm:"not null"`
	LeaseUntil time.Time `json:"-"`
}

func (Job) TableName() string { return "jobs" }

// Progress is how far a running job is: Done of Total Units (e.g.
// "objects" while fetching, "files" while indexing).
type Progress struct {
	Done  int64  `json:"done"`
	Total int64  `json:"total"`
	Unit  string `json:"unit"`
}

// SetProgress records the progress of j's running attempt, for GET
// /api/v1/jobs/{id}. A handler calls it with the Job it was given; an
// attempt that lost its claim changes nothing.
func (q *Queue) SetProgress(ctx context.Context, j *Job, p Progress) error {
	// A map update bypasses the field's serializer: encode it here.
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	err = q.db.WithContext(ctx).Model(&Job{}).Where("id = ? AND claim = ?", j.ID, j.Claim).
		Updates(map[string]any{"progress": string(b), "updated": q.now()}).Error
	if err != nil {
		return fmt.Errorf("jobs: recording the progress of %s: %w", j.ID, err)
	}
	return nil
}

// A Handler runs one attempt of a job. Its result is stored as JSON in
// Job.Result. An error makes the attempt fail: the job is retried after a
// backoff unless the error is Permanent or the job is out of attempts. ctx
// ends when the queue stops or loses the job's lease; a handler should
// then return promptly.
type Handler func(ctx context.Context, j *Job) (result any, err error)

// Options configure a Queue. Zero values mean the defaults.
type Options struct {
	Logger     hclog.Logger     // nil: no logging
	Workers    int              // jobs run at once by this Queue (DefaultWorkers)
	Poll       time.Duration    // how often to look for due jobs and schedules (DefaultPoll)
	Lease      time.Duration    // how long a claim lasts without renewal (DefaultLease); renewed every Lease/3
	MinBackoff time.Duration    // delay before the first retry, doubled for each further one (DefaultMinBackoff)
	MaxBackoff time.Duration    // cap of the delay (DefaultMaxBackoff)
	Now        func() time.Time // the clock, for tests (time.Now)
	// Node is this Queue's node (the cluster's name for this server):
	// it runs the jobs of no node and those of Node. Empty: only those
	// of no node.
	Node string
}

// EnqueueOptions configure one job.
type EnqueueOptions struct {
	Owner       string    // user ID; "" for a system job
	MaxAttempts int       // attempts before the job fails (DefaultMaxAttempts)
	RunAt       time.Time // earliest start; zero: now
	// Node, if set, is the only node whose Queue may run the job (its
	// work is that node's files). A job of a node that never returns
	// stays queued.
	Node string
	// InTx, if set, runs in the transaction that stores the job (to
	// record it in the audit log); its error enqueues nothing.
	InTx func(tx *gorm.DB, j Job) error
}

// Queue runs the jobs of table jobs whose kinds it has handlers for. Its
// methods are safe for concurrent use.
type Queue struct {
	db  *gorm.DB
	log hclog.Logger
	o   Options

	mu        sync.Mutex
	handlers  map[string]Handler
	schedules []*schedule
	running   bool
	wake      chan struct{} // closed and replaced to wake idle workers
}

// New migrates tables jobs and schedules in db and returns a Queue.
func New(db *gorm.DB, o Options) (*Queue, error) {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := db.AutoMigrate(&Job{}, &scheduleRow{}); err != nil {
		return nil, fmt.Errorf("jobs: migrating tables jobs and schedules: %w", err)
	}
	return &Queue{db: db, log: o.Logger, o: o, handlers: make(map[string]Handler), wake: make(chan struct{})}, nil
}

func (q *Queue) now() time.Time { return q.o.Now().UTC() }

// Handle registers the handler of a kind of job. Like http.Handle, it
// panics on an empty kind, a nil handler or a kind registered twice.
func (q *Queue) Handle(kind string, h Handler) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if kind == "" || h == nil {
		panic("jobs: Handle needs a kind and a handler")
	}
	if _, dup := q.handlers[kind]; dup {
		panic("jobs: a second handler for kind " + kind)
	}
	q.handlers[kind] = h
}

func (q *Queue) handler(kind string) Handler {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.handlers[kind]
}

func (q *Queue) kinds() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	kinds := make([]string, 0, len(q.handlers))
	for k := range q.handlers {
		kinds = append(kinds, k)
	}
	return kinds
}

// Enqueue adds a job of a kind this Queue handles, with payload encoded as
// JSON, and wakes this Queue's idle workers.
func (q *Queue) Enqueue(ctx context.Context, kind string, payload any, o EnqueueOptions) (Job, error) {
	j, err := q.newJob(kind, payload, o)
	if err != nil {
		return Job{}, err
	}
	err = q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&j).Error; err != nil {
			return err
		}
		if o.InTx != nil {
			return o.InTx(tx, j)
		}
		return nil
	})
	if err != nil {
		return Job{}, fmt.Errorf("jobs: enqueueing a %s job: %w", kind, err)
	}
	q.notify()
	return j, nil
}

func (q *Queue) newJob(kind string, payload any, o EnqueueOptions) (Job, error) {
	if q.handler(kind) == nil {
		return Job{}, fmt.Errorf("jobs: no handler for kind %q (register it with Handle first)", kind)
	}
	p, err := json.Marshal(payload)
	if err != nil {
		return Job{}, fmt.Errorf("jobs: encoding the payload of a %s job: %w", kind, err)
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	now := q.now()
	runAt := o.RunAt.UTC()
	if o.RunAt.IsZero() {
		runAt = now
	}
	return Job{
		ID: randid.New("job_"), Kind: kind, Owner: o.Owner, Node: o.Node, Payload: p,
		Status: StatusQueued, MaxAttempts: o.MaxAttempts, RunAt: runAt, Created: now, Updated: now,
	}, nil
}

// Get returns a job, or an error wrapping ErrNotFound. Callers showing it
// to a user must check Owner.
func (q *Queue) Get(ctx context.Context, id string) (Job, error) {
	var j Job
	err := q.db.WithContext(ctx).Where("id = ?", id).Take(&j).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Job{}, fmt.Errorf("%w: no job %q", ErrNotFound, id)
	}
	if err != nil {
		return Job{}, fmt.Errorf("jobs: reading job %q: %w", id, err)
	}
	return j, nil
}

// Count is how many jobs of a kind have a status.
type Count struct {
	Kind   string
	Status Status
	N      int64
}

// Counts returns how many jobs of each kind are in each status (kinds
// are the handlers' names: a bounded set).
func (q *Queue) Counts(ctx context.Context) ([]Count, error) {
	var cs []Count
	err := q.db.WithContext(ctx).Model(&Job{}).Select("kind, status, count(*) AS n").Group("kind, status").Scan(&cs).Error
	if err != nil {
		return nil, fmt.Errorf("jobs: counting jobs: %w", err)
	}
	return cs, nil
}

// ErrPermanent is matched (errors.Is) by every error Permanent made, and
// by the errors wrapping one.
var ErrPermanent = errors.New("jobs: permanent failure")

// Permanent marks err as not worth retrying: a handler returning it (or an
// error wrapping it) fails its job at once, and no other server takes the
// job over. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

func (q *Queue) notify() {
	q.mu.Lock()
	close(q.wake)
	q.wake = make(chan struct{})
	q.mu.Unlock()
}

func (q *Queue) wakeChan() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wake
}

// Run runs jobs and schedules until ctx ends, then waits for the running
// handlers to return (their context ends with ctx) and returns nil. Jobs
// they leave unfinished go back in the queue, without counting the
// attempt. Run first puts back the jobs whose lease expired, and keeps
// doing so while it runs. It fails at once if it is already running or if
// a schedule's kind has no handler.
func (q *Queue) Run(ctx context.Context) error {
	q.mu.Lock()
	if q.running {
		q.mu.Unlock()
		return errors.New("jobs: Run called twice")
	}
	for _, s := range q.schedules {
		if q.handlers[s.kind] == nil {
			q.mu.Unlock()
			return fmt.Errorf("jobs: schedule %q runs kind %q, which has no handler", s.name, s.kind)
		}
	}
	q.running = true
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.running = false
		q.mu.Unlock()
	}()

	var wg sync.WaitGroup
	wg.Go(func() { q.maintain(ctx) })
	for range q.o.Workers {
		wg.Go(func() { q.work(ctx) })
	}
	wg.Wait()
	return nil
}

// maintain reclaims expired leases and enqueues due schedules, at once and
// then every Poll.
func (q *Queue) maintain(ctx context.Context) {
	t := time.NewTicker(q.o.Poll)
	defer t.Stop()
	for {
		if err := q.reclaim(ctx); err != nil && ctx.Err() == nil {
			q.log.Error("jobs: reclaiming expired leases", "error", err)
		}
		q.schedule(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reclaim puts back the running jobs whose lease expired: their process
// stopped without saying so. The lost attempt counts, so a job out of
// attempts fails instead.
func (q *Queue) reclaim(ctx context.Context) error {
	now := q.now()
	expired := func() *gorm.DB {
		return q.db.WithContext(ctx).Model(&Job{}).Where("status = ? AND lease_until < ?", StatusRunning, now)
	}
	failed := expired().Where("attempts >= max_attempts").Updates(map[string]any{
		"status": StatusFailed, "last_error": interrupted, "claim": "", "finished": now, "updated": now,
	})
	if failed.Error != nil {
		return failed.Error
	}
	requeued := expired().Updates(map[string]any{
		"status": StatusQueued, "last_error": interrupted, "claim": "", "run_at": now, "updated": now,
	})
	if requeued.Error != nil {
		return requeued.Error
	}
	if n := failed.RowsAffected + requeued.RowsAffected; n > 0 {
		q.log.Warn("jobs: took back jobs whose process stopped", "requeued", requeued.RowsAffected, "failed", failed.RowsAffected)
		q.notify()
	}
	return nil
}

func (q *Queue) work(ctx context.Context) {
	t := time.NewTimer(q.o.Poll)
	defer t.Stop()
	for ctx.Err() == nil {
		wake := q.wakeChan() // before claiming, so an Enqueue in between is not missed
		j, err := q.claim(ctx)
		if err != nil && ctx.Err() == nil {
			q.log.Error("jobs: claiming a job", "error", err)
		}
		if j != nil {
			q.run(ctx, j)
			continue
		}
		t.Reset(q.o.Poll)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
		}
	}
}

// claim takes the due job that waited longest among the kinds this Queue
// handles and of no node or of its own, or returns nil. The UPDATE is one
// statement, so two processes cannot both take a job. The outer WHERE
// repeats that the job is queued and due: on PostgreSQL (READ
// COMMITTED), an UPDATE that waited for a row another transaction
// changed re-checks only that WHERE on the new row, not the subquery's,
// and meanwhile the job may have run an attempt and been queued again
// for later. (A row's node never changes, so the subquery's check of it
// holds.)
func (q *Queue) claim(ctx context.Context) (*Job, error) {
	kinds := q.kinds()
	if len(kinds) == 0 {
		return nil, nil
	}
	now := q.now()
	var jobs []Job
	err := q.db.WithContext(ctx).Raw(`UPDATE jobs
		SET status = ?, attempts = attempts + 1, claim = ?, lease_until = ?, started = ?, updated = ?
		WHERE id = (SELECT id FROM jobs WHERE status = ? AND run_at <= ? AND kind IN ? AND node IN ? ORDER BY run_at, created LIMIT 1)
		AND status = ? AND run_at <= ?
		RETURNING *`,
		StatusRunning, randid.New(""), now.Add(q.o.Lease), now, now,
		StatusQueued, now, kinds, []string{"", q.o.Node}, StatusQueued, now).Scan(&jobs).Error
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	return &jobs[0], nil
}

// run runs one attempt of j, renewing its lease meanwhile, and records the
// outcome.
func (q *Queue) run(ctx context.Context, j *Job) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := make(chan struct{})
	done := make(chan struct{})
	go q.heartbeat(hctx, j, cancel, lost, done)

	log := q.log.With("job", j.ID, "kind", j.Kind, "attempt", j.Attempts)
	result, err := q.call(hctx, log, j)
	close(done)
	select {
	case <-lost:
		log.Error("jobs: lost the lease of a running job; its outcome is not recorded, another attempt will run")
		return
	default:
	}

	// Record the outcome even when ctx is over: the job must not stay running.
	wctx := context.WithoutCancel(ctx)
	now := q.now()
	up := map[string]any{"claim": "", "updated": now}
	switch {
	case err == nil:
		b, merr := json.Marshal(result)
		if merr != nil {
			err = Permanent(fmt.Errorf("jobs: encoding the result: %w", merr))
			break
		}
		up["status"], up["result"], up["finished"] = StatusSucceeded, json.RawMessage(b), now
	case ctx.Err() != nil:
		// Stopped with the queue: not the job's fault, so the attempt
		// does not count.
		up["status"], up["last_error"], up["run_at"] = StatusQueued, interrupted, now
		up["attempts"] = gorm.Expr("attempts - 1")
		err = nil
	}
	if err != nil {
		up["last_error"] = err.Error()
		if errors.Is(err, ErrPermanent) || j.Attempts >= j.MaxAttempts {
			up["status"], up["finished"] = StatusFailed, now
			log.Error("jobs: job failed", "error", err)
		} else {
			d := q.backoff(j.Attempts)
			up["status"], up["run_at"] = StatusQueued, now.Add(d)
			log.Warn("jobs: attempt failed; retrying", "error", err, "in", d)
		}
	}
	res := q.db.WithContext(wctx).Model(&Job{}).Where("id = ? AND claim = ?", j.ID, j.Claim).Updates(up)
	switch {
	case res.Error != nil:
		log.Error("jobs: recording the outcome; the job runs again when its lease expires", "error", res.Error)
	case res.RowsAffected == 0:
		log.Error("jobs: the job was taken back before its outcome was recorded; another attempt will run")
	}
}

// call runs j's handler, turning a panic into an error.
func (q *Queue) call(ctx context.Context, log hclog.Logger, j *Job) (result any, err error) {
	h := q.handler(j.Kind)
	defer func() {
		if r := recover(); r != nil {
			log.Error("jobs: handler panicked", "panic", r, "stack", string(debug.Stack()))
			result, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return h(ctx, j)
}

// heartbeat renews j's lease every Lease/3 until done. If the lease was
// taken over (it expired, and another Queue put the job back), it closes
// lost and cancels the handler.
func (q *Queue) heartbeat(ctx context.Context, j *Job, cancel context.CancelFunc, lost, done chan struct{}) {
	t := time.NewTicker(max(q.o.Lease/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := q.now()
		res := q.db.WithContext(ctx).Model(&Job{}).Where("id = ? AND claim = ? AND status = ?", j.ID, j.Claim, StatusRunning).
			Updates(map[string]any{"lease_until": now.Add(q.o.Lease), "updated": now})
		if res.Error != nil {
			if ctx.Err() == nil {
				q.log.Warn("jobs: renewing a lease", "job", j.ID, "error", res.Error)
			}
			continue
		}
		if res.RowsAffected == 0 {
			close(lost)
			cancel()
			return
		}
	}
}

// backoff is the delay after failed attempt n (1-based): MinBackoff
// doubled n-1 times, capped at MaxBackoff, then drawn uniformly from its
// upper half so that jobs failing together do not retry together.
func (q *Queue) backoff(n int) time.Duration {
	d := q.o.MinBackoff
	for i := 1; i < n && d < q.o.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, q.o.MaxBackoff)
	return d/2 + mathrand.N(d/2+1)
}
