// Package ldap checks a user name and password against an LDAP directory
// by binding as the user (go-ldap underneath). It never reads or compares
// password attributes itself: the directory decides.
//
// Two ways to find the user's entry:
//
//   - direct bind: BindDN is a template such as
//     "uid={username},ou=people,dc=example,dc=org"; the name is escaped as a
//     DN value (RFC 4514) before it is put in.
//   - search then bind: SearchFilter, e.g. "(uid={username})", is run under
//     SearchBaseDN (as ServiceDN, or anonymously), the name escaped as a
//     filter value (RFC 4515) so "*" or ")(uid=*" match nothing; exactly one
//     entry must match, and its DN is bound with the password.
//
// An empty password is refused before any request is sent: to an LDAP
// server a simple bind with a DN and no password is an "unauthenticated
// bind", which many servers answer with success.
//
//	e, err := ldap.Authenticate(ctx, cfg, "alice", password)
//	if errors.Is(err, ldap.ErrInvalidCredentials) { /* 401 */ }
package ldap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	goldap "github.com/go-ldap/ldap/v3"
)

// Placeholder is replaced by the escaped user name in BindDN and
// SearchFilter.
const Placeholder = "{username}"

// DefaultTimeout bounds one Authenticate call when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

var (
	// ErrInvalidCredentials means the directory did not accept the name
	// and password: a wrong password, an unknown user, a name that matched
	// several entries, or an empty password. The cases are told apart
	// only in the wrapped message, for logs; a client must see one answer.
	ErrInvalidCredentials = errors.New("ldap: invalid credentials")
	// ErrConfig is wrapped by every configuration error; the message names
	// the key under auth.ldap in config.yaml.
	ErrConfig = errors.New("ldap: bad configuration")
	// ErrUnavailable means the directory could not be asked: no
	// connection, a network failure or no answer in time. The login is
	// neither right nor wrong; try again later.
	ErrUnavailable = errors.New("ldap: directory unavailable")
)

// Config says where the directory is and how a user's entry is found. It
// is the auth.ldap section of the server's config.yaml; the yaml keys are
// the ones errors from Validate name.
type Config struct {
	// URL is ldap://host[:port] or ldaps://host[:port].
	URL string `yaml:"url"`
	// BindDN is the DN template for direct bind; it must contain
	// {username}. Set either BindDN or SearchBaseDN and SearchFilter.
	BindDN string `yaml:"bind_dn"`
	// SearchBaseDN is where SearchFilter looks (whole subtree).
	SearchBaseDN string `yaml:"search_base_dn"`
	// SearchFilter must contain {username} and match exactly one entry.
	SearchFilter string `yaml:"search_filter"`
	// ServiceDN and ServicePassword are the account the search runs as;
	// both empty means an anonymous search.
	ServiceDN       string `yaml:"service_dn"`
	ServicePassword string `yaml:"service_password"`
	// StartTLS upgrades an ldap:// connection before anything is sent;
	// if the server cannot, Authenticate fails rather than go on in the
	// clear.
	StartTLS bool `yaml:"start_tls"`
	// CACertFile is a PEM file of the CAs trusted for the server's
	// certificate instead of the system's.
	CACertFile string `yaml:"ca_cert_file"`
	// InsecureSkipVerify accepts any certificate: the password is then
	// encrypted but may go to whoever sits in between. For tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// ServerName is the name the certificate must carry; default: the
	// URL's host.
	ServerName string `yaml:"server_name"`
	// Timeout bounds one Authenticate call, connecting included.
	// Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// NameAttribute and MailAttribute are read into Entry.Name and
	// Entry.Email. Defaults "cn" and "mail".
	NameAttribute string `yaml:"name_attribute"`
	MailAttribute string `yaml:"mail_attribute"`
	// GroupAttribute, if set, is an attribute of the user's entry that
	// names their groups (memberOf, with slapd's memberof overlay or
	// Active Directory): a value that is a DN gives its first RDN's
	// value (cn=devs,ou=groups,… is "devs"), any other value itself.
	GroupAttribute string `yaml:"group_attribute"`
	// GroupSearchBaseDN and GroupSearchFilter instead (or as well) find
	// the user's groups by a search under the base (whole subtree), e.g.
	// "(&(objectClass=groupOfNames)(member={dn}))"; the filter may
	// contain {dn} (the user's DN) and {username}, both escaped as filter
	// values. It runs as ServiceDN if set, else as the user.
	// GroupNameAttribute is the found groups' name (default "cn").
	GroupSearchBaseDN  string `yaml:"group_search_base_dn"`
	GroupSearchFilter  string `yaml:"group_search_filter"`
	GroupNameAttribute string `yaml:"group_name_attribute"`
}

// DNPlaceholder is replaced by the user's escaped DN in
// GroupSearchFilter.
const DNPlaceholder = "{dn}"

// MaxGroups bounds the groups one sign-in reads; a user in more is
// refused (ErrTooManyGroups) rather than given a partial set.
const MaxGroups = 1000

// ErrTooManyGroups: the directory names more than MaxGroups groups for
// the user.
var ErrTooManyGroups = errors.New("ldap: the user is in too many groups")

// Entry is the directory's view of an authenticated user.
type Entry struct {
	DN       string
	Username string // as given to Authenticate
	Name     string // NameAttribute's first value, or ""
	Email    string // MailAttribute's first value, or ""
	// Groups are the user's groups (GroupAttribute, the group search),
	// deduplicated; nil when neither is configured.
	Groups []string
}

// Validate reports the first configuration error, naming its key.
func (c Config) Validate() error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("%w: auth.ldap.%s %s", ErrConfig, key, fmt.Sprintf(format, args...))
	}
	if c.URL == "" {
		return bad("url", "is not set")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return bad("url", "is not a URL: %v", err)
	}
	if u.Scheme != "ldap" && u.Scheme != "ldaps" {
		return bad("url", "must start with ldap:// or ldaps://, not %q", u.Scheme+"://")
	}
	if u.Host == "" {
		return bad("url", "names no host")
	}
	if u.Scheme == "ldaps" && c.StartTLS {
		return bad("start_tls", "cannot be used with ldaps:// (the connection is TLS already)")
	}
	search := c.SearchBaseDN != "" || c.SearchFilter != ""
	switch {
	case c.BindDN != "" && search:
		return bad("bind_dn", "is set together with search_base_dn/search_filter; use one way to find the user")
	case c.BindDN != "":
		if !strings.Contains(c.BindDN, Placeholder) {
			return bad("bind_dn", "must contain %s", Placeholder)
		}
		if _, err := goldap.ParseDN(strings.ReplaceAll(c.BindDN, Placeholder, "x")); err != nil {
			return bad("bind_dn", "is not a DN: %v", err)
		}
	case search:
		if c.SearchBaseDN == "" {
			return bad("search_base_dn", "is not set (search_filter needs it)")
		}
		if c.SearchFilter == "" {
			return bad("search_filter", "is not set (search_base_dn needs it)")
		}
		if !strings.Contains(c.SearchFilter, Placeholder) {
			return bad("search_filter", "must contain %s", Placeholder)
		}
		if _, err := goldap.CompileFilter(strings.ReplaceAll(c.SearchFilter, Placeholder, "x")); err != nil {
			return bad("search_filter", "is not an LDAP filter: %v", err)
		}
	default:
		return bad("bind_dn", "is not set (nor search_base_dn and search_filter)")
	}
	if c.ServiceDN != "" && c.ServicePassword == "" {
		// Would be an unauthenticated bind: "success" with anonymous rights.
		return bad("service_password", "is empty while service_dn is set")
	}
	if c.ServiceDN == "" && c.ServicePassword != "" {
		return bad("service_dn", "is empty while service_password is set")
	}
	if c.Timeout < 0 {
		return bad("timeout", "is negative (%v)", c.Timeout)
	}
	switch {
	case c.GroupSearchBaseDN != "" && c.GroupSearchFilter == "":
		return bad("group_search_filter", "is not set (group_search_base_dn needs it)")
	case c.GroupSearchBaseDN == "" && c.GroupSearchFilter != "":
		return bad("group_search_base_dn", "is not set (group_search_filter needs it)")
	case c.GroupSearchFilter != "":
		f := strings.ReplaceAll(strings.ReplaceAll(c.GroupSearchFilter, Placeholder, "x"), DNPlaceholder, "x")
		if _, err := goldap.CompileFilter(f); err != nil {
			return bad("group_search_filter", "is not an LDAP filter: %v", err)
		}
	}
	if c.CACertFile != "" {
		if _, err := loadCAs(c.CACertFile); err != nil {
			return bad("ca_cert_file", "%v", err)
		}
	}
	return nil
}

// Authenticate binds as username with password and returns the user's
// entry. Wrong passwords, unknown users and ambiguous names wrap
// ErrInvalidCredentials; any other error (configuration, network, TLS,
// the service account's bind) says which step failed and does not.
func Authenticate(ctx context.Context, c Config, username, password string) (Entry, error) {
	if err := c.Validate(); err != nil {
		return Entry{}, err
	}
	if username == "" {
		return Entry{}, fmt.Errorf("%w: empty user name", ErrInvalidCredentials)
	}
	if password == "" {
		return Entry{}, fmt.Errorf("%w: empty password (an unauthenticated bind) refused", ErrInvalidCredentials)
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	conn, err := dial(ctx, c)
	if err != nil {
		return Entry{}, err
	}
	defer conn.Close()
	// go-ldap's requests take no context: closing the connection is what
	// ends a request in flight when ctx is done.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if d, ok := ctx.Deadline(); ok {
		conn.SetTimeout(time.Until(d))
	}

	nameAttr, mailAttr := c.NameAttribute, c.MailAttribute
	if nameAttr == "" {
		nameAttr = "cn"
	}
	if mailAttr == "" {
		mailAttr = "mail"
	}
	attrs := []string{nameAttr, mailAttr}
	if c.GroupAttribute != "" {
		attrs = append(attrs, c.GroupAttribute)
	}
	var e *goldap.Entry
	if c.BindDN != "" {
		dn := strings.ReplaceAll(c.BindDN, Placeholder, goldap.EscapeDN(username))
		if err := bind(ctx, conn, dn, password); err != nil {
			return Entry{}, err
		}
		// The bind proved the password; reading the entry only fills in
		// the name and address, so a directory that hides them from the
		// user is not an error.
		res, err := conn.Search(goldap.NewSearchRequest(dn, goldap.ScopeBaseObject, goldap.NeverDerefAliases,
			1, 0, false, "(objectClass=*)", attrs, nil))
		switch {
		case err == nil && len(res.Entries) == 1:
			e = res.Entries[0]
		case err == nil,
			goldap.IsErrorWithCode(err, goldap.LDAPResultNoSuchObject),
			goldap.IsErrorWithCode(err, goldap.LDAPResultInsufficientAccessRights):
			e = &goldap.Entry{DN: dn}
		default:
			return Entry{}, fmt.Errorf("ldap: reading %s after its bind: %w", dn, ctxErr(ctx, err))
		}
	} else {
		if c.ServiceDN != "" {
			if err := conn.Bind(c.ServiceDN, c.ServicePassword); err != nil {
				return Entry{}, fmt.Errorf("ldap: binding as the service account %s (auth.ldap.service_dn): %w", c.ServiceDN, ctxErr(ctx, err))
			}
		}
		filter := strings.ReplaceAll(c.SearchFilter, Placeholder, goldap.EscapeFilter(username))
		// Size limit 2: enough to tell "one" from "several".
		res, err := conn.Search(goldap.NewSearchRequest(c.SearchBaseDN, goldap.ScopeWholeSubtree, goldap.NeverDerefAliases,
			2, 0, false, filter, attrs, nil))
		switch {
		case goldap.IsErrorWithCode(err, goldap.LDAPResultSizeLimitExceeded) || (err == nil && len(res.Entries) > 1):
			return Entry{}, fmt.Errorf("%w: several entries match %s under %s", ErrInvalidCredentials, filter, c.SearchBaseDN)
		case goldap.IsErrorWithCode(err, goldap.LDAPResultNoSuchObject):
			return Entry{}, fmt.Errorf("ldap: searching: the base %s (auth.ldap.search_base_dn) does not exist", c.SearchBaseDN)
		case err != nil:
			return Entry{}, fmt.Errorf("ldap: searching %s under %s: %w", filter, c.SearchBaseDN, ctxErr(ctx, err))
		case len(res.Entries) == 0:
			return Entry{}, fmt.Errorf("%w: no entry matches %s under %s", ErrInvalidCredentials, filter, c.SearchBaseDN)
		}
		e = res.Entries[0]
		if err := bind(ctx, conn, e.DN, password); err != nil {
			return Entry{}, err
		}
	}
	out := Entry{
		DN:       e.DN,
		Username: username,
		Name:     e.GetAttributeValue(nameAttr),
		Email:    e.GetAttributeValue(mailAttr),
	}
	if c.GroupAttribute != "" || c.GroupSearchFilter != "" {
		gs, err := groups(ctx, c, conn, e, username)
		if err != nil {
			return Entry{}, err
		}
		out.Groups = gs
	}
	return out, nil
}

// groups reads the user's groups from e's GroupAttribute and the group
// search, on conn (bound as the user).
func groups(ctx context.Context, c Config, conn *goldap.Conn, e *goldap.Entry, username string) ([]string, error) {
	seen := map[string]bool{}
	out := []string{}
	addName := func(n string) error {
		if n == "" || seen[n] {
			return nil
		}
		if len(out) == MaxGroups {
			return fmt.Errorf("%w: more than %d", ErrTooManyGroups, MaxGroups)
		}
		seen[n] = true
		out = append(out, n)
		return nil
	}
	if c.GroupAttribute != "" {
		for _, v := range e.GetAttributeValues(c.GroupAttribute) {
			if err := addName(rdnValue(v)); err != nil {
				return nil, err
			}
		}
	}
	if c.GroupSearchFilter == "" {
		return out, nil
	}
	if c.ServiceDN != "" {
		if err := conn.Bind(c.ServiceDN, c.ServicePassword); err != nil {
			return nil, fmt.Errorf("ldap: binding as the service account %s for the group search: %w", c.ServiceDN, ctxErr(ctx, err))
		}
	}
	nameAttr := c.GroupNameAttribute
	if nameAttr == "" {
		nameAttr = "cn"
	}
	filter := strings.ReplaceAll(c.GroupSearchFilter, DNPlaceholder, goldap.EscapeFilter(e.DN))
	filter = strings.ReplaceAll(filter, Placeholder, goldap.EscapeFilter(username))
	res, err := conn.Search(goldap.NewSearchRequest(c.GroupSearchBaseDN, goldap.ScopeWholeSubtree, goldap.NeverDerefAliases,
		MaxGroups+1, 0, false, filter, []string{nameAttr}, nil))
	switch {
	case goldap.IsErrorWithCode(err, goldap.LDAPResultSizeLimitExceeded):
		return nil, fmt.Errorf("%w: the group search %s matches more than %d", ErrTooManyGroups, filter, MaxGroups)
	case goldap.IsErrorWithCode(err, goldap.LDAPResultNoSuchObject):
		return nil, fmt.Errorf("ldap: the group search's base %s (auth.ldap.group_search_base_dn) does not exist", c.GroupSearchBaseDN)
	case err != nil:
		return nil, fmt.Errorf("ldap: searching groups %s under %s: %w", filter, c.GroupSearchBaseDN, ctxErr(ctx, err))
	}
	for _, g := range res.Entries {
		if err := addName(g.GetAttributeValue(nameAttr)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rdnValue is the value of a DN's first attribute (cn=devs,ou=groups →
// devs), or v itself if it is not a DN.
func rdnValue(v string) string {
	dn, err := goldap.ParseDN(v)
	if err != nil || len(dn.RDNs) == 0 || len(dn.RDNs[0].Attributes) == 0 {
		return v
	}
	return dn.RDNs[0].Attributes[0].Value
}

// bind binds as dn, telling a refused password from a failed request.
func bind(ctx context.Context, conn *goldap.Conn, dn, password string) error {
	err := conn.Bind(dn, password)
	switch {
	case err == nil:
		return nil
	case goldap.IsErrorWithCode(err, goldap.LDAPResultInvalidCredentials),
		goldap.IsErrorWithCode(err, goldap.LDAPResultInvalidDNSyntax):
		return fmt.Errorf("%w: bind as %s refused", ErrInvalidCredentials, dn)
	default:
		return fmt.Errorf("ldap: binding as %s: %w", dn, ctxErr(ctx, err))
	}
}

// dial connects and, if configured, upgrades with StartTLS.
func dial(ctx context.Context, c Config) (*goldap.Conn, error) {
	u, _ := url.Parse(c.URL) // Validate parsed it
	tc := &tls.Config{
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.InsecureSkipVerify,
		MinVersion:         tls.VersionTLS12,
	}
	if tc.ServerName == "" {
		tc.ServerName = u.Hostname()
	}
	if c.CACertFile != "" {
		pool, err := loadCAs(c.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("ldap: auth.ldap.ca_cert_file: %w", err)
		}
		tc.RootCAs = pool
	}
	d := &net.Dialer{}
	if dl, ok := ctx.Deadline(); ok {
		d.Deadline = dl
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ldap: connecting to %s: %w", c.URL, ctxErr(ctx, err))
	}
	conn, err := goldap.DialURL(c.URL, goldap.DialWithDialer(d), goldap.DialWithTLSConfig(tc))
	if err != nil {
		return nil, fmt.Errorf("ldap: connecting to %s: %w", c.URL, ctxErr(ctx, err))
	}
	if c.StartTLS {
		if err := conn.StartTLS(tc); err != nil {
			conn.Close()
			return nil, fmt.Errorf("ldap: StartTLS with %s (auth.ldap.start_tls) failed, refusing to continue unencrypted: %w", c.URL, ctxErr(ctx, err))
		}
	}
	return conn, nil
}

func loadCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// ctxErr prefers the context's error: when ctx ends, go-ldap reports only
// a closed connection, which hides why it closed. That, and a network
// failure, wrap ErrUnavailable.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w: %w (%v)", ErrUnavailable, cerr, err)
	}
	if goldap.IsErrorWithCode(err, goldap.ErrorNetwork) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}
