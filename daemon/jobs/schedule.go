package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// scheduleRow is one schedule's state in table schedules, shared by every
// process on the database.
type scheduleRow struct {
	Name    string    `gorm:"primaryKey"`
	LastRun time.Time `gorm:"not null"` // when it last enqueued a job
}

func (scheduleRow) TableName() string { return "schedules" }

// schedule is a periodic job registered with Every or EveryNode.
type schedule struct {
	name     string // its row's: for EveryNode's, name@node
	interval time.Duration
	kind     string
	payload  any
	node     string // EveryNode's: the node its jobs run on
}

// Every makes Run enqueue a job of kind with payload every interval. The
// schedule's last run is kept in table schedules under name, so that a run
// that fell due while no server was up happens once, soon after the next
// start, rather than in a burst, and several processes sharing the
// database enqueue it once between them. A schedule that was never run is
// due at once. While a job of the schedule is still queued or running, no
// other is enqueued; the next one follows when it ends, if it is due by then.
//
// Every must be called before Run. Like Handle, it panics on a misuse: an
// empty or repeated name, an interval that is not positive, a payload that
// does not encode as JSON, or a call after Run started.
func (q *Queue) Every(name string, interval time.Duration, kind string, payload any) {
	q.every(name, interval, kind, payload, false)
}

// EveryNode is Every for work that is each node's own (its workspaces'
// GC): every node's Queue enqueues the schedule's jobs for its node
// alone, once per interval per node, and only that node runs them. The
// schedule's row is name@node. On a Queue with no Options.Node (the one
// server of an SQLite database) it is Every.
func (q *Queue) EveryNode(name string, interval time.Duration, kind string, payload any) {
	q.every(name, interval, kind, payload, true)
}

func (q *Queue) every(name string, interval time.Duration, kind string, payload any, perNode bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := &schedule{name: name, interval: interval, kind: kind, payload: payload}
	if perNode && q.o.Node != "" {
		s.name, s.node = name+"@"+q.o.Node, q.o.Node
	}
	switch {
	case q.running:
		panic("jobs: Every after Run")
	case name == "" || kind == "":
		panic("jobs: Every needs a name and a kind")
	case interval <= 0:
		panic(fmt.Sprintf("jobs: schedule %q with interval %v", name, interval))
	}
	for _, o := range q.schedules {
		if o.name == s.name {
			panic("jobs: a second schedule named " + name)
		}
	}
	if _, err := json.Marshal(payload); err != nil {
		panic(fmt.Sprintf("jobs: the payload of schedule %q: %v", name, err))
	}
	q.schedules = append(q.schedules, s)
}

// schedule enqueues the jobs of the due schedules.
func (q *Queue) schedule(ctx context.Context) {
	q.mu.Lock()
	schedules := q.schedules
	q.mu.Unlock()
	for _, s := range schedules {
		if err := q.enqueueDue(ctx, s); err != nil && ctx.Err() == nil {
			q.log.Error("jobs: enqueueing a scheduled job", "schedule", s.name, "error", err)
		}
	}
}

func (q *Queue) enqueueDue(ctx context.Context, s *schedule) error {
	due := func(tx *gorm.DB) (bool, error) {
		var r scheduleRow
		err := tx.Where("name = ?", s.name).Take(&r).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return !q.now().Before(r.LastRun.Add(s.interval)), nil
	}
	// Most looks find nothing due: answer them without taking the write lock.
	if ok, err := due(q.db.WithContext(ctx)); !ok || err != nil {
		return err
	}
	enqueued := false
	err := q.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// The transaction holds the write lock (_txlock=immediate), so
		// this check and the insert are one step for every process.
		if ok, err := due(tx); !ok || err != nil {
			return err
		}
		var active int64
		err := tx.Model(&Job{}).Where("schedule = ? AND status IN ?", s.name, []Status{StatusQueued, StatusRunning}).Count(&active).Error
		if err != nil || active > 0 {
			return err
		}
		j, err := q.newJob(s.kind, s.payload, EnqueueOptions{Node: s.node})
		if err != nil {
			return err
		}
		j.Schedule = s.name
		if err := tx.Create(&j).Error; err != nil {
			return err
		}
		enqueued = true
		return tx.Clauses(clause.OnConflict{UpdateAll: true}).Create(&scheduleRow{Name: s.name, LastRun: j.Created}).Error
	})
	if err != nil {
		return err
	}
	if enqueued {
		q.notify()
	}
	return nil
}
