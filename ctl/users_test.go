package ctl_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/config"
)

// users lists the instance's users through codumentorctl users list --json.
func users(t *testing.T, dir string) map[string]auth.User {
	t.Helper()
	r := ctl(t, "users", "list", "--instance", dir, "--json")
	if r.code != 0 {
		t.Fatalf("users list: %v", r)
	}
	var list []auth.User
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("users list --json: %v\n%s", err, r.stdout)
	}
	m := map[string]auth.User{}
	for _, u := range list {
		m[u.Name] = u
	}
	return m
}

// assertPassword checks pw against the hash stored for name.
func assertPassword(t *testing.T, dir, name, pw string) {
	t.Helper()
	var u auth.User
	if err := openDB(t, dir).Where("name = ?", name).Take(&u).Error; err != nil {
		t.Fatal(err)
	}
	if err := auth.CheckPassword(u.PasswordHash, pw); err != nil {
		t.Errorf("password of %s is not %q: %v", name, pw, err)
	}
}

func TestUsersRoundTrip(t *testing.T) {
	dir := newInstance(t)

	// A missing instance is created, as the server would.
	r := run{args: []string{"users", "add", "--instance", dir, "--admin", "--password-stdin", "alice"}, stdin: "alice password\nignored\n"}.do(t)
	if r.code != 0 || !strings.Contains(r.stdout, "added user alice (id usr_") || !strings.Contains(r.stdout, "role admin") {
		t.Fatalf("users add alice: %v", r)
	}
	if err := (config.Instance{Dir: dir}).CheckModes(); err != nil {
		t.Errorf("instance after users add: %v", err)
	}
	r = ctl(t, "users", "add", "--instance", dir, "--password", "bob password", "bob")
	if r.code != 0 || !strings.Contains(r.stdout, "role user") {
		t.Fatalf("users add bob: %v", r)
	}
	assertPassword(t, dir, "alice", "alice password")
	assertPassword(t, dir, "bob", "bob password")

	got := users(t, dir)
	if len(got) != 2 || got["alice"].Role != auth.RoleAdmin || got["bob"].Role != auth.RoleUser ||
		got["alice"].Source != auth.SourceLocal || got["alice"].Disabled || got["bob"].Disabled {
		t.Errorf("users: %+v", got)
	}
	if !strings.Contains(r.stdout, got["bob"].ID) {
		t.Errorf("users add printed %q, not bob's ID %s", r.stdout, got["bob"].ID)
	}

	r = ctl(t, "users", "list", "--instance", dir)
	for _, want := range []string{"NAME", "LAST LOGIN", "\nalice  admin  local   no", "\nbob    user   local   no", "never"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("users list lacks %q:\n%s", want, r.stdout)
		}
	}

	if r := ctl(t, "users", "disable", "--instance", dir, "bob"); r.code != 0 || r.stdout != "disabled user bob\n" {
		t.Errorf("users disable: %v", r)
	}
	if u := users(t, dir)["bob"]; !u.Disabled {
		t.Errorf("bob not disabled: %+v", u)
	}
	if r := ctl(t, "users", "enable", "--instance", dir, "bob"); r.code != 0 || r.stdout != "enabled user bob\n" {
		t.Errorf("users enable: %v", r)
	}
	if u := users(t, dir)["bob"]; u.Disabled {
		t.Errorf("bob still disabled: %+v", u)
	}

	// A password typed on Windows keeps no carriage return either.
	r = run{args: []string{"users", "passwd", "--instance", dir, "--password-stdin", "alice"}, stdin: "new alice password\r\n"}.do(t)
	if r.code != 0 || !strings.Contains(r.stdout, "alice") {
		t.Errorf("users passwd: %v", r)
	}
	assertPassword(t, dir, "alice", "new alice password")
	// Without a trailing newline the whole input is the password.
	r = run{args: []string{"users", "passwd", "--instance", dir, "--password-stdin", "bob"}, stdin: "no newline here"}.do(t)
	if r.code != 0 {
		t.Errorf("users passwd: %v", r)
	}
	assertPassword(t, dir, "bob", "no newline here")
}

func TestUsersErrors(t *testing.T) {
	dir := newInstance(t)
	if r := ctl(t, "users", "add", "--instance", dir, "--password", "alice password", "alice"); r.code != 0 {
		t.Fatalf("users add: %v", r)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  string // in stderr
	}{
		{"duplicate", []string{"add", "--password", "another password", "alice"}, "", 1, "user alice already exists"},
		{"bad name", []string{"add", "--password", "a good password", "Alice"}, "", 1, "only lower-case letters, digits"},
		{"bad first character", []string{"add", "--password", "a good password", "_alice"}, "", 1, "must start with a letter or a digit"},
		{"weak password", []string{"add", "--password", "short", "carol"}, "", 1, "at least 8 needed"},
		{"weak new password", []string{"passwd", "--password", "short", "alice"}, "", 1, "at least 8 needed"},
		{"empty stdin", []string{"add", "--password-stdin", "carol"}, "", 1, "standard input is empty"},
		{"unknown user disabled", []string{"disable", "nobody"}, "", 1, "user not found: nobody"},
		{"unknown user enabled", []string{"enable", "nobody"}, "", 1, "user not found: nobody"},
		{"unknown user's password", []string{"passwd", "--password", "a good password", "nobody"}, "", 1, "user not found: nobody"},
		{"no password", []string{"add", "carol"}, "", 2, "--password-stdin"},
		{"two passwords", []string{"add", "--password", "a good password", "--password-stdin", "carol"}, "x\n", 2, "not both"},
		{"no name", []string{"add", "--password", "a good password"}, "", 2, "missing the user's NAME"},
		{"two names", []string{"disable", "alice", "bob"}, "", 2, `unexpected argument "bob"`},
	} {
		args := append([]string{"users", tc.args[0], "--instance", dir}, tc.args[1:]...)
		r := run{args: args, stdin: tc.stdin}.do(t)
		if r.code != tc.code || !strings.HasPrefix(r.stderr, "codumentorctl: ") || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: want exit %d and %q, got %v", tc.name, tc.code, tc.want, r)
		}
	}
	if got := users(t, dir); len(got) != 1 {
		t.Errorf("failed commands changed the users: %+v", got)
	}
	assertPassword(t, dir, "alice", "alice password")

	// Reading commands do not create an instance or a database.
	r := ctl(t, "users", "list", "--instance", dir+"-typo")
	if r.code != 1 || !strings.Contains(r.stderr, dir+"-typo") {
		t.Errorf("users list on a missing instance: %v", r)
	}
}

// Without --password or --password-stdin, passwd asks twice on a real
// terminal (script(1) gives codumentorctl a pty); two different answers
// change nothing.
func TestUsersPasswdPrompts(t *testing.T) {
	dir := newInstance(t)
	if r := ctl(t, "users", "add", "--instance", dir, "--password", "alice password", "alice"); r.code != 0 {
		t.Fatalf("users add: %v", r)
	}
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("script(1) from util-linux is needed for a terminal: %v", err)
	}
	onTerminal := func(stdin string) result {
		line := ctlBin + " users passwd --instance " + dir + " alice"
		return run{wrap: []string{script, "-qec", line, "/dev/null"}, stdin: stdin}.do(t)
	}
	r := onTerminal("first answer\nsecond answer\n")
	if r.code == 0 || !strings.Contains(r.stdout, "New password: ") || !strings.Contains(r.stdout, "the two passwords differ") {
		t.Errorf("two different answers: %v", r)
	}
	assertPassword(t, dir, "alice", "alice password")

	r = onTerminal("a new password\na new password\n")
	if r.code != 0 || !strings.Contains(r.stdout, "Repeat the password: ") || !strings.Contains(r.stdout, "changed the password of user alice") {
		t.Errorf("prompted passwd: %v", r)
	}
	assertPassword(t, dir, "alice", "a new password")

	// Not a terminal and no flag: a usage error, not a hang.
	if r := ctl(t, "users", "passwd", "--instance", dir, "alice"); r.code != 2 || !strings.Contains(r.stderr, "not a terminal") {
		t.Errorf("passwd without a terminal: %v", r)
	}
}

// users passwd and users disable end the tokens the user holds, on a
// server that shares the database; users enable does not revive them.
func TestUsersRevokeTokens(t *testing.T) {
	dir := newInstance(t)
	for _, name := range []string{"alice", "bob"} {
		if r := ctl(t, "users", "add", "--instance", dir, "--password", name+" password", name); r.code != 0 {
			t.Fatalf("users add %s: %v", name, r)
		}
	}
	us, err := auth.NewUsers(openDB(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewTokens("test-secret-0123456789-abcdefghijklmnopqrstuvwxyz", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	claims := func(name string) auth.Claims {
		t.Helper()
		u, err := us.ByName(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := tokens.Issue(u)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tokens.Verify(tok)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := us.ForToken(ctx, c); err != nil {
			t.Fatalf("a fresh token of %s: %v", name, err)
		}
		return c
	}
	alice, bob := claims("alice"), claims("bob")
	if r := ctl(t, "users", "passwd", "--instance", dir, "--password", "new alice password", "alice"); r.code != 0 {
		t.Fatalf("users passwd: %v", r)
	}
	if _, err := us.ForToken(ctx, alice); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("alice's token after users passwd: %v, want ErrInvalidToken", err)
	}
	claims("alice")
	for _, cmd := range []string{"disable", "enable"} {
		if r := ctl(t, "users", cmd, "--instance", dir, "bob"); r.code != 0 {
			t.Fatalf("users %s: %v", cmd, r)
		}
		if _, err := us.ForToken(ctx, bob); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("bob's token after users %s: %v, want ErrInvalidToken", cmd, err)
		}
	}
	claims("bob")
}
