package auth_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/integrations/ldap"
	"github.com/codumentor/codumentor/integrations/ldap/ldaptest"
)

func newAuthenticator(t *testing.T, us *auth.Users, lc *ldap.Config, l *auth.Limiter) *auth.Authenticator {
	t.Helper()
	a, err := auth.NewAuthenticator(us, lc, l)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestLoginLocal(t *testing.T) {
	ctx := context.Background()
	us := newUsers(t)
	alice, err := us.Add(ctx, auth.AddUser{Name: "alice", Password: "alice-password"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := us.Add(ctx, auth.AddUser{Name: "dora", Password: "dora-password"}); err != nil {
		t.Fatal(err)
	}
	if err := us.SetDisabled(ctx, auth.CommandLine, "dora", true); err != nil {
		t.Fatal(err)
	}
	a := newAuthenticator(t, us, nil, nil)

	u, err := a.Login(ctx, auth.LoginRequest{Username: "Alice", Password: "alice-password", IP: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	if u.ID != alice.ID || u.LastLogin == nil {
		t.Fatalf("Login = %+v", u)
	}
	if stored, _ := us.ByName(ctx, "alice"); stored.LastLogin == nil || !stored.LastLogin.Equal(*u.LastLogin) {
		t.Fatalf("LastLogin not stored: %+v", stored)
	}

	for _, tc := range []struct {
		name, user, pw string
		disabled       bool
	}{
		{"wrong password", "alice", "alice-passwort", false},
		{"empty password", "alice", "", false},
		{"unknown user", "zed", "alice-password", false},
		{"invalid name", "al*", "alice-password", false},
		{"disabled, right password", "dora", "dora-password", true},
		{"disabled, wrong password", "dora", "wrong-password", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Login(ctx, auth.LoginRequest{Username: tc.user, Password: tc.pw})
			if !errors.Is(err, auth.ErrInvalidCredentials) {
				t.Fatalf("Login = %v, want ErrInvalidCredentials", err)
			}
			if errors.Is(err, auth.ErrUserDisabled) != tc.disabled {
				t.Fatalf("Login = %v; ErrUserDisabled: %v, want %v", err, !tc.disabled, tc.disabled)
			}
		})
	}
}

// An unknown name costs about as much time as a wrong password, so the
// time of a refusal does not tell which names exist.
func TestLoginUnknownUserTiming(t *testing.T) {
	ctx := context.Background()
	us := newUsers(t)
	if _, err := us.Add(ctx, auth.AddUser{Name: "alice", Password: "alice-password"}); err != nil {
		t.Fatal(err)
	}
	a := newAuthenticator(t, us, nil, limiterOn(t, us.DB(), auth.LimitOptions{UserFailures: 1000, IPFailures: 1000}))
	// The best of 9 tries each, taken in turns (a burst of load on a
	// shared machine then slows both, not all of one).
	known, unknown := time.Hour, time.Hour
	for i := range 18 {
		user, best := "alice", &known
		if i%2 == 1 {
			user, best = "nobody", &unknown
		}
		start := time.Now()
		a.Login(ctx, auth.LoginRequest{Username: user, Password: "wrong-password"})
		*best = min(*best, time.Since(start))
	}
	if unknown < known/2 {
		t.Fatalf("a wrong password takes %v, an unknown user %v: the difference reveals which users exist", known, unknown)
	}
}

func TestLoginRateLimited(t *testing.T) {
	ctx := context.Background()
	us := newUsers(t)
	if _, err := us.Add(ctx, auth.AddUser{Name: "alice", Password: "alice-password"}); err != nil {
		t.Fatal(err)
	}
	c := newClock()
	a := newAuthenticator(t, us, nil, limiterOn(t, us.DB(), auth.LimitOptions{UserFailures: 3, IPFailures: 5, Window: time.Minute, Now: c.Now}))
	login := func(user, pw, ip string) error {
		_, err := a.Login(ctx, auth.LoginRequest{Username: user, Password: pw, IP: ip})
		return err
	}
	for range 3 {
		if err := login("alice", "wrong-password", "192.0.2.1"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("wrong password: %v", err)
		}
	}
	// Slowed down now (the next attempt 1 s after the last failure) from
	// the failing address, even with the right password; from an address
	// that is not failing the right password gets in.
	if err := login("ALICE", "alice-password", "192.0.2.1"); !errors.Is(err, auth.ErrRateLimited) {
		t.Fatalf("after 3 failures = %v, want ErrRateLimited", err)
	}
	if err := login("ALICE", "alice-password", "192.0.2.99"); err != nil {
		t.Fatalf("the right password from elsewhere during the slowdown: %v", err)
	}
	if err := login("alice", "alice-password", "192.0.2.1"); !errors.Is(err, auth.ErrRateLimited) {
		t.Fatalf("a success elsewhere ended the slowdown of the failing address: %v", err)
	}
	c.Advance(time.Minute)
	if err := login("alice", "alice-password", "192.0.2.1"); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	// The address's earlier failures left the window with alice's. Five
	// more, each on another name, limit the address for every name.
	for i := range 5 {
		if err := login(fmt.Sprint("nobody", i), "x-password", "192.0.2.1"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("unknown name %d: %v", i, err)
		}
	}
	if err := login("alice", "alice-password", "192.0.2.1"); !errors.Is(err, auth.ErrRateLimited) {
		t.Fatalf("after 5 failures from one address = %v, want ErrRateLimited", err)
	}
	if err := login("alice", "alice-password", "192.0.2.2"); err != nil {
		t.Fatalf("from another address: %v", err)
	}
}

func TestLoginLDAP(t *testing.T) {
	ctx := context.Background()
	srv := ldaptest.Start(t)
	srv.AddUser(t, "carol", "carol-ldap-password", "Carol Ldap", "carol@example.org")
	srv.AddUser(t, "bob", "bob-ldap-password", "Bob Ldap", "bob@example.org")
	srv.AddUser(t, "erin", "erin-ldap-password", "Erin", "")
	lc := &ldap.Config{URL: srv.URL, SearchBaseDN: srv.BaseDN, SearchFilter: "(uid={username})"}

	us := newUsers(t)
	// bob is a local user too, with another password.
	bob, err := us.Add(ctx, auth.AddUser{Name: "bob", Password: "bob-local-password"})
	if err != nil {
		t.Fatal(err)
	}
	a := newAuthenticator(t, us, lc, limiterOn(t, us.DB(), auth.LimitOptions{UserFailures: 100}))
	login := func(user, pw string) (auth.User, error) {
		return a.Login(ctx, auth.LoginRequest{Username: user, Password: pw, IP: "192.0.2.1"})
	}

	t.Run("first login creates the user", func(t *testing.T) {
		u, err := login("carol", "carol-ldap-password")
		if err != nil {
			t.Fatal(err)
		}
		stored, err := us.ByName(ctx, "carol")
		if err != nil {
			t.Fatal(err)
		}
		if u.ID != stored.ID || stored.Source != auth.SourceLDAP || stored.Role != auth.RoleUser || stored.PasswordHash != "" ||
			stored.DisplayName != "Carol Ldap" || stored.Email != "carol@example.org" || stored.LastLogin == nil {
			t.Fatalf("Login = %+v, stored %+v", u, stored)
		}
		again, err := login("carol", "carol-ldap-password")
		if err != nil || again.ID != u.ID {
			t.Fatalf("second login = %+v, %v; want the same user", again, err)
		}
		if n, _ := us.Count(ctx); n != 2 {
			t.Fatalf("%d users after two logins of carol, want 2 (bob, carol)", n)
		}
	})
	t.Run("wrong LDAP password", func(t *testing.T) {
		if _, err := login("carol", "carol-local-password"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("Login = %v, want ErrInvalidCredentials", err)
		}
		if _, err := login("erin", "wrong-password"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("Login = %v, want ErrInvalidCredentials", err)
		}
		if _, err := us.ByName(ctx, "erin"); !errors.Is(err, auth.ErrUserNotFound) {
			t.Fatalf("a failed LDAP login created the user: %v", err)
		}
	})
	t.Run("unknown everywhere", func(t *testing.T) {
		if _, err := login("zed", "zed-password"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("Login = %v, want ErrInvalidCredentials", err)
		}
	})
	t.Run("local user not taken over by LDAP", func(t *testing.T) {
		if _, err := login("bob", "bob-ldap-password"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("bob with the directory's password = %v, want ErrInvalidCredentials", err)
		}
		u, err := login("bob", "bob-local-password")
		if err != nil || u.ID != bob.ID || u.Source != auth.SourceLocal || u.DisplayName != "" {
			t.Fatalf("bob with the local password = %+v, %v", u, err)
		}
	})
	t.Run("LDAP user has no local password", func(t *testing.T) {
		if err := us.SetPassword(ctx, auth.CommandLine, "carol", "carol-local-password"); err == nil {
			t.Fatal("SetPassword on an LDAP user succeeded")
		}
	})
	t.Run("disabled LDAP user", func(t *testing.T) {
		if _, err := login("erin", "erin-ldap-password"); err != nil {
			t.Fatal(err)
		}
		if err := us.SetDisabled(ctx, auth.CommandLine, "erin", true); err != nil {
			t.Fatal(err)
		}
		_, err := login("erin", "erin-ldap-password")
		if !errors.Is(err, auth.ErrInvalidCredentials) || !errors.Is(err, auth.ErrUserDisabled) {
			t.Fatalf("Login = %v, want ErrInvalidCredentials and ErrUserDisabled", err)
		}
	})
	t.Run("LDAP user while LDAP is off", func(t *testing.T) {
		off := newAuthenticator(t, us, nil, nil)
		if _, err := off.Login(ctx, auth.LoginRequest{Username: "carol", Password: "carol-ldap-password"}); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("Login = %v, want ErrInvalidCredentials", err)
		}
	})
	t.Run("directory unreachable", func(t *testing.T) {
		down := &ldap.Config{URL: "ldap://127.0.0.1:1", BindDN: "uid={username},ou=people,dc=example,dc=org"}
		l := newLimiter(t, auth.LimitOptions{UserFailures: 1}) // a database of its own: carol failed above
		b := newAuthenticator(t, us, down, l)
		_, err := b.Login(ctx, auth.LoginRequest{Username: "carol", Password: "carol-ldap-password"})
		if !errors.Is(err, ldap.ErrUnavailable) || errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("Login = %v, want ldap.ErrUnavailable, not ErrInvalidCredentials", err)
		}
		// The server's failure did not count against carol.
		r, err := l.Reserve(context.Background(), "carol", "")
		if err != nil {
			t.Fatalf("an unreachable directory counted as a failed login: %v", err)
		}
		r.Cancel(context.Background())
	})
	t.Run("bad LDAP config", func(t *testing.T) {
		if _, err := auth.NewAuthenticator(us, &ldap.Config{URL: srv.URL}, nil); !errors.Is(err, ldap.ErrConfig) {
			t.Fatalf("NewAuthenticator = %v, want ldap.ErrConfig", err)
		}
	})
}
