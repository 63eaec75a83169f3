package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseAllow(t *testing.T) {
	for _, tc := range []struct {
		entry string
		ok    bool
	}{
		{"example.com", true},
		{"Example.COM.", true},
		{"*.example.com", true},
		{"*.example.com:443", true},
		{"registry.npmjs.org:443", true},
		{"93.184.216.34", true},
		{"93.184.216.34:8080", true},
		{"2001:4860::1", true},
		{"[2001:4860::1]:443", true},
		{"", false},
		{"*.com", false},
		{"*", false},
		{"exa mple.com", false},
		{"example.com:0", false},
		{"example.com:70000", false},
		{"example.com:http", false},
		{"[example.com]:443", false},
		{"-bad.example", false},
		{"ex*.example.com", false},
		{"http://example.com", false},
		{"1password.com", true},
		{"*.3com.example", true},
		// IPv4 addresses in the forms inet_aton takes (a resolver
		// may read them so) are no names: a top-level label is never
		// all digits.
		{"*.8.8", false},
		{"127.1", false},
		{"2130706433", false},
		{"0x7f.1", false},
		{"0177.0.0.1", false},
		{"*.0.0.1", false},
	} {
		err := ParseAllow([]string{tc.entry})
		if (err == nil) != tc.ok {
			t.Errorf("ParseAllow(%q) = %v, want ok=%v", tc.entry, err, tc.ok)
		}
	}
	// Nor does a client's destination pass for a name in those forms (the
	// trailing dot keeps "8.8.8.8." from being read as the literal).
	for _, host := range []string{"8.8.8.8.", "127.1", "2130706433", "0x7f.0.0.1", "0x7f000001"} {
		if name, ok := normalName(host); ok {
			t.Errorf("normalName(%q) = %q, a name", host, name)
		}
	}
}

func TestMatch(t *testing.T) {
	rules, err := parseRules([]string{"allowed.test", "*.wild.test:443", "203.0.114.7:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		port int
		want bool
	}{
		{"allowed.test", 443, true},
		{"allowed.test", 80, true},
		{"sub.allowed.test", 443, false},
		{"a.wild.test", 443, true},
		{"a.b.wild.test", 443, true},
		{"wild.test", 443, false},
		{"a.wild.test", 80, false},
		{"evilwild.test", 443, false},
		{"other.test", 443, false},
	} {
		if got := matchName(rules, tc.name, tc.port); got != tc.want {
			t.Errorf("matchName(%s, %d) = %v, want %v", tc.name, tc.port, got, tc.want)
		}
	}
	if !matchIP(rules, netip.MustParseAddr("203.0.114.7"), 8443) || matchIP(rules, netip.MustParseAddr("203.0.114.7"), 443) {
		t.Error("IP literal rule with port matched wrongly")
	}
	if !matchIP(rules, netip.MustParseAddr("::ffff:203.0.114.7"), 8443) {
		t.Error("an IPv4-mapped address must match its IPv4 rule")
	}
}

func TestBlocked(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		blocked bool
	}{
		{"127.0.0.1", true},
		{"127.1.2.3", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"10.1.2.3", true},
		{"172.16.0.1", true},
		{"192.168.1.1", true},
		{"::ffff:192.168.1.1", true},
		{"fd00::1", true},
		{"fd00:ec2::254", true},
		{"169.254.169.254", true},
		{"::ffff:169.254.169.254", true},
		{"fe80::1", true},
		{"100.64.0.1", true},
		{"100.127.255.254", true},
		{"0.0.0.0", true},
		{"0.1.2.3", true},
		{"::", true},
		{"224.0.0.1", true},
		{"ff02::1", true},
		{"255.255.255.255", true},
		{"64:ff9b::a9fe:a9fe", true},                   // NAT64 of 169.254.169.254
		{"64:ff9b::7f00:1", true},                      // NAT64 of 127.0.0.1
		{"2002:7f00:1::", true},                        // 6to4 of 127.0.0.1
		{"::127.0.0.1", true},                          // IPv4-compatible
		{"::ffff:0:7f00:1", true},                      // IPv4-translated (SIIT) of 127.0.0.1
		{"::ffff:0:a9fe:a9fe", true},                   // IPv4-translated of 169.254.169.254
		{"64:ff9b:1::7f00:1", true},                    // local-use NAT64 (/96 form) of 127.0.0.1
		{"64:ff9b:1:7f00:0:100:808:808", true},         // local-use NAT64 /48 form of 127.0.0.1 (suffix not zero)
		{"64:ff9b:1:a00:1:100::", true},                // local-use NAT64 /48 form of 10.0.1.1
		{"64:ff9b:1::808:808", false},                  // local-use NAT64 (/96 form) of 8.8.8.8
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", true}, // Teredo, client 127.0.0.1 (inverted)
		{"2001:0:a00:1:8000:63bf:f7f7:f7f7", true},     // Teredo, server 10.0.0.1
		{"93.184.216.34", false},
		{"8.8.8.8", false},
		{"100.128.0.1", false},
		{"203.0.113.80", false}, // documentation ranges: routed by some networks (this test host's)
		{"198.18.0.1", false},
		{"2606:4700::1111", false},
		{"64:ff9b::808:808", false}, // NAT64 of 8.8.8.8
	} {
		why := blockedReason(netip.MustParseAddr(tc.addr))
		if (why != "") != tc.blocked {
			t.Errorf("blockedReason(%s) = %q, want blocked=%v", tc.addr, why, tc.blocked)
		}
	}
}

func TestEmbeddedIPv4(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want string // the addresses, space-separated; "?" not ok
	}{
		{"::ffff:127.0.0.1", "127.0.0.1"},
		{"::198.51.100.7", "198.51.100.7"},
		{"64:ff9b::a9fe:a9fe", "169.254.169.254"},
		{"64:ff9b:1::808:808", "8.8.8.8"},
		{"64:ff9b:1:7f00:0:100:808:808", "?"},
		{"::ffff:0:a00:1", "10.0.0.1"},
		{"2002:7f00:1::", "127.0.0.1"},
		{"2001:0:a00:1:8000:63bf:f7f7:f7f7", "10.0.0.1 8.8.8.8"},
		{"2606:4700::1111", ""},
		{"8.8.8.8", ""},
	} {
		v4, ok := EmbeddedIPv4(netip.MustParseAddr(tc.addr))
		got := "?"
		if ok {
			var s []string
			for _, a := range v4 {
				s = append(s, a.String())
			}
			got = strings.Join(s, " ")
		}
		if got != tc.want {
			t.Errorf("EmbeddedIPv4(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
