package browser

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// hostAddr is the public-looking address the test puts on the loopback
// interface of its own network namespace, as the review did.
const hostAddr = "198.51.100.7"

// inNetnsEnv marks the test binary re-executed in that namespace.
const inNetnsEnv = "BROWSER_TEST_IN_NETNS"

// TestHostAddressRefused: in a network namespace of its own (a user
// namespace maps the test user to root there, so that it may add
// 198.51.100.7/32 to lo), a server and another service listen on all
// interfaces. Without allow_private, fetch_urls of either through
// 198.51.100.7 is refused, as loopback is; with it, the other service
// loads and the server's port is still refused. Nothing reaches the
// server.
func TestHostAddressRefused(t *testing.T) {
	if os.Getenv(inNetnsEnv) == "1" {
		hostAddressRefused(t)
		return
	}
	ip, err := exec.LookPath("ip") // in /usr/sbin, off the test user's PATH
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip"} {
		if _, serr := os.Stat(p); err != nil && serr == nil {
			ip, err = p, nil
		}
	}
	if err != nil {
		sandboxtest.SkipOrFail(t, "no ip command (iproute2): %v", err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		sandboxtest.SkipOrFail(t, "no unshare command (util-linux): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	script := `set -e; "$1" link set lo up; "$1" addr add ` + hostAddr + `/32 dev lo; shift; exec "$@"`
	cmd := exec.CommandContext(ctx, unshare, "--user", "--map-root-user", "--net", "--", "sh", "-c", script, "sh", ip,
		os.Args[0], "-test.run=^TestHostAddressRefused$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in the namespace:\n%s", out)
	if err != nil && strings.Contains(string(out), "unshare failed") {
		sandboxtest.SkipOrFail(t, "no user and network namespace for the test: %v", err)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestHostAddressRefused") {
		t.Fatalf("the test in its network namespace failed: %v", err)
	}
}

func hostAddressRefused(t *testing.T) {
	own, err := net.InterfaceAddrs()
	if err != nil || !strings.Contains(fmt.Sprint(own), hostAddr+"/32") {
		t.Fatalf("the namespace's addresses %v (%v) lack %s", own, err, hostAddr)
	}
	var serverHits, otherHits atomic.Int64
	listen := func(hits *atomic.Int64, body string) uint16 {
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fmt.Fprintf(w, "<title>%s</title>%s", body, body)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return netip.MustParseAddrPort(ln.Addr().String()).Port()
	}
	server := listen(&serverHits, "the server's openapi.json")
	other := listen(&otherHits, "another service")
	ports := func() []uint16 { return []uint16{server} }
	closed, _ := newBrowser(t, Options{Policy: Policy{ServerPorts: ports}})
	open, _ := newBrowser(t, Options{Policy: Policy{AllowPrivate: true, ServerPorts: ports}})
	for _, tc := range []struct {
		name      string
		b         *Browser
		url       string
		wantError string // "" means the page loads
	}{
		{"server port", closed, fmt.Sprintf("http://%s:%d/api/v1/openapi.json", hostAddr, server), "server's own port"},
		{"server port, metrics", closed, fmt.Sprintf("http://%s:%d/metrics", hostAddr, server), "server's own port"},
		{"another port", closed, fmt.Sprintf("http://%s:%d/", hostAddr, other), "an address of this host"},
		{"another port, IPv4-mapped", closed, fmt.Sprintf("http://[::ffff:%s]:%d/", hostAddr, other), "an address of this host"},
		{"another port, IPv4-compatible", closed, fmt.Sprintf("http://[::%s]:%d/", hostAddr, other), "an address of this host"},
		{"server port with allow_private", open, fmt.Sprintf("http://%s:%d/readyz", hostAddr, server), "server's own port"},
		{"another port with allow_private", open, fmt.Sprintf("http://%s:%d/", hostAddr, other), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pages, err := tc.b.FetchURLs(context.Background(), []string{tc.url})
			if err != nil {
				t.Fatal(err)
			}
			p := pages[0]
			if tc.wantError == "" {
				if p.Error != "" || p.Title != "another service" {
					t.Errorf("page %+v, want it loaded", p)
				}
				return
			}
			if !strings.Contains(p.Error, tc.wantError) || strings.Contains(p.Text, "openapi") {
				t.Errorf("page %+v, want refused: %s", p, tc.wantError)
			}
		})
	}
	if n := serverHits.Load(); n != 0 {
		t.Errorf("the server got %d requests through %s", n, hostAddr)
	}
	if otherHits.Load() == 0 {
		t.Error("the other service got no request, even with allow_private: the test shows nothing")
	}
}
