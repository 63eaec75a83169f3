package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// rule is one parsed allow-list entry.
type rule struct {
	host     string     // lower-case name without the "*." prefix; "" for an IP literal
	wildcard bool       // "*.host": any name below host (not host itself)
	ip       netip.Addr // an IP literal entry
	port     int        // 0: any port
}

// ParseAllow checks an allow-list: each entry is a host name, "*." and a
// name (any name below it, not the name itself), or an IP literal
// (IPv6 in brackets when a port follows), each optionally followed by
// ":PORT". Names are compared without case and without a trailing dot.
func ParseAllow(entries []string) error {
	_, err := parseRules(entries)
	return err
}

func parseRules(entries []string) ([]rule, error) {
	rules := make([]rule, 0, len(entries))
	for _, e := range entries {
		r, err := parseRule(e)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseRule(entry string) (rule, error) {
	bad := func(why string) (rule, error) {
		return rule{}, fmt.Errorf("egress: allow-list entry %q: %s (want HOST, *.HOST or an IP literal, optionally :PORT)", entry, why)
	}
	s := strings.TrimSpace(entry)
	if s == "" {
		return bad("empty")
	}
	var r rule
	host := s
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return bad("unclosed [")
		}
		host = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return bad("junk after ]")
			}
			p, err := parsePort(rest[1:])
			if err != nil {
				return bad(err.Error())
			}
			r.port = p
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return bad("not an IPv6 address in brackets")
		}
		r.ip = a.Unmap()
		return r, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		// A bare IPv6 literal (colons, no port).
		r.ip = a.Unmap()
		return r, nil
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := parsePort(s[i+1:])
		if err != nil {
			return bad(err.Error())
		}
		r.port, host = p, s[:i]
	}
	if a, err := netip.ParseAddr(host); err == nil {
		r.ip = a.Unmap()
		return r, nil
	}
	if strings.HasPrefix(host, "*.") {
		r.wildcard, host = true, host[2:]
	}
	name, ok := normalName(host)
	if !ok {
		return bad("not a host name")
	}
	if r.wildcard && !strings.Contains(name, ".") {
		// "*.com" would open a whole top-level domain.
		return bad("a wildcard needs at least two labels after *.")
	}
	r.host = name
	return r, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %q is not 1-65535", s)
	}
	return p, nil
}

// normalName returns host in lower case without a trailing dot, if it
// is a DNS name of letters, digits, hyphens and underscores whose last
// label is not a number: "127.1", "2130706433" or "0x7f.1" are IPv4
// addresses to inet_aton, and so to the C library's resolver.
func normalName(host string) (string, bool) {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" || len(h) > 253 {
		return "", false
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") && strings.Trim(last[2:], "0123456789abcdef") == "" {
		return "", false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	return h, true
}

// matchName reports whether a rule allows name (normalized) on port.
func matchName(rules []rule, name string, port int) bool {
	for _, r := range rules {
		if r.host == "" || (r.port != 0 && r.port != port) {
			continue
		}
		if r.wildcard {
			if strings.HasSuffix(name, "."+r.host) {
				return true
			}
		} else if name == r.host {
			return true
		}
	}
	return false
}

// matchIP reports whether an IP literal rule lists a on port.
func matchIP(rules []rule, a netip.Addr, port int) bool {
	a = a.Unmap()
	for _, r := range rules {
		if r.ip.IsValid() && r.ip == a && (r.port == 0 || r.port == port) {
			return true
		}
	}
	return false
}

// Ranges no egress destination may be in, beyond what netip's
// predicates name (loopback, private, link-local, multicast,
// unspecified). The documentation and benchmarking ranges are not here:
// some networks route them (fake-IP resolvers, lab gateways), and they
// hold no host-local service.
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),     // "this network"
	netip.MustParsePrefix("100.64.0.0/10"), // CGNAT (RFC 6598)
	netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments
	netip.MustParsePrefix("240.0.0.0/4"),   // reserved, broadcast
	netip.MustParsePrefix("::/96"),         // IPv4-compatible (and ::, ::1)
	netip.MustParsePrefix("100::/64"),      // discard
	netip.MustParsePrefix("2001:db8::/32"), // documentation
	netip.MustParsePrefix("fec0::/10"),     // site-local
}

// Prefixes of IPv6 addresses that carry an IPv4 address: a NAT64,
// SIIT or 6to4 gateway, or the kernel's automatic tunnel for
// IPv4-compatible addresses, would take the connection there.
var embedsV4 = []struct {
	prefix netip.Prefix
	at     int // byte offset of the IPv4 address
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12},
	{netip.MustParsePrefix("64:ff9b:1::/48"), 12},  // in its /96 form only: localNAT64
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 12}, // IPv4-translated (SIIT, RFC 2765)
	{netip.MustParsePrefix("::/96"), 12},           // IPv4-compatible (RFC 4291 §2.5.5.1)
	{netip.MustParsePrefix("2002::/16"), 2},
}

// teredo is the Teredo prefix (RFC 4380): its addresses tunnel to the
// IPv4 address of a Teredo server (bytes 4 to 7) and of the client
// (bytes 12 to 15, inverted).
var teredo = netip.MustParsePrefix("2001::/32")

// localNAT64 is the local-use NAT64 prefix (RFC 8215): a network may
// embed the IPv4 address after a /48, /56 or /64 of it (RFC 6052) as
// well as after a /96, so an address of it outside the /96 form (bytes 6
// to 11 zero) cannot be judged.
var localNAT64 = netip.MustParsePrefix("64:ff9b:1::/48")

// EmbeddedIPv4 returns the IPv4 addresses a connection to a may reach
// besides a itself: the address an IPv4-mapped, IPv4-compatible
// (::a.b.c.d), NAT64 (64:ff9b::/96, the local-use 64:ff9b:1::/48), SIIT
// or 6to4 address carries, a Teredo address's server and client. A
// destination check judges each as well as a. ok is false for a
// local-use NAT64 address whose IPv4 address cannot be told (not in its
// /96 form): refuse it.
func EmbeddedIPv4(a netip.Addr) (v4 []netip.Addr, ok bool) {
	if a.Is4In6() {
		return []netip.Addr{a.Unmap()}, true
	}
	if !a.Is6() {
		return nil, true
	}
	b := a.As16()
	if localNAT64.Contains(a) && [6]byte(b[6:12]) != [6]byte{} {
		return nil, false
	}
	if teredo.Contains(a) {
		v4 = append(v4, netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}))
	}
	for _, e := range embedsV4 {
		if e.prefix.Contains(a) {
			v4 = append(v4, netip.AddrFrom4([4]byte(b[e.at:e.at+4])))
		}
	}
	return v4, true
}

// blockedReason says why a is never a destination (loopback, private
// network, link-local and cloud metadata, CGNAT, multicast,
// unspecified, reserved), or "" if it may be one. An IPv6 address that
// carries an IPv4 address (EmbeddedIPv4) is judged by that one too.
func blockedReason(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return "no address"
	case a.IsLoopback():
		return "a loopback address"
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsLinkLocalUnicast():
		return "a link-local address (cloud metadata services live there)"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "a multicast address"
	case a.IsPrivate():
		return "a private network address"
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return "a reserved address (" + p.String() + ")"
		}
	}
	v4s, ok := EmbeddedIPv4(a)
	if !ok {
		return "a local-use NAT64 address (" + localNAT64.String() + ") whose IPv4 address cannot be told"
	}
	for _, v4 := range v4s {
		if why := blockedReason(v4); why != "" {
			return why + " (embedded in " + a.String() + ")"
		}
	}
	return ""
}
