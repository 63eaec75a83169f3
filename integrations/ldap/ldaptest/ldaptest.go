// Package ldaptest starts a real, throwaway slapd on 127.0.0.1 for tests:
// its own configuration and database in t.TempDir(), a free port, stopped
// at the test's cleanup.
//
// Without slapd (Debian: the slapd and ldap-utils packages, which
// scripts/install-prereqs installs) Start skips the test, or fails it when
// CI=true: a CI run that silently tested nothing would pass.
package ldaptest

import (
	"fmt"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	goldap "github.com/go-ldap/ldap/v3"
)

// Server is a running slapd holding BaseDN with an ou=people under it.
type Server struct {
	URL          string // ldap://127.0.0.1:PORT
	BaseDN       string // dc=example,dc=org
	PeopleDN     string // ou=people,<BaseDN>, where AddUser puts users
	GroupsDN     string // ou=groups,<BaseDN>, where AddGroup puts groups
	RootDN       string // the directory's administrator, for search tests
	RootPassword string
}

// The directory's access rules: passwords can only be used to bind (never
// read, not even by their owner or a search account); everything else is
// readable by anyone, so anonymous search works. The memberof overlay
// keeps the members' memberOf.
const confTemplate = `include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile %[1]s/slapd.pid
argsfile %[1]s/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload memberof
database mdb
maxsize 16777216
suffix "%[2]s"
rootdn "%[3]s"
rootpw "%[4]s"
directory %[1]s/db
access to attrs=userPassword by anonymous auth by * none
access to * by * read
overlay memberof
`

// Start starts slapd and creates the base entries. It is stopped when the
// test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("slapd")
	if err != nil {
		bin = "/usr/sbin/slapd" // not on a non-root PATH
		if _, err := os.Stat(bin); err != nil {
			missing(t, "slapd is not installed (Debian: apt-get install slapd ldap-utils, or scripts/install-prereqs)")
		}
	}
	if _, err := os.Stat("/usr/lib/ldap"); err != nil {
		missing(t, "slapd's modules are not in /usr/lib/ldap")
	}
	s := &Server{
		BaseDN:       "dc=example,dc=org",
		RootDN:       "cn=admin,dc=example,dc=org",
		RootPassword: "rootsecret",
	}
	s.PeopleDN = "ou=people," + s.BaseDN
	s.GroupsDN = "ou=groups," + s.BaseDN

	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "slapd.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, confTemplate, dir, s.BaseDN, s.RootDN, s.RootPassword), 0o600); err != nil {
		t.Fatal(err)
	}

	// The free port is found by listening and closing; another process may
	// take it before slapd binds it, so try a few times.
	var lastErr error
	for range 3 {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if lastErr = s.run(t, bin, conf, addr); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("ldaptest: %v", lastErr)
	}

	conn := s.dialRoot(t)
	defer conn.Close()
	add(t, conn, s.BaseDN, map[string][]string{
		"objectClass": {"dcObject", "organization"},
		"dc":          {"example"},
		"o":           {"Example"},
	})
	add(t, conn, s.PeopleDN, map[string][]string{
		"objectClass": {"organizationalUnit"},
		"ou":          {"people"},
	})
	add(t, conn, s.GroupsDN, map[string][]string{
		"objectClass": {"organizationalUnit"},
		"ou":          {"groups"},
	})
	return s
}

// AddGroup adds a groupOfNames cn=<cn> under GroupsDN whose members are
// the DNs members (at least one: the schema requires a member), and
// returns its DN. The memberof overlay gives each member a memberOf
// value naming it.
func (s *Server) AddGroup(t testing.TB, cn string, members ...string) string {
	t.Helper()
	dn := "cn=" + goldap.EscapeDN(cn) + "," + s.GroupsDN
	conn := s.dialRoot(t)
	defer conn.Close()
	add(t, conn, dn, map[string][]string{
		"objectClass": {"groupOfNames"},
		"cn":          {cn},
		"member":      members,
	})
	return dn
}

// RemoveMember removes member (a DN) from the group cn.
func (s *Server) RemoveMember(t testing.TB, cn, member string) {
	t.Helper()
	conn := s.dialRoot(t)
	defer conn.Close()
	req := goldap.NewModifyRequest("cn="+goldap.EscapeDN(cn)+","+s.GroupsDN, nil)
	req.Delete("member", []string{member})
	if err := conn.Modify(req); err != nil {
		t.Fatalf("ldaptest: removing %s from group %s: %v", member, cn, err)
	}
}

// run starts slapd in the foreground (-d 0) on addr and waits until it
// accepts connections.
func (s *Server) run(t testing.TB, bin, conf, addr string) error {
	url := "ldap://" + addr + "/"
	cmd := exec.Command(bin, "-f", conf, "-h", url, "-d", "0")
	var out sandboxtest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("slapd exited before accepting connections (%v):\n%s", err, out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("slapd did not listen on %s within 15s:\n%s", addr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("slapd output:\n%s", out.String())
		}
	})
	s.URL = "ldap://" + addr
	return nil
}

// AddUser adds an inetOrgPerson uid=<uid> under PeopleDN and returns its
// DN. An empty cn or mail leaves the attribute out (cn then defaults to
// uid: the schema requires one).
func (s *Server) AddUser(t testing.TB, uid, password, cn, mail string) string {
	t.Helper()
	if cn == "" {
		cn = uid
	}
	attrs := map[string][]string{
		"objectClass":  {"inetOrgPerson"},
		"uid":          {uid},
		"cn":           {cn},
		"sn":           {cn},
		"userPassword": {password},
	}
	if mail != "" {
		attrs["mail"] = []string{mail}
	}
	dn := "uid=" + goldap.EscapeDN(uid) + "," + s.PeopleDN
	conn := s.dialRoot(t)
	defer conn.Close()
	add(t, conn, dn, attrs)
	return dn
}

func (s *Server) dialRoot(t testing.TB) *goldap.Conn {
	t.Helper()
	conn, err := goldap.DialURL(s.URL)
	if err != nil {
		t.Fatalf("ldaptest: connecting to %s: %v", s.URL, err)
	}
	if err := conn.Bind(s.RootDN, s.RootPassword); err != nil {
		conn.Close()
		t.Fatalf("ldaptest: binding as %s: %v", s.RootDN, err)
	}
	return conn
}

func add(t testing.TB, conn *goldap.Conn, dn string, attrs map[string][]string) {
	t.Helper()
	req := goldap.NewAddRequest(dn, nil)
	for k, v := range attrs {
		req.Attribute(k, v)
	}
	if err := conn.Add(req); err != nil {
		t.Fatalf("ldaptest: adding %s: %v", dn, err)
	}
}

func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("ldaptest: %s; CI=true, so this is a failure, not a skip", why)
	}
	t.Skipf("ldaptest: %s", why)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
