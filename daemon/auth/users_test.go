package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

// newUsers opens a fresh database and migrates the users table in it.
func newUsers(t *testing.T) *auth.Users {
	t.Helper()
	us, err := auth.NewUsers(storetest.Open(t))
	if err != nil {
		t.Fatal(err)
	}
	return us
}

func TestUsers(t *testing.T) {
	ctx := context.Background()
	us := newUsers(t)

	if n, err := us.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count on a new table = %d, %v; want 0", n, err)
	}
	admin, err := us.Add(ctx, auth.AddUser{Name: "root-admin", Password: "admin-password", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(admin.ID, "usr_") || admin.Role != auth.RoleAdmin || admin.Source != auth.SourceLocal ||
		admin.Created.IsZero() || admin.LastLogin != nil {
		t.Fatalf("Add returned %+v", admin)
	}
	bob, err := us.Add(ctx, auth.AddUser{Name: "bob", Password: "bob-password"})
	if err != nil {
		t.Fatal(err)
	}
	if bob.Role != auth.RoleUser || bob.ID == admin.ID {
		t.Fatalf("Add returned %+v", bob)
	}
	if _, err := us.Add(ctx, auth.AddUser{Name: "bob", Password: "other-password"}); !errors.Is(err, auth.ErrUserExists) {
		t.Fatalf("Add(bob again) = %v, want ErrUserExists", err)
	}
	if _, err := us.Add(ctx, auth.AddUser{Name: "carol", Password: "short"}); !errors.Is(err, auth.ErrWeakPassword) {
		t.Fatalf("Add(short password) = %v, want ErrWeakPassword", err)
	}

	got, err := us.ByName(ctx, "bob")
	if err != nil || got.ID != bob.ID || got.PasswordHash == "" {
		t.Fatalf("ByName(bob) = %+v, %v", got, err)
	}
	if err := auth.CheckPassword(got.PasswordHash, "bob-password"); err != nil {
		t.Fatalf("the stored hash does not check: %v", err)
	}
	if got, err := us.ByID(ctx, admin.ID); err != nil || got.Name != "root-admin" {
		t.Fatalf("ByID = %+v, %v", got, err)
	}
	if _, err := us.ByName(ctx, "nobody"); !errors.Is(err, auth.ErrUserNotFound) {
		t.Fatalf("ByName(nobody) = %v, want ErrUserNotFound", err)
	}
	if _, err := us.ByID(ctx, "usr_0"); !errors.Is(err, auth.ErrUserNotFound) {
		t.Fatalf("ByID(usr_0) = %v, want ErrUserNotFound", err)
	}

	list, err := us.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "bob" || list[1].Name != "root-admin" {
		t.Fatalf("List = %+v, %v; want bob, root-admin", list, err)
	}
	if n, _ := us.Count(ctx); n != 2 {
		t.Fatalf("Count = %d, want 2", n)
	}

	if err := us.SetDisabled(ctx, auth.CommandLine, "bob", true); err != nil {
		t.Fatal(err)
	}
	if got, _ := us.ByName(ctx, "bob"); !got.Disabled || !got.Updated.After(bob.Updated) {
		t.Fatalf("after SetDisabled: %+v", got)
	}
	if err := us.SetDisabled(ctx, auth.CommandLine, "nobody", true); !errors.Is(err, auth.ErrUserNotFound) {
		t.Fatalf("SetDisabled(nobody) = %v, want ErrUserNotFound", err)
	}

	if err := us.SetPassword(ctx, auth.CommandLine, "bob", "new-bob-password"); err != nil {
		t.Fatal(err)
	}
	got, _ = us.ByName(ctx, "bob")
	if err := auth.CheckPassword(got.PasswordHash, "new-bob-password"); err != nil {
		t.Fatalf("new password: %v", err)
	}
	if err := auth.CheckPassword(got.PasswordHash, "bob-password"); !errors.Is(err, auth.ErrInvalidCredentials) {
		t.Fatalf("old password still checks: %v", err)
	}
	if err := us.SetPassword(ctx, auth.CommandLine, "bob", "2short"); !errors.Is(err, auth.ErrWeakPassword) {
		t.Fatalf("SetPassword(short) = %v, want ErrWeakPassword", err)
	}
	if err := us.SetPassword(ctx, auth.CommandLine, "nobody", "long-enough"); !errors.Is(err, auth.ErrUserNotFound) {
		t.Fatalf("SetPassword(nobody) = %v, want ErrUserNotFound", err)
	}
}

func TestUserJSON(t *testing.T) {
	us := newUsers(t)
	u, err := us.Add(context.Background(), auth.AddUser{Name: "alice", Password: "alice-password"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"id", "name", "role", "source", "disabled", "display_name", "email", "created", "updated", "last_login"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	if strings.Contains(string(b), "argon2") || strings.Contains(strings.ToLower(string(b)), "password") {
		t.Fatalf("JSON carries the password hash: %s", b)
	}
}

func TestValidateName(t *testing.T) {
	us := newUsers(t)
	for _, name := range []string{"a", "alice", "0day", "j.doe", "j_doe", "j-doe", strings.Repeat("a", 64)} {
		if err := auth.ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q): %v", name, err)
		}
	}
	for name, rule := range map[string]string{
		"":                      "1 to 64",
		strings.Repeat("a", 65): "1 to 64",
		"Alice":                 "lower-case",
		".alice":                "start with",
		"-alice":                "start with",
		"al ice":                "lower-case",
		"al*":                   "lower-case",
		"alice@example.org":     "lower-case",
		"ålice":                 "lower-case",
	} {
		err := auth.ValidateName(name)
		if !errors.Is(err, auth.ErrInvalidName) || !strings.Contains(err.Error(), rule) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName naming the rule %q", name, err, rule)
		}
		if _, err := us.Add(context.Background(), auth.AddUser{Name: name, Password: "long-enough"}); !errors.Is(err, auth.ErrInvalidName) {
			t.Errorf("Add(%q) = %v, want ErrInvalidName", name, err)
		}
	}
}

// A password change, disabling and Revoke end the tokens issued before;
// re-enabling does not bring them back.
func TestForToken(t *testing.T) {
	ctx := context.Background()
	us := newUsers(t)
	u, err := us.Add(ctx, auth.AddUser{Name: "alice", Password: "alice-password"})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokens("secret-A-0123456789abcdef0123456789abcdef", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	issue := func() auth.Claims {
		t.Helper()
		cur, err := us.ByID(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := tokens.Issue(cur)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tokens.Verify(tok)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	valid := func(c auth.Claims) {
		t.Helper()
		if got, err := us.ForToken(ctx, c); err != nil || got.ID != u.ID {
			t.Fatalf("ForToken = %v, %v; want alice", got.Name, err)
		}
	}
	revoked := func(c auth.Claims, why string) {
		t.Helper()
		if _, err := us.ForToken(ctx, c); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("%s: ForToken = %v, want ErrInvalidToken", why, err)
		}
	}
	first := issue()
	valid(first)
	if err := us.SetPassword(ctx, auth.CommandLine, "alice", "new-password-1"); err != nil {
		t.Fatal(err)
	}
	revoked(first, "after a password change")
	second := issue()
	valid(second)
	if err := us.Revoke(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	revoked(second, "after Revoke")
	third := issue()
	if err := us.SetDisabled(ctx, auth.CommandLine, "alice", true); err != nil {
		t.Fatal(err)
	}
	revoked(third, "while disabled")
	if err := us.SetDisabled(ctx, auth.CommandLine, "alice", false); err != nil {
		t.Fatal(err)
	}
	revoked(third, "after re-enabling")
	valid(issue())
	revoked(auth.Claims{UserID: "usr_nobody"}, "unknown user")
	if err := us.Revoke(ctx, "usr_nobody"); !errors.Is(err, auth.ErrUserNotFound) {
		t.Fatalf("Revoke of an unknown ID = %v, want ErrUserNotFound", err)
	}
}

// TestAdminActsOnlyWhileAdmin: an administrator's change applies only if
// they are still an enabled administrator when it is written. Two
// admins disabling each other at once both passed the request's check;
// the later write must not leave the instance without an admin.
func TestAdminActsOnlyWhileAdmin(t *testing.T) {
	ctx := context.Background()
	us := newUsers(t)
	a, err := us.Add(ctx, auth.AddUser{Name: "ada", Password: "ada-password", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := us.Add(ctx, auth.AddUser{Name: "ben", Password: "ben-password", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := us.Add(ctx, auth.AddUser{Name: "cy", Password: "cy-password"}); err != nil {
		t.Fatal(err)
	}
	if err := us.SetDisabled(ctx, a.ID, "ben", true); err != nil {
		t.Fatal(err)
	}
	// ben's request was admitted before: now refused.
	if err := us.SetDisabled(ctx, b.ID, "ada", true); !errors.Is(err, auth.ErrNotAdmin) {
		t.Fatalf("a disabled admin disables another: %v, want ErrNotAdmin", err)
	}
	if err := us.SetPassword(ctx, b.ID, "cy", "new-cy-password"); !errors.Is(err, auth.ErrNotAdmin) {
		t.Fatalf("a disabled admin resets a password: %v, want ErrNotAdmin", err)
	}
	if _, err := us.Add(ctx, auth.AddUser{Name: "dee", Password: "dee-password", Admin: true, By: b.ID}); !errors.Is(err, auth.ErrNotAdmin) {
		t.Fatalf("a disabled admin adds a user: %v, want ErrNotAdmin", err)
	}
	if _, err := us.ByName(ctx, "dee"); !errors.Is(err, auth.ErrUserNotFound) {
		t.Fatalf("dee after ben's refused add: %v, want ErrUserNotFound", err)
	}
	if u, err := us.ByName(ctx, "ada"); err != nil || u.Disabled {
		t.Fatalf("ada after ben's refused change: %+v, %v", u, err)
	}
	if _, err := us.Add(ctx, auth.AddUser{Name: "dee", Password: "dee-password", By: a.ID}); err != nil {
		t.Fatalf("an enabled admin adds a user: %v", err)
	}
	// Still an admin: applied; an unknown user is still ErrUserNotFound.
	if err := us.SetPassword(ctx, a.ID, "cy", "new-cy-password"); err != nil {
		t.Fatal(err)
	}
	if err := us.SetDisabled(ctx, a.ID, "nobody", true); !errors.Is(err, auth.ErrUserNotFound) {
		t.Fatalf("disabling nobody: %v, want ErrUserNotFound", err)
	}
}
