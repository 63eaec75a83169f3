package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/integrations/ldap/ldaptest"
)

// PATCH /admin/users/{id}: disabling a user ends their tokens at once
// and refuses their logins; a password reset ends their tokens and the
// new password works; an LDAP user can be disabled but has no password
// here; an admin cannot disable themselves; a refused request changes
// nothing.
func TestAdminUpdateUser(t *testing.T) {
	dir := ldaptest.Start(t)
	dir.AddUser(t, "carol", "ldap password 1", "Carol Example", "carol@example.org")
	in := newInstance(t, fmt.Sprintf("  ldap:\n    url: %s\n    bind_dn: uid={username},%s\n", dir.URL, dir.PeopleDN)+"plugins: []\n")
	root := in.addUser("root", pw, true)
	alice := in.addUser("alice", pw, false)
	p := in.start()
	r := p.login("root", pw)
	a := p.login("alice", pw)
	c := p.login("carol", "ldap password 1")
	var carol auth.User
	c.must(http.StatusOK, "GET", "/api/v1/me", nil, &carol)

	patch := func(id string, body any) (int, auth.User, string) {
		t.Helper()
		status, b, _ := r.do("PATCH", "/api/v1/admin/users/"+id, body)
		var u auth.User
		var e struct {
			Error struct{ Code, Message string }
		}
		if status == http.StatusOK {
			if err := json.Unmarshal(b, &u); err != nil {
				t.Fatalf("PATCH %s: %v in %s", id, err, b)
			}
		} else {
			json.Unmarshal(b, &e)
		}
		return status, u, e.Error.Message
	}

	// Not an admin: 403; unknown: 404; nothing to change or not JSON: 400.
	a.must(http.StatusForbidden, "PATCH", "/api/v1/admin/users/"+alice.ID, map[string]bool{"disabled": false}, nil)
	if status, _, _ := patch("usr_000000000000000000000000", map[string]bool{"disabled": true}); status != http.StatusNotFound {
		t.Errorf("unknown user: %d", status)
	}
	for _, body := range []any{map[string]any{}, `{"disabled": "yes"}`, `{"role": "admin"}`} {
		if status, _, _ := patch(alice.ID, body); status != http.StatusBadRequest {
			t.Errorf("PATCH %v: %d, want 400", body, status)
		}
	}
	// Refused: self-disable, a weak password, an LDAP user's password;
	// a refused request changes nothing, its other half included.
	if status, _, msg := patch(root.ID, map[string]any{"disabled": true, "password": "new root password"}); status != http.StatusBadRequest || !strings.Contains(msg, "your own account") {
		t.Errorf("self-disable: %d %q", status, msg)
	}
	r.must(http.StatusOK, "GET", "/api/v1/me", nil, nil)
	if status, _, msg := patch(alice.ID, map[string]any{"disabled": true, "password": "short"}); status != http.StatusBadRequest || !strings.Contains(msg, "password") {
		t.Errorf("weak password: %d %q", status, msg)
	}
	a.must(http.StatusOK, "GET", "/api/v1/me", nil, nil)
	if status, _, msg := patch(carol.ID, map[string]any{"password": "a local password"}); status != http.StatusBadRequest || !strings.Contains(msg, "ldap") {
		t.Errorf("LDAP user's password: %d %q", status, msg)
	}
	c.must(http.StatusOK, "GET", "/api/v1/me", nil, nil)

	// Disabled: the token is refused at once, and so is a login.
	status, u, _ := patch(alice.ID, map[string]bool{"disabled": true})
	if status != http.StatusOK || !u.Disabled || u.ID != alice.ID {
		t.Fatalf("disable alice: %d %+v", status, u)
	}
	a.must(http.StatusUnauthorized, "GET", "/api/v1/me", nil, nil)
	if status, _, _ := p.loginStatus("alice", pw); status != http.StatusUnauthorized {
		t.Fatalf("login of a disabled user: %d", status)
	}
	// Re-enabled: the old token stays revoked; a new login works.
	if status, u, _ := patch(alice.ID, map[string]bool{"disabled": false}); status != http.StatusOK || u.Disabled {
		t.Fatalf("enable alice: %d %+v", status, u)
	}
	a.must(http.StatusUnauthorized, "GET", "/api/v1/me", nil, nil)
	a = p.login("alice", pw)

	// Password reset: the old token is refused, the old password too, the
	// new one works.
	if status, u, _ := patch(alice.ID, map[string]string{"password": "new alice password"}); status != http.StatusOK || u.Disabled {
		t.Fatalf("reset alice's password: %d %+v", status, u)
	}
	a.must(http.StatusUnauthorized, "GET", "/api/v1/me", nil, nil)
	if status, _, _ := p.loginStatus("alice", pw); status != http.StatusUnauthorized {
		t.Fatalf("login with the old password: %d", status)
	}
	p.login("alice", "new alice password").must(http.StatusOK, "GET", "/api/v1/me", nil, nil)

	// An LDAP user can be disabled: its token ends, the directory's
	// password no longer gets in.
	if status, u, _ := patch(carol.ID, map[string]bool{"disabled": true}); status != http.StatusOK || !u.Disabled || u.Source != auth.SourceLDAP {
		t.Fatalf("disable carol: %d %+v", status, u)
	}
	c.must(http.StatusUnauthorized, "GET", "/api/v1/me", nil, nil)
	if status, _, _ := p.loginStatus("carol", "ldap password 1"); status != http.StatusUnauthorized {
		t.Fatalf("login of a disabled LDAP user: %d", status)
	}
}
