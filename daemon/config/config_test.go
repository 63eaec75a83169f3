package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTrustedProxies(t *testing.T) {
	c, err := Parse([]byte("trusted_proxies: [10.0.0.0/8, 192.0.2.7, \"::ffff:198.51.100.1\", \"2001:db8::/32\", 172.16.5.9/12]\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Proxies()
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("198.51.100.1/32"),
		netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("172.16.0.0/12"),
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Proxies = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"proxy.example.org", "10.0.0.0/33", "10.0.0.1:8080", ""} {
		_, err := Parse([]byte("trusted_proxies: [\"" + bad + "\"]\n"))
		if err == nil || !strings.Contains(err.Error(), "trusted_proxies[0]") {
			t.Errorf("trusted_proxies [%q]: %v, want an error naming trusted_proxies[0]", bad, err)
		}
	}
	if c, err := Parse(nil); err != nil || len(c.TrustedProxies) != 0 {
		t.Fatalf("default: %v %v, want no trusted proxies", c.TrustedProxies, err)
	}
}

func TestMaxBodyBytes(t *testing.T) {
	if c, err := Parse(nil); err != nil || c.Server.MaxBodyBytes != 32<<20 {
		t.Fatalf("default: %d, %v; want 32 MiB", c.Server.MaxBodyBytes, err)
	}
	if c, err := Parse([]byte("server:\n  max_body_bytes: 256MiB\n")); err != nil || c.Server.MaxBodyBytes != 256<<20 {
		t.Errorf("256MiB: %d, %v", c.Server.MaxBodyBytes, err)
	}
	for _, bad := range []string{"0", "64KiB"} {
		if _, err := Parse([]byte("server:\n  max_body_bytes: " + bad + "\n")); err == nil || !strings.Contains(err.Error(), "max_body_bytes") {
			t.Errorf("max_body_bytes %s: %v, want an error naming it", bad, err)
		}
	}
}

func TestSnapshotHistory(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want int
	}{
		{"", 50},
		{"repositories:\n  snapshot_history: 0\n", 0},
		{"repositories:\n  snapshot_history: 1000\n", 1000},
	} {
		if c, err := Parse([]byte(tc.yaml)); err != nil || c.Repositories.SnapshotHistory != tc.want {
			t.Errorf("%q: snapshot_history %d, %v; want %d", tc.yaml, c.Repositories.SnapshotHistory, err, tc.want)
		}
	}
	for _, bad := range []string{"-1", "2000000"} {
		if _, err := Parse([]byte("repositories:\n  snapshot_history: " + bad + "\n")); err == nil || !strings.Contains(err.Error(), "snapshot_history") {
			t.Errorf("snapshot_history %s: %v, want a refusal naming it", bad, err)
		}
	}
}

func TestCommandTimeoutsAndKeptOutput(t *testing.T) {
	c, err := Parse([]byte("sandbox:\n  command_timeout: 2m\n  max_command_timeout: 1h\n  output_keep: 1MiB\n  output_keep_total: 8MiB\n"))
	if err != nil || c.Sandbox.CommandTimeout.Std() != 2*time.Minute || c.Sandbox.MaxCommandTimeout.Std() != time.Hour || c.Sandbox.OutputKeep != 1<<20 || c.Sandbox.OutputKeepTotal != 8<<20 {
		t.Fatalf("%+v, %v", c.Sandbox, err)
	}
	for _, bad := range []string{
		"command_timeout: 0s", "command_timeout: 1h", // above the default maximum
		"output_keep: 0", "output_keep: 1GiB", // above the default total
		"output_keeps: 1MiB",
	} {
		if _, err := Parse([]byte("sandbox:\n  " + bad + "\n")); err == nil || !strings.Contains(err.Error(), strings.Split(bad, ":")[0]) {
			t.Errorf("%s: %v, want an error naming it", bad, err)
		}
	}
}
