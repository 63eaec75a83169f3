package ctl_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/config"
)

// groups add, add-member, list, remove-member and delete work on the
// instance database, and a membership change applies auth.admin_groups
// of the instance's configuration to the member at once.
func TestGroups(t *testing.T) {
	dir := initInstance(t)
	cfg := "auth:\n  jwt_secret: " + strings.Repeat("s", 40) + "\n  admin_groups: [ops]\n"
	if err := os.WriteFile(config.Instance{Dir: dir}.ConfigFile(), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alice", "bob"} {
		if r := ctl(t, "users", "add", "--instance", dir, "--password", name+" password", name); r.code != 0 {
			t.Fatalf("users add: %v", r)
		}
	}
	role := func(name string) auth.Role {
		t.Helper()
		r := ctl(t, "users", "list", "--json", "--instance", dir)
		var us []auth.User
		if err := json.Unmarshal([]byte(r.stdout), &us); err != nil {
			t.Fatalf("users list: %v in %v", err, r)
		}
		for _, u := range us {
			if u.Name == name {
				return u.Role
			}
		}
		t.Fatalf("no user %s in %v", name, r)
		return ""
	}
	for _, args := range [][]string{
		{"groups", "add", "Devs"},
		{"groups", "add", "ops"},
		{"groups", "add-member", "devs", "alice"},
		{"groups", "add-member", "ops", "bob"},
	} {
		if r := ctl(t, append(args, "--instance", dir)...); r.code != 0 {
			t.Fatalf("%v: %v", args, r)
		}
	}
	if got := role("bob"); got != auth.RoleAdmin {
		t.Errorf("bob in ops (auth.admin_groups) is %s", got)
	}
	r := ctl(t, "groups", "list", "--instance", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "devs   alice (local)") || !strings.Contains(r.stdout, "ops    bob (local)") {
		t.Errorf("groups list: %v", r)
	}
	for _, bad := range [][]string{
		{"groups", "add", "devs"},                  // exists
		{"groups", "add-member", "nope", "alice"},  // no such group
		{"groups", "add-member", "devs", "nobody"}, // no such user
		{"groups", "add", "bad\nname"},             // not one line
	} {
		if r := ctl(t, append(bad, "--instance", dir)...); r.code != 1 {
			t.Errorf("%q: %v, want exit 1", bad, r)
		}
	}
	if r := ctl(t, "groups", "add-member", "devs", "--instance", dir); r.code != 2 {
		t.Errorf("add-member without USER: %v, want exit 2", r)
	}
	if r := ctl(t, "groups", "remove-member", "ops", "bob", "--instance", dir); r.code != 0 {
		t.Fatal(r)
	}
	if got := role("bob"); got != auth.RoleUser {
		t.Errorf("bob out of ops is %s", got)
	}
	if r := ctl(t, "groups", "delete", "devs", "--instance", dir); r.code != 0 {
		t.Fatal(r)
	}
	r = ctl(t, "groups", "list", "--json", "--instance", dir)
	var gs []auth.Group
	if err := json.Unmarshal([]byte(r.stdout), &gs); err != nil || len(gs) != 1 || gs[0].Name != "ops" || len(gs[0].Members) != 0 {
		t.Errorf("groups after the changes: %+v, %v (%v)", gs, err, r)
	}
}

// repos add gives a new repository the configuration's
// repositories.default_access: admins, no entry.
func TestReposAddDefaultAccess(t *testing.T) {
	dir := initInstance(t)
	cfg := "auth:\n  jwt_secret: " + strings.Repeat("s", 40) + "\nrepositories:\n  default_access: admins\n"
	if err := os.WriteFile(config.Instance{Dir: dir}.ConfigFile(), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl(t, "users", "add", "--instance", dir, "--password", "correct horse battery", "root") // creates the database
	if r := ctl(t, "repos", "add", "--instance", dir, "closed", "file:///nonexistent/r.git"); r.code != 0 {
		t.Fatalf("repos add: %v", r)
	}
	var n int64
	if err := openDB(t, dir).Table("repository_access").Count(&n).Error; err != nil || n != 0 {
		t.Errorf("access entries of a repository added under default_access admins: %d, %v", n, err)
	}
}
