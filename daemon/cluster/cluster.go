// Package cluster keeps track of the servers (nodes) that share one
// PostgreSQL database, so that each conversation is served by its home
// node: the one that holds its workspace and runs its turns.
//
// Each node records itself in the nodes table (its ID and the URL at
// which the others reach it) and renews that record every heartbeat with
// its load; a node whose record is older than LostAfter is taken to be
// lost. A request one node must forward to another carries a MAC under
// the cluster key (derived from auth.jwt_secret, which every node of a
// deployment shares) over its method, URI and time, so that only a node
// can say that a request was forwarded, and for which client.
package cluster

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ErrUnavailable is wrapped by the error for a node that is lost: its
// record is stale, or it cannot be reached.
var ErrUnavailable = errors.New("node unavailable")

// Node is one server of the deployment.
type Node struct {
	ID string `gorm:"primaryKey"`
	// URL is where the other nodes reach this one's API.
	URL string `gorm:"not null"`
	// Seen is the node's last heartbeat.
	Seen time.Time `gorm:"not null"`
	// Load is what the node counts as its load (turns running).
	Load int `gorm:"not null"`
	// Draining: the node is shutting down and takes no new
	// conversations.
	Draining bool `gorm:"not null"`
}

func (Node) TableName() string { return "nodes" }

// Options configure a Registry.
type Options struct {
	// Secret is auth.jwt_secret, from which the cluster key is derived.
	Secret string
	// Heartbeat is how often the node renews its record (default 2s).
	Heartbeat time.Duration
	// LostAfter is how old a record may be before its node counts as
	// lost (default 5 heartbeats).
	LostAfter time.Duration
}

// Registry is this node's view of the deployment's nodes.
type Registry struct {
	db       *gorm.DB
	self     Node
	o        Options
	key      []byte
	draining atomic.Bool
	load     atomic.Int64
}

// Open records self (ID and URL) in db's nodes table and returns the
// registry; Run keeps the record fresh.
func Open(ctx context.Context, db *gorm.DB, self Node, o Options) (*Registry, error) {
	if self.ID == "" || self.URL == "" {
		return nil, errors.New("cluster: a node needs an ID and a URL")
	}
	if o.Secret == "" {
		return nil, errors.New("cluster: no auth.jwt_secret to derive the cluster key from")
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 2 * time.Second
	}
	if o.LostAfter <= 0 {
		o.LostAfter = 5 * o.Heartbeat
	}
	key, err := hkdf.Key(sha256.New, []byte(o.Secret), nil, "codumentor/v1/cluster-forward", 32)
	if err != nil {
		return nil, err
	}
	if err := db.AutoMigrate(&Node{}); err != nil {
		return nil, fmt.Errorf("cluster: migrating the nodes table: %w", err)
	}
	r := &Registry{db: db, self: self, o: o, key: key}
	if err := r.beat(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Others counts the nodes other than self that db's nodes table shows
// alive (a record newer than lostAfter), before self joins: none means
// self is alone on the database.
func Others(ctx context.Context, db *gorm.DB, self string, lostAfter time.Duration) (int, error) {
	if !db.Migrator().HasTable(&Node{}) {
		return 0, nil
	}
	var n int64
	err := db.WithContext(ctx).Model(&Node{}).Where("id <> ? AND seen > ?", self, time.Now().UTC().Add(-lostAfter)).Count(&n).Error
	if err != nil {
		return 0, fmt.Errorf("cluster: counting the nodes: %w", err)
	}
	return int(n), nil
}

// Self is this node's ID.
func (r *Registry) Self() string { return r.self.ID }

func (r *Registry) beat(ctx context.Context) error {
	n := r.self
	n.Seen, n.Load, n.Draining = time.Now().UTC(), int(r.load.Load()), r.draining.Load()
	err := r.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "id"}},
		DoUpdates: clause.AssignmentColumns([]string{"url", "seen", "load", "draining"}),
	}).Create(&n).Error
	if err != nil {
		return fmt.Errorf("cluster: recording node %s: %w", n.ID, err)
	}
	return nil
}

// Run renews the node's record every heartbeat, with its load as load
// reports it, until ctx ends.
func (r *Registry) Run(ctx context.Context, load func() int) {
	t := time.NewTicker(r.o.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.load.Store(int64(load()))
			r.beat(ctx)
		}
	}
}

// Drain records that the node takes no new conversations: it is
// shutting down.
func (r *Registry) Drain(ctx context.Context) error {
	r.draining.Store(true)
	return r.beat(ctx)
}

// Node returns the node id, or an error wrapping ErrUnavailable if it
// is lost (or never was).
func (r *Registry) Node(ctx context.Context, id string) (Node, error) {
	var n Node
	err := r.db.WithContext(ctx).Where("id = ?", id).Take(&n).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return n, fmt.Errorf("%w: node %s is not known", ErrUnavailable, id)
	case err != nil:
		return n, fmt.Errorf("cluster: reading node %s: %w", id, err)
	case time.Since(n.Seen) > r.o.LostAfter:
		return n, fmt.Errorf("%w: node %s was last seen %s ago", ErrUnavailable, id, time.Since(n.Seen).Round(time.Second))
	}
	return n, nil
}

// Pick returns the least loaded live node that is not draining (this
// one among equals, or when none is live), for a new conversation.
func (r *Registry) Pick(ctx context.Context) (Node, error) {
	ns, err := r.live(ctx)
	if err != nil {
		return Node{}, err
	}
	best := Node{ID: r.self.ID, URL: r.self.URL, Load: -1}
	for _, n := range ns {
		if best.Load < 0 || n.Load < best.Load || n.Load == best.Load && n.ID == r.self.ID {
			best = n
		}
	}
	return best, nil
}

// Live lists the IDs of the nodes alive and not draining.
func (r *Registry) Live(ctx context.Context) ([]string, error) {
	ns, err := r.live(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(ns))
	for i, n := range ns {
		ids[i] = n.ID
	}
	return ids, nil
}

// live reads the nodes alive and not draining, by ID.
func (r *Registry) live(ctx context.Context) ([]Node, error) {
	var ns []Node
	if err := r.db.WithContext(ctx).Where("seen > ? AND NOT draining", time.Now().UTC().Add(-r.o.LostAfter)).Order("id").Find(&ns).Error; err != nil {
		return nil, fmt.Errorf("cluster: reading the nodes: %w", err)
	}
	return ns, nil
}

// Forwarded headers: the sending node and the MAC, and the client's
// address as the sender saw it.
const (
	HeaderFrom   = "X-Codumentor-Node"
	HeaderMAC    = "X-Codumentor-Forward"
	HeaderClient = "X-Codumentor-Client"
)

// maxSkew is how far a forwarded request's time may be from the
// receiver's clock.
const maxSkew = time.Minute

// Sign returns the HeaderMAC value of a request that this node forwards:
// "<unix time>.<MAC>" over the time, the sender, the method, the URI and
// the client's address.
func (r *Registry) Sign(method, uri, client string, now time.Time) string {
	ts := strconv.FormatInt(now.Unix(), 10)
	return ts + "." + r.mac(ts, r.self.ID, method, uri, client)
}

// Verify checks a forwarded request's headers and returns the sending
// node; false if they are absent, stale, or not a node's.
func (r *Registry) Verify(from, mac, method, uri, client string, now time.Time) bool {
	ts, sum, ok := strings.Cut(mac, ".")
	if !ok || from == "" {
		return false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || now.Sub(time.Unix(sec, 0)).Abs() > maxSkew {
		return false
	}
	return hmac.Equal([]byte(sum), []byte(r.mac(ts, from, method, uri, client)))
}

func (r *Registry) mac(fields ...string) string {
	m := hmac.New(sha256.New, r.key)
	for _, f := range fields {
		fmt.Fprintf(m, "%d:%s\n", len(f), f)
	}
	return hex.EncodeToString(m.Sum(nil))
}
