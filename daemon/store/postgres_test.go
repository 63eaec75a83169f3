package store_test

import (
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/store"
)

// A DSN is refused for the password it holds itself, never for one
// pgx would take from the environment or ~/.pgpass.
func TestParsePostgresDSNPassword(t *testing.T) {
	t.Setenv("PGPASSWORD", "from-the-environment")
	for dsn, refused := range map[string]bool{
		"postgres://app@db.example:5432/codumentor?sslmode=disable":          false,
		"postgresql://app@db.example/codumentor":                             false,
		"host=/tmp/pg user=app dbname=codumentor sslmode=disable":            false,
		"host=/tmp/pg application_name='pass word=x' dbname=codumentor":      false,
		`host=/tmp/pg application_name='it\'s password=x' dbname=codumentor`: false,
		"postgres://app:s3cret@db.example:5432/codumentor":                   true,
		"postgres://app:@db.example/codumentor":                              true,
		"postgres://app@db.example/codumentor?password=s3cret":               true,
		"host=/tmp/pg user=app password=s3cret dbname=codumentor":            true,
		"host=/tmp/pg user=app password = 's3 cret' dbname=codumentor":       true,
		"host=/tmp/pg application_name='x' password=s3cret":                  true,
	} {
		cc, err := store.ParsePostgresDSN(dsn)
		switch {
		case refused && (err == nil || !strings.Contains(err.Error(), "holds a password")):
			t.Errorf("%s: %v; want refused for its password", dsn, err)
		case refused && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("%s: the error quotes the password: %v", dsn, err)
		case !refused && err != nil:
			t.Errorf("%s: %v; want accepted ($PGPASSWORD is not the DSN's)", dsn, err)
		case !refused && cc.Password != "from-the-environment":
			t.Errorf("%s: password %q; want pgx's from $PGPASSWORD", dsn, cc.Password)
		}
	}
}
