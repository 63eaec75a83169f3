package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The backends of Config.Backend.
const (
	BackendSQLite   = "sqlite"
	BackendPostgres = "postgres"
)

// Config says which database to open: the SQLite file Path, or the
// PostgreSQL database DSN.
type Config struct {
	// Backend is BackendSQLite (the default) or BackendPostgres.
	Backend string
	// Path is the SQLite file.
	Path string
	// DSN is a PostgreSQL connection string (a postgres:// URL or
	// key=value pairs), without a password.
	DSN string
	// Password is the PostgreSQL password, kept out of DSN so that the
	// configuration file need not hold it.
	Password string
	// BusyTimeout is how long a statement waits for a lock before it
	// fails (SQLITE_BUSY; PostgreSQL's lock_timeout). Default
	// DefaultBusyTimeout.
	BusyTimeout time.Duration
	// MaxConns bounds the open connections (default 16).
	MaxConns int
}

// OpenConfig opens the database c names.
func OpenConfig(ctx context.Context, c Config) (*gorm.DB, error) {
	switch c.Backend {
	case "", BackendSQLite:
		return OpenOptions(ctx, c.Path, Options{BusyTimeout: c.BusyTimeout})
	case BackendPostgres:
		return OpenPostgres(ctx, c)
	}
	return nil, fmt.Errorf("store: unknown backend %q (sqlite or postgres)", c.Backend)
}

// serialLockKey is the advisory lock every PostgreSQL transaction takes:
// the one lock that serializes writers across all servers on the
// database, as SQLite's write lock does on one file.
const serialLockKey = 0x636f64756d656e // "codumen"

// OpenPostgres opens the PostgreSQL database c.DSN. Its transactions are
// serialized by an advisory lock taken at BEGIN (the package comment says
// why), waiting at most c.BusyTimeout for it or for any other lock.
func OpenPostgres(ctx context.Context, c Config) (*gorm.DB, error) {
	if c.BusyTimeout <= 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 16
	}
	cc, err := ParsePostgresDSN(c.DSN)
	if err != nil {
		return nil, err
	}
	if c.Password != "" {
		cc.Password = c.Password
	}
	cc.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(c.BusyTimeout.Milliseconds(), 1), 10)
	cc.RuntimeParams["timezone"] = "UTC"
	sqlDB := stdlib.OpenDB(*cc)
	sqlDB.SetMaxOpenConns(c.MaxConns)
	sqlDB.SetMaxIdleConns(c.MaxConns)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("store: connecting to PostgreSQL %s: %w", describePostgres(cc), redact(err, c.Password))
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: serialPool{sqlDB}}), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		TranslateError:         true,
	})
	if err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("store: opening PostgreSQL %s: %w", describePostgres(cc), err)
	}
	return db, nil
}

// ParsePostgresDSN parses a PostgreSQL connection string and refuses one
// that carries a password: that belongs in store.postgres.password_env
// or password_file, not in a configuration file that is printed and
// backed up.
func ParsePostgresDSN(dsn string) (*pgx.ConnConfig, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, errors.New("store: store.postgres.dsn is empty")
	}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the DSN, password and all.
		return nil, errors.New("store: store.postgres.dsn is not a PostgreSQL connection string (postgres://user@host:5432/database?sslmode=verify-full, or host=… dbname=…)")
	}
	// The text, not cc.Password: pgx fills that in from $PGPASSWORD
	// and ~/.pgpass too, which are not in the configuration file.
	if dsnHasPassword(dsn) {
		return nil, errors.New("store: store.postgres.dsn holds a password: put it in the environment variable store.postgres.password_env names, or in store.postgres.password_file")
	}
	return cc, nil
}

// dsnHasPassword reports whether the connection string itself names a
// password: a URL's user:password@ or ?password=, or a password=
// keyword (libpq's syntax: values may be 'quoted', with \ escapes).
// It is called on a string pgx has parsed.
func dsnHasPassword(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return true // pgx parsed it; be safe
		}
		_, set := u.User.Password()
		return set || u.Query().Has("password")
	}
	s := dsn
	for {
		s = strings.TrimLeft(s, " \t\n\r\v\f")
		if s == "" {
			return false
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return false
		}
		key := strings.TrimSpace(s[:eq])
		s = strings.TrimLeft(s[eq+1:], " \t\n\r\v\f")
		if key == "password" {
			return true
		}
		// Skip the value: quoted up to the closing quote, or to the
		// next whitespace, with backslash escapes in either.
		quoted := strings.HasPrefix(s, "'")
		if quoted {
			s = s[1:]
		}
		i := 0
		for i < len(s) {
			c := s[i]
			if c == '\\' {
				i += 2
				continue
			}
			if (quoted && c == '\'') || (!quoted && strings.IndexByte(" \t\n\r\v\f", c) >= 0) {
				break
			}
			i++
		}
		s = s[min(i+1, len(s)):]
	}
}

// describePostgres names the database for messages: user, host, port
// and database, never the password.
func describePostgres(cc *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
}

// redact removes password from err's message.
func redact(err error, password string) error {
	if password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), password, "[redacted]"))
}

// serialPool is the *sql.DB under gorm, with BeginTx taking the
// serializing advisory lock as the transaction's first statement.
type serialPool struct{ *sql.DB }

// BeginTx implements gorm.TxBeginner.
func (p serialPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	tx, err := p.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", serialLockKey); err != nil {
		tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// GetDBConn implements gorm.GetDBConnector, for (*gorm.DB).DB.
func (p serialPool) GetDBConn() (*sql.DB, error) { return p.DB, nil }

// Backend reports which backend db is on: BackendSQLite or
// BackendPostgres.
func Backend(db *gorm.DB) string {
	if db.Dialector.Name() == "postgres" {
		return BackendPostgres
	}
	return BackendSQLite
}

// postgresBusy and postgresFull are the SQLSTATE codes of a lock not
// taken in time and of a full disk.
var (
	postgresBusy = map[string]bool{"55P03": true, "40001": true, "40P01": true}
	postgresFull = map[string]bool{"53100": true, "53200": true}
)

func postgresCode(err error) (string, bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, true
	}
	return "", false
}
