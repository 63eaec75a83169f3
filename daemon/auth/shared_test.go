package auth_test

import (
	"context"
	"errors"
	"testing"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

// The servers of one database share auth.jwt_secret: the first records
// it, the same secret passes, a rotation passes server by server, a
// server alone may change it, and anything else refuses to start.
func TestCheckSharedSecret(t *testing.T) {
	ctx := context.Background()
	db := storetest.Open(t)
	a, b, c := "secret-a-0123456789abcdef0123456789", "secret-b-0123456789abcdef0123456789", "secret-c-0123456789abcdef0123456789"
	steps := []struct {
		name     string
		current  string
		previous []string
		alone    bool
		want     error
	}{
		{"the first server records its secret", a, nil, false, nil},
		{"another with the same secret", a, nil, false, nil},
		{"another with a different secret", b, nil, false, auth.ErrSecretMismatch},
		{"one with a different secret that lists the deployment's among its previous ones (a rotation)", b, []string{a}, false, nil},
		{"a server that has not rotated yet", a, nil, false, auth.ErrSecretMismatch},
		{"one that rotated, with the old one among its previous", b, []string{a}, false, nil},
		{"one whose previous secret is the deployment's, with another current one", c, []string{a}, false, auth.ErrSecretMismatch},
		{"a server alone on the database with a secret of its own", c, nil, true, nil},
		{"then another with the old one", b, nil, false, auth.ErrSecretMismatch},
		{"no secret at all", "", nil, true, auth.ErrSharedNeedsSecret},
	}
	for _, s := range steps {
		if err := auth.CheckSharedSecret(ctx, db, s.current, s.previous, s.alone); !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Fatalf("%s: CheckSharedSecret = %v, want %v", s.name, err, s.want)
		}
	}
}
