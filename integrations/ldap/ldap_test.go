package ldap_test

import (
	"context"
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/integrations/ldap"
	"github.com/codumentor/codumentor/integrations/ldap/ldaptest"
)

func TestValidate(t *testing.T) {
	ok := ldap.Config{URL: "ldap://127.0.0.1:389", BindDN: "uid={username},ou=people,dc=example,dc=org"}
	tests := []struct {
		name   string
		edit   func(*ldap.Config)
		badKey string // "" = valid
	}{
		{"direct bind", func(c *ldap.Config) {}, ""},
		{"search", func(c *ldap.Config) {
			c.BindDN, c.SearchBaseDN, c.SearchFilter = "", "dc=example,dc=org", "(uid={username})"
		}, ""},
		{"no url", func(c *ldap.Config) { c.URL = "" }, "auth.ldap.url"},
		{"http url", func(c *ldap.Config) { c.URL = "http://example.org" }, "auth.ldap.url"},
		{"url without host", func(c *ldap.Config) { c.URL = "ldap://" }, "auth.ldap.url"},
		{"ldaps and start_tls", func(c *ldap.Config) { c.URL, c.StartTLS = "ldaps://h", true }, "auth.ldap.start_tls"},
		{"neither way", func(c *ldap.Config) { c.BindDN = "" }, "auth.ldap.bind_dn"},
		{"both ways", func(c *ldap.Config) { c.SearchBaseDN = "dc=x" }, "auth.ldap.bind_dn"},
		{"bind_dn without placeholder", func(c *ldap.Config) { c.BindDN = "uid=alice,dc=x" }, "auth.ldap.bind_dn"},
		{"bind_dn not a DN", func(c *ldap.Config) { c.BindDN = "{username}" }, "auth.ldap.bind_dn"},
		{"filter without base", func(c *ldap.Config) { c.BindDN, c.SearchFilter = "", "(uid={username})" }, "auth.ldap.search_base_dn"},
		{"filter without placeholder", func(c *ldap.Config) {
			c.BindDN, c.SearchBaseDN, c.SearchFilter = "", "dc=x", "(uid=alice)"
		}, "auth.ldap.search_filter"},
		{"filter not a filter", func(c *ldap.Config) {
			c.BindDN, c.SearchBaseDN, c.SearchFilter = "", "dc=x", "(uid={username}"
		}, "auth.ldap.search_filter"},
		{"service dn without password", func(c *ldap.Config) { c.ServiceDN = "cn=svc" }, "auth.ldap.service_password"},
		{"negative timeout", func(c *ldap.Config) { c.Timeout = -time.Second }, "auth.ldap.timeout"},
		{"missing CA file", func(c *ldap.Config) { c.CACertFile = "/nonexistent/ca.pem" }, "auth.ldap.ca_cert_file"},
		{"group search", func(c *ldap.Config) { c.GroupSearchBaseDN, c.GroupSearchFilter = "ou=groups", "(member={dn})" }, ""},
		{"group base without filter", func(c *ldap.Config) { c.GroupSearchBaseDN = "ou=groups" }, "auth.ldap.group_search_filter"},
		{"group filter without base", func(c *ldap.Config) { c.GroupSearchFilter = "(member={dn})" }, "auth.ldap.group_search_base_dn"},
		{"group filter not a filter", func(c *ldap.Config) { c.GroupSearchBaseDN, c.GroupSearchFilter = "ou=groups", "(member={dn}" }, "auth.ldap.group_search_filter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			if tt.badKey == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ldap.ErrConfig) || !strings.Contains(err.Error(), tt.badKey) {
				t.Fatalf("Validate = %v, want an ErrConfig naming %s", err, tt.badKey)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	srv := ldaptest.Start(t)
	aliceDN := srv.AddUser(t, "alice", "alice-password", "Alice Liddell", "alice@example.org")
	srv.AddUser(t, "bob", "bob-password", "", "")
	// Two entries with the same cn, for a filter that matches both.
	srv.AddUser(t, "twin1", "twin-password", "Twin", "")
	srv.AddUser(t, "twin2", "twin-password", "Twin", "")

	direct := ldap.Config{URL: srv.URL, BindDN: "uid={username}," + srv.PeopleDN}
	search := ldap.Config{URL: srv.URL, SearchBaseDN: srv.BaseDN, SearchFilter: "(&(objectClass=inetOrgPerson)(uid={username}))"}
	searchAsService := search
	searchAsService.ServiceDN, searchAsService.ServicePassword = srv.RootDN, srv.RootPassword
	byCN := search
	byCN.SearchFilter = "(cn={username})"

	tests := []struct {
		name     string
		cfg      ldap.Config
		user, pw string
		want     ldap.Entry // zero: want ErrInvalidCredentials
	}{
		{"direct bind", direct, "alice", "alice-password",
			ldap.Entry{DN: aliceDN, Username: "alice", Name: "Alice Liddell", Email: "alice@example.org"}},
		{"direct bind without mail", direct, "bob", "bob-password",
			ldap.Entry{DN: "uid=bob," + srv.PeopleDN, Username: "bob", Name: "bob"}},
		{"direct wrong password", direct, "alice", "bob-password", ldap.Entry{}},
		{"direct unknown user", direct, "carol", "alice-password", ldap.Entry{}},
		{"direct empty password", direct, "alice", "", ldap.Entry{}},
		{"direct empty user", direct, "", "alice-password", ldap.Entry{}},
		{"direct DN injection", direct, "alice,ou=people", "alice-password", ldap.Entry{}},
		{"anonymous search", search, "alice", "alice-password",
			ldap.Entry{DN: aliceDN, Username: "alice", Name: "Alice Liddell", Email: "alice@example.org"}},
		{"service search", searchAsService, "alice", "alice-password",
			ldap.Entry{DN: aliceDN, Username: "alice", Name: "Alice Liddell", Email: "alice@example.org"}},
		{"search wrong password", searchAsService, "alice", "wrong-password", ldap.Entry{}},
		{"search unknown user", search, "carol", "alice-password", ldap.Entry{}},
		{"search empty password", search, "alice", "", ldap.Entry{}},
		{"filter wildcard", search, "*", "alice-password", ldap.Entry{}},
		{"filter wildcard prefix", search, "al*", "alice-password", ldap.Entry{}},
		{"filter injection", search, "alice)(uid=*", "alice-password", ldap.Entry{}},
		{"filter injection or", search, "*)(|(uid=*", "alice-password", ldap.Entry{}},
		{"several entries match", byCN, "Twin", "twin-password", ldap.Entry{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ldap.Authenticate(context.Background(), tt.cfg, tt.user, tt.pw)
			if tt.want.DN == "" {
				if !errors.Is(err, ldap.ErrInvalidCredentials) {
					t.Fatalf("Authenticate(%q) = %+v, %v; want ErrInvalidCredentials", tt.user, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Authenticate(%q): %v", tt.user, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Authenticate(%q) = %+v, want %+v", tt.user, got, tt.want)
			}
		})
	}
}

// TestAuthenticateGroups reads a user's groups from slapd's memberOf
// (the memberof overlay), from a group search, and from both.
func TestAuthenticateGroups(t *testing.T) {
	srv := ldaptest.Start(t)
	aliceDN := srv.AddUser(t, "alice", "alice-password", "Alice", "")
	bobDN := srv.AddUser(t, "bob", "bob-password", "Bob", "")
	srv.AddUser(t, "carol", "carol-password", "Carol", "")
	srv.AddGroup(t, "Devs", aliceDN, bobDN)
	srv.AddGroup(t, "ops", aliceDN)

	memberOf := ldap.Config{URL: srv.URL, BindDN: "uid={username}," + srv.PeopleDN, GroupAttribute: "memberOf"}
	search := ldap.Config{URL: srv.URL, BindDN: "uid={username}," + srv.PeopleDN,
		GroupSearchBaseDN: srv.GroupsDN, GroupSearchFilter: "(&(objectClass=groupOfNames)(member={dn}))"}
	searchAsService := search
	searchAsService.ServiceDN, searchAsService.ServicePassword = srv.RootDN, srv.RootPassword
	both := search
	both.GroupAttribute = "memberOf"
	byUID := search
	byUID.GroupSearchFilter = "(member=uid={username}," + srv.PeopleDN + ")"

	tests := []struct {
		name string
		cfg  ldap.Config
		user string
		want []string
	}{
		{"memberOf", memberOf, "alice", []string{"Devs", "ops"}},
		{"memberOf one", memberOf, "bob", []string{"Devs"}},
		{"memberOf none", memberOf, "carol", []string{}},
		{"search", search, "alice", []string{"Devs", "ops"}},
		{"search as service", searchAsService, "bob", []string{"Devs"}},
		{"search none", search, "carol", []string{}},
		{"both, deduplicated", both, "alice", []string{"Devs", "ops"}},
		{"search by user name", byUID, "bob", []string{"Devs"}},
		{"no group configuration", ldap.Config{URL: srv.URL, BindDN: "uid={username}," + srv.PeopleDN}, "alice", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ldap.Authenticate(context.Background(), tt.cfg, tt.user, tt.user+"-password")
			if err != nil {
				t.Fatal(err)
			}
			got := e.Groups
			if got != nil {
				slices.Sort(got)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("groups of %s = %#v, want %#v", tt.user, got, tt.want)
			}
		})
	}

	bad := search
	bad.GroupSearchBaseDN = "ou=nowhere," + srv.BaseDN
	if _, err := ldap.Authenticate(context.Background(), bad, "alice", "alice-password"); err == nil || errors.Is(err, ldap.ErrInvalidCredentials) || !strings.Contains(err.Error(), "group_search_base_dn") {
		t.Errorf("a missing group base: %v, want an error naming group_search_base_dn", err)
	}
}

func TestAuthenticateFailures(t *testing.T) {
	srv := ldaptest.Start(t)
	srv.AddUser(t, "alice", "alice-password", "", "")

	t.Run("StartTLS without TLS on the server", func(t *testing.T) {
		c := ldap.Config{URL: srv.URL, BindDN: "uid={username}," + srv.PeopleDN, StartTLS: true}
		_, err := ldap.Authenticate(context.Background(), c, "alice", "alice-password")
		if err == nil || errors.Is(err, ldap.ErrInvalidCredentials) || !strings.Contains(err.Error(), "StartTLS") {
			t.Fatalf("Authenticate = %v, want a StartTLS error that is not ErrInvalidCredentials", err)
		}
	})
	t.Run("ldaps to a plain server", func(t *testing.T) {
		c := ldap.Config{URL: strings.Replace(srv.URL, "ldap://", "ldaps://", 1), BindDN: "uid={username}," + srv.PeopleDN,
			Timeout: 2 * time.Second}
		_, err := ldap.Authenticate(context.Background(), c, "alice", "alice-password")
		if err == nil || errors.Is(err, ldap.ErrInvalidCredentials) {
			t.Fatalf("Authenticate = %v, want a connection error", err)
		}
	})
	t.Run("unreachable server", func(t *testing.T) {
		c := ldap.Config{URL: "ldap://127.0.0.1:1", BindDN: "uid={username},dc=x"}
		_, err := ldap.Authenticate(context.Background(), c, "alice", "alice-password")
		if !errors.Is(err, ldap.ErrUnavailable) || errors.Is(err, ldap.ErrInvalidCredentials) || !strings.Contains(err.Error(), "connecting to ldap://127.0.0.1:1") {
			t.Fatalf("Authenticate = %v, want ErrUnavailable naming the URL", err)
		}
	})
	t.Run("server that never answers", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close() // held open, silent, until the test ends
			}
		}()
		c := ldap.Config{URL: "ldap://" + ln.Addr().String(), BindDN: "uid={username},dc=x", Timeout: 300 * time.Millisecond}
		_, err = ldap.Authenticate(context.Background(), c, "alice", "alice-password")
		if !errors.Is(err, ldap.ErrUnavailable) || errors.Is(err, ldap.ErrInvalidCredentials) {
			t.Fatalf("Authenticate = %v, want ErrUnavailable", err)
		}
	})
	t.Run("wrong service password", func(t *testing.T) {
		c := ldap.Config{URL: srv.URL, SearchBaseDN: srv.BaseDN, SearchFilter: "(uid={username})",
			ServiceDN: srv.RootDN, ServicePassword: "not-the-root-password"}
		_, err := ldap.Authenticate(context.Background(), c, "alice", "alice-password")
		// The user's credentials were never tried: not their fault.
		if err == nil || errors.Is(err, ldap.ErrInvalidCredentials) || errors.Is(err, ldap.ErrUnavailable) || !strings.Contains(err.Error(), "service account") {
			t.Fatalf("Authenticate = %v, want a service-account error", err)
		}
	})
	t.Run("missing search base", func(t *testing.T) {
		c := ldap.Config{URL: srv.URL, SearchBaseDN: "ou=nowhere," + srv.BaseDN, SearchFilter: "(uid={username})"}
		_, err := ldap.Authenticate(context.Background(), c, "alice", "alice-password")
		if err == nil || errors.Is(err, ldap.ErrInvalidCredentials) || !strings.Contains(err.Error(), "search_base_dn") {
			t.Fatalf("Authenticate = %v, want an error naming search_base_dn", err)
		}
	})
	t.Run("canceled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		c := ldap.Config{URL: srv.URL, BindDN: "uid={username}," + srv.PeopleDN}
		_, err := ldap.Authenticate(ctx, c, "alice", "alice-password")
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Authenticate = %v, want context.Canceled", err)
		}
	})
}
