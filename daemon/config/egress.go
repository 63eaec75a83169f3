package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// Egress is sandbox.egress: the caps of each egress proxy (one per
// sandbox with an allow-list: an external agent's call, a setup script,
// an MCP server). Defaults are sandboxkit/egress's.
type Egress struct {
	// MaxConnections caps the connections open at once (default 32;
	// twice as many may wait to say where they go).
	MaxConnections int `yaml:"max_connections"`
	// MaxBytes caps the bytes relayed, both ways, over the proxy's life
	// (default 1GiB); once spent, connections are cut and refused.
	MaxBytes Size `yaml:"max_bytes"`
	// MaxConnectionDuration cuts a connection that lasts longer
	// (default 10m).
	MaxConnectionDuration Duration `yaml:"max_connection_duration"`
	// DialTimeout bounds resolving and connecting to a destination
	// (default 10s).
	DialTimeout Duration `yaml:"dial_timeout"`
}

// maxEgressConnections bounds sandbox.egress.max_connections: each
// connection holds two descriptors of the server's (and its relay).
const maxEgressConnections = 1024

// DefaultEgress are sandboxkit/egress's defaults.
func DefaultEgress() Egress {
	return Egress{MaxConnections: egress.DefaultMaxConns, MaxBytes: egress.DefaultMaxBytes,
		MaxConnectionDuration: Duration(egress.DefaultMaxConnDuration), DialTimeout: Duration(egress.DefaultDialTimeout)}
}

// Caps returns the caps of every egress proxy.
func (e Egress) Caps() egress.Caps {
	return egress.Caps{MaxConns: e.MaxConnections, MaxBytes: int64(e.MaxBytes),
		MaxConnDuration: time.Duration(e.MaxConnectionDuration), DialTimeout: time.Duration(e.DialTimeout)}
}

func (e Egress) validate() []error {
	var errs []error
	if e.MaxConnections < 1 || e.MaxConnections > maxEgressConnections {
		errs = append(errs, fmt.Errorf("sandbox.egress.max_connections must be 1 to %d (default %d)", maxEgressConnections, egress.DefaultMaxConns))
	}
	if e.MaxBytes < 1 {
		errs = append(errs, errors.New("sandbox.egress.max_bytes must be positive, e.g. 256MiB (default 1GiB)"))
	}
	if e.MaxConnectionDuration < Duration(time.Second) {
		errs = append(errs, errors.New("sandbox.egress.max_connection_duration must be at least 1s (default 10m)"))
	}
	if e.DialTimeout < Duration(100*time.Millisecond) || e.DialTimeout > Duration(5*time.Minute) {
		errs = append(errs, errors.New("sandbox.egress.dial_timeout must be 100ms to 5m (default 10s)"))
	}
	return errs
}
