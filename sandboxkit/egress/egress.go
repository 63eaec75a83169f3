// Package egress is the way out of a sandbox that has no network: a
// host-side proxy that speaks HTTP CONNECT, plain HTTP (absolute-form
// requests) and SOCKS5 (names resolved by the proxy, as socks5h) on one
// UNIX socket, and connects only to the destinations of an allow-list.
//
// The sandbox keeps its own network namespace, with only loopback: it
// gets no host port. The proxy's socket is bound into the sandbox, and a
// bridge inside (Bridge, run by sandboxkit's supervisor) listens on
// 127.0.0.1:Port there and carries each connection to it. When the
// proxy is gone the sandbox has no way out at all.
//
// Each connection is checked on its own: the name must match the
// allow-list, the proxy resolves it itself and refuses it if any address
// is a loopback, private, link-local (cloud metadata), CGNAT, multicast,
// unspecified or reserved one, IPv4-mapped or embedded (NAT64, 6to4,
// Teredo) ones included, or an address of this host or of a network it
// is on (whatever its range); then it connects to the very address it
// checked, so a name that resolves differently a moment later (DNS
// rebinding) gains nothing. IP literals are refused unless listed. Every attempt, allowed
// or refused, is reported to Options.OnEvent.
package egress

import (
	"context"
	"errors"
	"net/netip"
	"time"
)

// Port is where Bridge listens inside a sandbox (127.0.0.1:Port): the
// sandbox's network namespace is its own, so any port would do.
const Port = 3128

// ErrProxyDown is the fail-closed error: the egress proxy could not
// start or stopped, so the sandbox it served has no way out at all.
var ErrProxyDown = errors.New("egress proxy down: the sandbox has no network access")

// Defaults of the caps, per proxy (one proxy serves one sandbox).
const (
	DefaultMaxConns        = 32
	DefaultMaxBytes        = 1 << 30
	DefaultMaxConnDuration = 10 * time.Minute
	DefaultDialTimeout     = 10 * time.Second
)

// maxRequestHead bounds the bytes of a request before its body.
const maxRequestHead = 64 << 10

// handshakeTimeout bounds the time a client takes to say where it goes.
const handshakeTimeout = 10 * time.Second

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Caps bound what one proxy relays. Zero fields take the defaults.
type Caps struct {
	// MaxConns caps the connections open at once (0: DefaultMaxConns).
	MaxConns int
	// MaxBytes caps the bytes relayed, both ways, over the proxy's life
	// (0: DefaultMaxBytes); once spent, open connections are cut and
	// new ones refused.
	MaxBytes int64
	// MaxConnDuration cuts a connection that lasts longer
	// (0: DefaultMaxConnDuration).
	MaxConnDuration time.Duration
	// DialTimeout bounds resolving and connecting (0: DefaultDialTimeout).
	DialTimeout time.Duration
}

// Options configure a Proxy. Only Allow is required.
type Options struct {
	// Allow lists the destinations (see ParseAllow). Empty allows none.
	Allow []string

	// Caps bound the proxy's connections and bytes.
	Caps Caps

	// Resolver resolves names; nil means net.DefaultResolver. Its
	// answers are checked like any others.
	Resolver Resolver

	// OnEvent, if set, is called once per attempt: when a connection is
	// refused, or when an allowed one ends. It is called from the
	// connection's goroutine, possibly concurrently: it must be safe for
	// that, and quick.
	OnEvent func(Event)
}

// Verdicts of an Event.
const (
	// Allowed: the connection was made (its event comes when it ends).
	Allowed = "allowed"
	// Refused: the destination is not allowed, or a cap was reached.
	Refused = "refused"
	// Failed: the destination is allowed but could not be resolved or
	// reached.
	Failed = "failed"
)

// Event is one connection attempt through the proxy.
type Event struct {
	Time time.Time
	// Proto is how the client asked: "connect" (HTTP CONNECT), "http"
	// (a plain HTTP request) or "socks5".
	Proto string
	// Host and Port are the destination as asked (a name or an IP
	// literal), quoted and escaped to ASCII if it has a byte that is not
	// printable ASCII; Host is empty when the request could not be read.
	Host string
	Port int
	// Addr is the address connected to (allowed attempts, and refused
	// ones that failed after resolution), else empty.
	Addr string
	// Verdict is Allowed, Refused or Failed; Reason says why it was
	// refused or failed, or how an allowed connection was cut (by a cap).
	Verdict string
	Reason  string
	// Sent and Received count the bytes relayed to and from the
	// destination.
	Sent, Received int64
	// Duration is how long the connection lasted (allowed) or the check
	// took (refused).
	Duration time.Duration
}
