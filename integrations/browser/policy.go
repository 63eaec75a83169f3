package browser

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// ErrRefused is wrapped by the error of a request the Policy refuses.
var ErrRefused = errors.New("browser: destination refused")

// Policy decides which addresses pages may reach. It is checked on the
// address a connection is about to be made to, after DNS resolution.
//
// Always refused: link-local addresses (169.254.0.0/16, fe80::/10, which
// hold the cloud metadata services), the other known metadata addresses
// (100.100.100.200, 168.63.129.16, fd00:ec2::254), addresses that are
// not unicast (0.0.0.0/8, ::, multicast, broadcast), and ServerPorts on
// any address: the server's own API is reached on it through any
// address of this host, and through a public address that the network
// routes back here (a cloud's 1:1 NAT), which no interface shows.
// Refused unless AllowPrivate: loopback, the addresses of this host's
// interfaces (read at each check: its services listening on all
// interfaces answer there as on loopback), private (RFC 1918,
// fc00::/7), shared (100.64.0.0/10) and benchmarking (198.18.0.0/15)
// ranges. An IPv6 address that carries an IPv4 address (IPv4-mapped or
// -compatible, NAT64, 6to4, Teredo: egress.EmbeddedIPv4) is judged by
// that address too.
type Policy struct {
	AllowPrivate bool
	// ServerPorts are the ports the server itself listens on; read at
	// each check (the port is known only once the server listens).
	ServerPorts func() []uint16
}

var (
	metadata = []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("100.100.100.200/32"),
		netip.MustParsePrefix("168.63.129.16/32"),
		netip.MustParsePrefix("fd00:ec2::254/128"),
	}
	notUnicast = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("255.255.255.255/32"),
		netip.MustParsePrefix("240.0.0.0/4"),
	}
	private = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("198.18.0.0/15"),
		netip.MustParsePrefix("fc00::/7"),
	}
)

func inAny(ip netip.Addr, ps []netip.Prefix) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// Check reports whether a connection to ip:port is allowed; the error
// wraps ErrRefused and says why.
func (p Policy) Check(ap netip.AddrPort) error {
	if p.ServerPorts != nil && slices.Contains(p.ServerPorts(), ap.Port()) {
		return fmt.Errorf("%w: %s is the server's own port", ErrRefused, ap)
	}
	return p.checkAddr(ap.Addr().Unmap().WithZone(""), true)
}

// checkAddr judges ip and, once (outer), the IPv4 addresses it carries.
func (p Policy) checkAddr(ip netip.Addr, outer bool) error {
	switch {
	case inAny(ip, metadata):
		return fmt.Errorf("%w: %s is a link-local or cloud metadata address", ErrRefused, ip)
	case !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() || inAny(ip, notUnicast):
		return fmt.Errorf("%w: %s is not a unicast address", ErrRefused, ip)
	case ip.IsLoopback() || inAny(ip, private):
		if !p.AllowPrivate {
			return fmt.Errorf("%w: %s is a loopback or private address (webretrieve.allow_private is off)", ErrRefused, ip)
		}
	}
	if !p.AllowPrivate {
		own, err := egress.HostNetworks()
		if err != nil {
			return fmt.Errorf("%w: this host's addresses cannot be listed (to refuse them): %v", ErrRefused, err)
		}
		if slices.ContainsFunc(own, func(n netip.Prefix) bool { return n.Addr() == ip }) {
			return fmt.Errorf("%w: %s is an address of this host, as good as loopback (webretrieve.allow_private is off)", ErrRefused, ip)
		}
	}
	if !outer {
		return nil
	}
	v4s, ok := egress.EmbeddedIPv4(ip)
	if !ok {
		return fmt.Errorf("%w: %s carries an IPv4 address that cannot be told", ErrRefused, ip)
	}
	for _, v4 := range v4s {
		if err := p.checkAddr(v4, false); err != nil {
			return fmt.Errorf("%w (in %s)", err, ip)
		}
	}
	return nil
}

// dialer connects only where the policy allows: the check runs on the
// resolved address of each connection attempt.
func (p Policy) dialer() *net.Dialer {
	return &net.Dialer{
		Timeout: 10 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", ErrRefused, address, err)
			}
			return p.Check(ap)
		},
	}
}

// checkLiteral refuses a URL whose host is an address the policy refuses,
// before any connection (the dialer would too; this gives the reason
// without a DNS lookup).
func (p Policy) checkLiteral(host, port string) error {
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	n, _ := strconv.ParseUint(port, 10, 16)
	return p.Check(netip.AddrPortFrom(ip, uint16(n)))
}

// refusal is the policy's own words in a request's error, without the
// layers of the HTTP client around them; "" when the policy did not
// refuse.
func refusal(err error) string {
	if !errors.Is(err, ErrRefused) {
		return ""
	}
	var op *net.OpError
	if errors.As(err, &op) && errors.Is(op.Err, ErrRefused) {
		return op.Err.Error()
	}
	return err.Error()
}
