// Package store keeps the server's state in one database: an SQLite file
// (gorm over the pure-Go glebarez driver, in WAL mode so readers never
// wait for the writer), the embedded default, or PostgreSQL (gorm over
// pgx) for a deployment of several servers. It holds conversations,
// their messages, events and approvals (agentcore.Store).
//
// Both backends give a transaction the same guarantee: transactions that
// write are serialized, one at a time. SQLite takes its write lock at
// BEGIN (_txlock=immediate); on PostgreSQL every transaction takes one
// advisory lock first (see OpenPostgres). Code that reads and then writes
// in one transaction (the audit chain, sequence numbers, the last admin)
// is therefore correct on both without knowing which it runs on.
// Statements outside a transaction are atomic one at a time on both.
//
// Other daemon packages (auth, secrets, jobs) own their tables in the same
// database: each migrates its own models on the *gorm.DB that Open
// returns.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// FileName is the database's name inside the instance's data directory.
const FileName = "codumentor.db"

// DefaultBusyTimeout is how long a statement waits for another
// connection's write lock before it fails with SQLITE_BUSY.
const DefaultBusyTimeout = 5 * time.Second

// Options are the settings of OpenOptions; zero fields take the
// defaults.
type Options struct {
	// BusyTimeout is how long a statement waits for the write lock
	// (default DefaultBusyTimeout).
	BusyTimeout time.Duration
}

// Open opens (creating it if needed) the SQLite database at path with
// write-ahead logging, a 5 s busy timeout and foreign keys on. The file is
// created 0600: it holds password hashes and encrypted secrets.
func Open(ctx context.Context, path string) (*gorm.DB, error) {
	return OpenOptions(ctx, path, Options{})
}

// OpenOptions is Open with o's settings.
func OpenOptions(ctx context.Context, path string, o Options) (*gorm.DB, error) {
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if path == "" {
		return nil, errors.New("store: no database path")
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("store: creating %s: %w", path, err)
		}
		if f != nil {
			f.Close()
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	q := fmt.Sprintf("_pragma=journal_mode(WAL)&_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate", max(o.BusyTimeout.Milliseconds(), 1))
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: q}).String()
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		TranslateError:         true,
	})
	if err != nil {
		return nil, fmt.Errorf("store: opening %s: %w", path, err)
	}
	// database/sql keeps only 2 idle connections by default; every
	// further one would be reopened, pragmas and all, per query.
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	sqlDB.SetMaxIdleConns(16)
	sqlDB.SetMaxOpenConns(16)
	var mode string
	if err := db.WithContext(ctx).Raw("PRAGMA journal_mode").Scan(&mode).Error; err != nil {
		Close(db)
		return nil, fmt.Errorf("store: reading the journal mode of %s: %w", path, err)
	}
	if mode != "wal" {
		Close(db)
		return nil, fmt.Errorf("store: %s is in journal mode %q, not WAL (is it on a filesystem without shared memory?)", path, mode)
	}
	return db, nil
}

// Close closes the database's connections.
func Close(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}
