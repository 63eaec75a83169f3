package api

import (
	"net"
	"net/netip"
	"testing"
)

func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::/32")}
	for _, tc := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer, header ignored", "203.0.113.9", []string{"198.51.100.1"}, "203.0.113.9"},
		{"no proxies configured", "10.1.1.1", []string{"198.51.100.1"}, "10.1.1.1"},
		{"trusted peer, no header", "192.0.2.1", nil, "192.0.2.1"},
		{"trusted peer, one hop", "192.0.2.1", []string{"198.51.100.1"}, "198.51.100.1"},
		{"client-supplied entries on the left", "192.0.2.1", []string{"1.1.1.1, 2.2.2.2, 198.51.100.1"}, "198.51.100.1"},
		{"chain of trusted proxies", "192.0.2.1", []string{"198.51.100.1, 10.2.3.4, 10.9.9.9"}, "198.51.100.1"},
		{"several header lines", "192.0.2.1", []string{"1.1.1.1", "198.51.100.1, 10.2.3.4"}, "198.51.100.1"},
		{"hop split over lines", "192.0.2.1", []string{"198.51.100.1", "10.2.3.4"}, "198.51.100.1"},
		{"all trusted", "192.0.2.1", []string{"10.2.3.4, 10.5.6.7"}, "10.2.3.4"},
		{"garbage behind a trusted hop", "192.0.2.1", []string{"198.51.100.1, nonsense, 10.2.3.4"}, "10.2.3.4"},
		{"garbage right of the proxy", "192.0.2.1", []string{"unknown"}, "192.0.2.1"},
		{"with a port", "192.0.2.1", []string{"198.51.100.1:4711"}, "198.51.100.1"},
		{"IPv6", "192.0.2.1", []string{"2001:db9::5, 2001:db8::1"}, "2001:db9::5"},
		{"IPv4-mapped peer", "::ffff:192.0.2.1", []string{"198.51.100.1"}, "198.51.100.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var xff [][]byte
			for _, h := range tc.xff {
				xff = append(xff, []byte(h))
			}
			tr := trusted
			if tc.name == "no proxies configured" {
				tr = nil
			}
			if got := clientAddr(net.ParseIP(tc.peer), xff, tr); got != tc.want {
				t.Errorf("clientAddr(%s, %q) = %s, want %s", tc.peer, tc.xff, got, tc.want)
			}
		})
	}
}
