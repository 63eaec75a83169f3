package auth_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/auth"
)

// SetGroups replaces one source's memberships and leaves the others;
// bad sets change nothing; auth.admin_groups makes and unmakes admins,
// but never demotes one made otherwise.
func TestSetGroups(t *testing.T) {
	ctx := context.Background()
	us := newUsers(t)
	if err := us.SetAdminGroups([]string{"Ops"}); err != nil {
		t.Fatal(err)
	}
	alice, err := us.Add(ctx, auth.AddUser{Name: "alice", Password: "alice password", By: auth.CommandLine})
	if err != nil {
		t.Fatal(err)
	}
	root, err := us.Add(ctx, auth.AddUser{Name: "root", Password: "root password", Admin: true, By: auth.CommandLine})
	if err != nil {
		t.Fatal(err)
	}
	groups := func(id string) []string {
		t.Helper()
		gs, err := us.GroupsOf(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return gs
	}
	role := func(id string) auth.Role {
		t.Helper()
		u, err := us.ByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return u.Role
	}
	if _, err := us.AddGroup(ctx, auth.CommandLine, "local-team"); err != nil {
		t.Fatal(err)
	}
	if err := us.SetMember(ctx, auth.CommandLine, "local-team", "alice", true); err != nil {
		t.Fatal(err)
	}
	if err := us.SetGroups(ctx, alice.ID, auth.GroupSourceLDAP, []string{"Devs", "devs", "ops"}); err != nil {
		t.Fatal(err)
	}
	if got := groups(alice.ID); !slices.Equal(got, []string{"devs", "local-team", "ops"}) {
		t.Errorf("alice's groups: %v", got)
	}
	if role(alice.ID) != auth.RoleAdmin {
		t.Errorf("alice in ops is %s", role(alice.ID))
	}
	// Another source's set leaves LDAP's and the local memberships.
	if err := us.SetGroups(ctx, alice.ID, auth.GroupSourceOIDC, []string{"sso-users"}); err != nil {
		t.Fatal(err)
	}
	if got := groups(alice.ID); !slices.Equal(got, []string{"devs", "local-team", "ops", "sso-users"}) {
		t.Errorf("alice's groups with OIDC's: %v", got)
	}
	for _, bad := range []struct {
		source string
		groups []string
	}{
		{"ldap", []string{"devs", ""}},
		{"ldap", []string{"bad\nname"}},
		{"ldap", []string{" padded"}},
		{"ldap", []string{strings.Repeat("g", auth.MaxGroupName+1)}},
		{"ldap", func() (gs []string) {
			for i := range auth.MaxGroups + 1 {
				gs = append(gs, fmt.Sprint("g", i))
			}
			return gs
		}()},
		{"github", []string{"devs"}},
	} {
		if err := us.SetGroups(ctx, alice.ID, bad.source, bad.groups); !errors.Is(err, auth.ErrInvalidGroup) {
			t.Errorf("SetGroups(%s, %d groups) = %v, want ErrInvalidGroup", bad.source, len(bad.groups), err)
		}
	}
	if got := groups(alice.ID); !slices.Equal(got, []string{"devs", "local-team", "ops", "sso-users"}) {
		t.Errorf("a refused set changed alice's groups: %v", got)
	}
	// Out of ops: a user again. root, an admin by users add --admin,
	// stays one outside every admin group.
	if err := us.SetGroups(ctx, alice.ID, auth.GroupSourceLDAP, nil); err != nil {
		t.Fatal(err)
	}
	if got := groups(alice.ID); !slices.Equal(got, []string{"local-team", "sso-users"}) || role(alice.ID) != auth.RoleUser {
		t.Errorf("alice out of the LDAP groups: %v, %s", got, role(alice.ID))
	}
	if err := us.SetGroups(ctx, root.ID, auth.GroupSourceLDAP, []string{"devs"}); err != nil {
		t.Fatal(err)
	}
	if role(root.ID) != auth.RoleAdmin {
		t.Errorf("root outside ops is %s", role(root.ID))
	}
	if err := us.SetGroups(ctx, "usr_nobody", auth.GroupSourceLDAP, []string{"devs"}); !errors.Is(err, auth.ErrUserNotFound) {
		t.Errorf("SetGroups of an unknown user: %v", err)
	}
	// Deleting a group ends its memberships, whatever their source.
	if err := us.DeleteGroup(ctx, auth.CommandLine, "SSO-users"); err != nil {
		t.Fatal(err)
	}
	if got := groups(alice.ID); !slices.Equal(got, []string{"local-team"}) {
		t.Errorf("alice after sso-users went: %v", got)
	}
	if err := us.DeleteGroup(ctx, auth.CommandLine, "sso-users"); !errors.Is(err, auth.ErrGroupNotFound) {
		t.Errorf("deleting it again: %v", err)
	}
}
