// Package storetest gives tests a fresh, empty database of the backend
// under test: SQLite by default, PostgreSQL when CODUMENTOR_TEST_STORE
// is postgres (scripts/test runs the store-dependent packages both
// ways).
//
// PostgreSQL is a real, throwaway cluster from the distribution's
// binaries (Debian: postgresql, which scripts/install-prereqs installs),
// initialized and started once per test process as the user running the
// tests, reachable only through a unix socket in its own directory, with
// durability off (fsync, synchronous_commit) since nothing in it
// outlives the tests. Each Config is a new database in it, dropped when
// its test ends. The cluster is the package's one piece of global state:
// it stops when the test process exits (the postmaster gets SIGQUIT when
// its parent dies), and the next process removes the directories of
// clusters whose process is gone.
//
// Without PostgreSQL, or as root (PostgreSQL refuses to run as root),
// Postgres skips the test, or fails it when CI=true.
package storetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/internal/pgtest"
)

// EnvBackend names the backend tests run on: store.BackendSQLite (or
// empty) or store.BackendPostgres.
const EnvBackend = "CODUMENTOR_TEST_STORE"

// Backend is the backend under test, from EnvBackend.
func Backend() string {
	if os.Getenv(EnvBackend) == store.BackendPostgres {
		return store.BackendPostgres
	}
	return store.BackendSQLite
}

// Config returns the configuration of a fresh database of the backend
// under test: a file in a new temporary directory, or a new PostgreSQL
// database.
func Config(t testing.TB) store.Config {
	t.Helper()
	if Backend() == store.BackendPostgres {
		return Postgres(t)
	}
	return store.Config{Backend: store.BackendSQLite, Path: filepath.Join(t.TempDir(), store.FileName)}
}

// Open opens a fresh database of the backend under test, closed when
// the test ends.
func Open(t testing.TB) *gorm.DB {
	t.Helper()
	return OpenConfig(t, Config(t))
}

// OpenConfig opens the database c, closed when the test ends.
func OpenConfig(t testing.TB, c store.Config) *gorm.DB {
	t.Helper()
	db, err := store.OpenConfig(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(db) })
	return db
}

// Postgres returns the configuration of a new, empty database in the
// test process's PostgreSQL cluster, dropped when the test ends.
func Postgres(t testing.TB) store.Config {
	t.Helper()
	return store.Config{Backend: store.BackendPostgres, DSN: pgtest.Database(t)}
}
