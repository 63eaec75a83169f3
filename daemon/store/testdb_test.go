package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/store/internal/pgtest"
)

// testConfig is a fresh database of the backend under test, by
// storetest's rule (which this package's own tests cannot import).
func testConfig(t testing.TB) Config {
	t.Helper()
	if os.Getenv("CODUMENTOR_TEST_STORE") == BackendPostgres {
		return Config{Backend: BackendPostgres, DSN: pgtest.Database(t)}
	}
	return Config{Path: filepath.Join(t.TempDir(), FileName)}
}

// openTestDB opens c, closed when the test ends.
func openTestDB(t testing.TB, c Config) *gorm.DB {
	t.Helper()
	db, err := OpenConfig(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Close(db) })
	return db
}
