package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
)

func TestSandboxEgress(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := egress.Caps{MaxConns: egress.DefaultMaxConns, MaxBytes: egress.DefaultMaxBytes,
		MaxConnDuration: egress.DefaultMaxConnDuration, DialTimeout: egress.DefaultDialTimeout}
	if got := c.Sandbox.Egress.Caps(); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults: %+v, want egress's %+v", got, want)
	}
	c, err = Parse([]byte("sandbox:\n  egress:\n    max_connections: 4\n    max_bytes: 256MiB\n    max_connection_duration: 90s\n    dial_timeout: 2s\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = egress.Caps{MaxConns: 4, MaxBytes: 256 << 20, MaxConnDuration: 90 * time.Second, DialTimeout: 2 * time.Second}
	if got := c.Sandbox.Egress.Caps(); !reflect.DeepEqual(got, want) {
		t.Errorf("parsed %+v, want %+v", got, want)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"max_connections: 0", "sandbox.egress.max_connections must be 1 to 1024"},
		{"max_connections: 5000", "sandbox.egress.max_connections"},
		{"max_bytes: 0", "sandbox.egress.max_bytes must be positive"},
		{"max_bytes: lots", `"lots" is not a size`},
		{"max_connection_duration: 0s", "sandbox.egress.max_connection_duration"},
		{"dial_timeout: 1h", "sandbox.egress.dial_timeout"},
		{"handshakes: 3", "field handshakes not found"},
	} {
		_, err := Parse([]byte("sandbox:\n  egress:\n    " + bad.yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.yaml, err, bad.want)
		}
	}
}

// TestSandboxSettings: sandbox.* reaches the settings every sandbox
// shares whole.
func TestSandboxSettings(t *testing.T) {
	c, err := Parse([]byte("sandbox:\n  bwrap: /opt/bwrap\n  seccomp: enforce\n  limits:\n    processes: 77\n  egress:\n    max_connections: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sandbox.Settings()
	if s.Bwrap != "/opt/bwrap" || s.Seccomp != "enforce" || s.Limits == nil || *s.Limits != c.Sandbox.SandboxLimits() || s.Limits.Pids != 77 || s.EgressCaps != c.Sandbox.Egress.Caps() || s.EgressCaps.MaxConns != 4 {
		t.Errorf("Settings() = %+v", s)
	}
}
