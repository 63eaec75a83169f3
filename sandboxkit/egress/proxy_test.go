package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/egress/egresstest"
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// start runs a proxy for the test with the test names of egresstest.
func start(t *testing.T, o egress.Options, res egresstest.Resolver) (*egress.Proxy, *egresstest.Events) {
	t.Helper()
	ev := &egresstest.Events{}
	o.Resolver, o.OnEvent = egresstest.AllowLoopback(res), ev.Add
	p, err := egress.Listen(filepath.Join(t.TempDir(), "egress.sock"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, ev
}

// client is an HTTP client whose proxy is p (reached on its socket).
func client(p *egress.Proxy, srv *egresstest.TLSServer) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", p.Path())
		},
		TLSClientConfig: &tls.Config{RootCAs: srv.Pool},
	}}
}

func TestProxyHTTPS(t *testing.T) {
	var srv *egresstest.TLSServer
	srv = egresstest.NewTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, fmt.Sprintf("https://other.test:%d/", srv.Port()), http.StatusFound)
			return
		}
		io.WriteString(w, "hello from "+r.Host)
	}), "allowed.test", "other.test", "meta.test", "wild.allowed.test")
	res := egresstest.Resolver{
		"allowed.test": loopback, "other.test": loopback, "wild.allowed.test": loopback,
		"meta.test":  {netip.MustParseAddr("169.254.169.254")},
		"mixed.test": {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.1")},
	}
	p, ev := start(t, egress.Options{Allow: []string{"allowed.test", "meta.test", "mixed.test", "127.0.0.1"}}, res)
	c := client(p, srv)
	port := srv.Port()

	resp, err := c.Get(fmt.Sprintf("https://allowed.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("hello from allowed.test:%d", port); string(body) != want {
		t.Fatalf("body %q, want %q", body, want)
	}
	c.CloseIdleConnections()
	e, ok := ev.Find("allowed.test", egress.Allowed)
	if !ok || e.Port != port || e.Addr != "127.0.0.1" || e.Sent == 0 || e.Received == 0 || e.Proto != "connect" {
		t.Fatalf("allowed event %+v (found %v); events:\n%s", e, ok, ev)
	}

	for _, tc := range []struct{ url, host, reason string }{
		{fmt.Sprintf("https://other.test:%d/", port), "other.test", "not in the allow-list"},
		{fmt.Sprintf("https://allowed.test:%d/redirect", port), "other.test", "not in the allow-list"},
		{fmt.Sprintf("https://127.0.0.1:%d/", port), "127.0.0.1", "loopback"},
		{fmt.Sprintf("https://10.0.0.1:%d/", port), "10.0.0.1", "not in the allow-list"},
		{fmt.Sprintf("https://meta.test:%d/", port), "meta.test", "link-local"},
		{fmt.Sprintf("https://mixed.test:%d/", port), "mixed.test", "private"},
		{fmt.Sprintf("https://sub.allowed.test:%d/", port), "sub.allowed.test", "not in the allow-list"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			resp, err := c.Get(tc.url)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("GET %s: %s, want refused", tc.url, resp.Status)
			}
			e, ok := ev.Find(tc.host, egress.Refused)
			if !ok || !strings.Contains(e.Reason, tc.reason) {
				t.Fatalf("refused event for %s: %+v (found %v), want reason with %q; events:\n%s", tc.host, e, ok, tc.reason, ev)
			}
		})
	}
}

func TestProxyPlainHTTPAndSOCKS(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain "+r.Host) })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	p, ev := start(t, egress.Options{Allow: []string{"allowed.test"}}, egresstest.Resolver{"allowed.test": loopback, "other.test": loopback})

	// Plain HTTP: absolute-form requests are forwarded when allowed.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", p.Path())
		}}}
	resp, err := c.Get(fmt.Sprintf("http://allowed.test:%d/x", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != fmt.Sprintf("plain allowed.test:%d", port) {
		t.Fatalf("plain HTTP body %q", body)
	}
	// Every method, HEAD too (its first byte is no bridge's handover).
	resp, err = c.Head(fmt.Sprintf("http://allowed.test:%d/x", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("plain HTTP HEAD: %s", resp.Status)
	}
	resp, err = c.Get(fmt.Sprintf("http://other.test:%d/x", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("plain HTTP to other.test: %s, want 403", resp.Status)
	}
	if e, ok := ev.Find("other.test", egress.Refused); !ok || e.Proto != "http" {
		t.Fatalf("no refused http event: %s", ev)
	}

	// SOCKS5 with a name (socks5h).
	for _, tc := range []struct {
		host string
		want byte
	}{{"allowed.test", 0}, {"other.test", 2}} {
		conn, err := net.Dial("unix", p.Path())
		if err != nil {
			t.Fatal(err)
		}
		code, err := socksConnect(conn, tc.host, port)
		if err != nil || code != tc.want {
			t.Fatalf("SOCKS5 CONNECT %s: code %d, %v; want %d", tc.host, code, err, tc.want)
		}
		if code == 0 {
			fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", tc.host)
			b, _ := io.ReadAll(conn)
			if !strings.HasSuffix(string(b), "plain "+tc.host) {
				t.Fatalf("through SOCKS5: %q", b)
			}
		}
		conn.Close()
	}
	if e, ok := ev.Find("other.test", egress.Refused); !ok {
		t.Fatalf("no refused event: %s %+v", ev, e)
	}
}

// socksConnect does a SOCKS5 CONNECT to host:port by name and returns
// the reply code.
func socksConnect(c net.Conn, host string, port int) (byte, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return 0, err
	}
	var b [10]byte
	if _, err := io.ReadFull(c, b[:2]); err != nil || b[1] != 0 {
		return 0, fmt.Errorf("greeting: %v %v", b[:2], err)
	}
	req := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	return b[1], nil
}

// connect opens a CONNECT tunnel through p and returns it, or the
// proxy's status line.
func connect(p *egress.Proxy, hostport string) (net.Conn, string, error) {
	c, err := net.Dial("unix", p.Path())
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, resp.Status, nil
	}
	return c, resp.Status, nil
}

func TestProxyCaps(t *testing.T) {
	// An echo-less sink that writes n bytes to whoever connects, then waits.
	port := sandboxtest.ServeTCP(t, "127.0.0.1:0", func(c net.Conn) {
		c.Write(make([]byte, 64<<10))
		io.Copy(io.Discard, c)
	})
	hp := fmt.Sprintf("allowed.test:%d", port)
	res := egresstest.Resolver{"allowed.test": loopback}

	t.Run("conns", func(t *testing.T) {
		p, ev := start(t, egress.Options{Allow: []string{"allowed.test"}, Caps: egress.Caps{MaxConns: 2}}, res)
		var open []net.Conn
		for range 2 {
			c, st, err := connect(p, hp)
			if err != nil || c == nil {
				t.Fatalf("tunnel: %s %v", st, err)
			}
			open = append(open, c)
		}
		if c, st, _ := connect(p, hp); c != nil || !strings.HasPrefix(st, "403") {
			t.Fatalf("third tunnel: %q, want 403", st)
		}
		if e, ok := ev.Find("allowed.test", egress.Refused); !ok || !strings.Contains(e.Reason, "too many") {
			t.Fatalf("event %+v; %s", e, ev)
		}
		open[0].Close()
		// The slot comes back.
		sandboxtest.Eventually(t, 10*time.Second, func() error {
			c, _, _ := connect(p, hp)
			if c == nil {
				return errors.New("slot never freed")
			}
			c.Close()
			return nil
		})
		open[1].Close()
	})
	t.Run("bytes", func(t *testing.T) {
		p, ev := start(t, egress.Options{Allow: []string{"allowed.test"}, Caps: egress.Caps{MaxBytes: 100 << 10}}, res)
		c, st, err := connect(p, hp)
		if c == nil {
			t.Fatalf("tunnel: %s %v", st, err)
		}
		go c.Write(make([]byte, 200<<10))
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		e, ok := ev.Find("allowed.test", egress.Allowed)
		if !ok || !strings.Contains(e.Reason, "budget") || e.Sent+e.Received > 100<<10 {
			t.Fatalf("event %+v (read %d); %s", e, n, ev)
		}
		if c, st, _ := connect(p, hp); c != nil || !strings.HasPrefix(st, "403") {
			t.Fatalf("tunnel after the budget: %q, want 403", st)
		}
	})
	t.Run("duration", func(t *testing.T) {
		p, ev := start(t, egress.Options{Allow: []string{"allowed.test"}, Caps: egress.Caps{MaxConnDuration: 300 * time.Millisecond}}, res)
		c, st, err := connect(p, hp)
		if c == nil {
			t.Fatalf("tunnel: %s %v", st, err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, c)
		c.Close()
		if err != nil {
			t.Fatalf("the proxy did not cut the connection: %v", err)
		}
		if e, ok := ev.Find("allowed.test", egress.Allowed); !ok || !strings.Contains(e.Reason, "cut after") {
			t.Fatalf("event %+v; %s", e, ev)
		}
	})
}

func TestProxyClose(t *testing.T) {
	p, _ := start(t, egress.Options{Allow: []string{"allowed.test"}}, egresstest.Resolver{})
	p.Close()
	if !errors.Is(p.Err(), egress.ErrProxyDown) {
		t.Fatalf("Err after Close = %v", p.Err())
	}
	if _, err := net.Dial("unix", p.Path()); err == nil {
		t.Fatal("the socket still answers after Close")
	}
}

func TestProxyBadRequests(t *testing.T) {
	p, ev := start(t, egress.Options{Allow: []string{"allowed.test"}}, egresstest.Resolver{"allowed.test": loopback})
	for _, tc := range []struct {
		name, send, reason string
	}{
		{"garbage", "hello\r\n\r\n", "not an HTTP or SOCKS5 request"},
		{"endless head", "CONNECT allowed.test:443 HTTP/1.1\r\nX: " + strings.Repeat("a", 100<<10), "not an HTTP or SOCKS5 request"},
		{"origin form", "GET /x HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "not a proxy request"},
		{"https absolute form", "GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "not a proxy request"},
		{"CONNECT without port", "CONNECT allowed.test HTTP/1.1\r\n\r\n", "want host:port"},
		{"SOCKS5 BIND", "\x05\x01\x00\x05\x02\x00\x03\x0callowed.test\x01\xbb", "only CONNECT"},
		{"SOCKS5 address type", "\x05\x01\x00\x05\x01\x00\x09", "address type 9"},
		{"SOCKS5 with authentication only", "\x05\x01\x02", "no method without authentication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(ev.All())
			c, err := net.Dial("unix", p.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go io.WriteString(c, tc.send)
			c.SetDeadline(time.Now().Add(15 * time.Second))
			io.Copy(io.Discard, c) // the proxy answers and hangs up
			sandboxtest.Eventually(t, 10*time.Second, func() error {
				if len(ev.All()) == before {
					return errors.New("no event")
				}
				return nil
			})
			if e := ev.All()[before]; e.Verdict != egress.Refused || !strings.Contains(e.Reason, tc.reason) {
				t.Fatalf("event %+v, want refused with %q", e, tc.reason)
			}
		})
	}
}

// rebinder answers 127.0.0.1 first, then the metadata address.
type rebinder struct{ n atomic.Int32 }

func (r *rebinder) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	if r.n.Add(1) == 1 {
		return loopback, nil
	}
	return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
}

// Every connection is checked anew, against what the name resolves to
// then, and goes to the address checked.
func TestProxyRebinding(t *testing.T) {
	port := sandboxtest.ServeTCP(t, "127.0.0.1:0", func(net.Conn) {})
	ev := &egresstest.Events{}
	p, err := egress.Listen(filepath.Join(t.TempDir(), "egress.sock"), egress.Options{Allow: []string{"rebind.test"}, Resolver: egresstest.AllowLoopback(&rebinder{}), OnEvent: ev.Add})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	hp := fmt.Sprintf("rebind.test:%d", port)
	c, st, _ := connect(p, hp)
	if c == nil {
		t.Fatalf("first connection: %s", st)
	}
	c.Close()
	if c, st, _ := connect(p, hp); c != nil || !strings.HasPrefix(st, "403") {
		t.Fatalf("after the name moved to the metadata address: %q, want 403", st)
	}
	if e, ok := ev.Find("rebind.test", egress.Refused); !ok || e.Addr != "169.254.169.254" {
		t.Fatalf("refused event %+v; %s", e, ev)
	}
}

// A proxy that cannot listen says so with ErrProxyDown, and no path.
func TestProxyCannotListen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "egress.sock")
	_, err := egress.Listen(path, egress.Options{Allow: []string{"allowed.test"}})
	if !errors.Is(err, egress.ErrProxyDown) || strings.Contains(err.Error(), "missing") {
		t.Fatalf("Listen = %v, want ErrProxyDown naming no path", err)
	}
}

// A destination that is one of this host's own addresses reaches the
// host's own services (the kernel routes it over loopback), and one on
// a network the host is attached to is a neighbour on its LAN, whatever
// range the address is in (this test host's LAN is 192.0.2.0/24, a
// documentation range): both are refused like loopback and private
// addresses, for a name that resolves there as for a listed IP literal.
func TestProxyRefusesHostAddresses(t *testing.T) {
	port := sandboxtest.ServeTCP(t, ":0", func(net.Conn) {}) // every address of the host
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	res := egresstest.Resolver{}
	var allow, dests []string
	for i, ifa := range ifas {
		n := ifa.(*net.IPNet)
		a, ok := netip.AddrFromSlice(n.IP)
		if a = a.Unmap(); !ok || a.IsLoopback() { // loopback: the tests' switch lets resolved ones through
			continue
		}
		ones, _ := n.Mask.Size()
		targets := []netip.Addr{a}
		if ones < a.BitLen()-1 { // a neighbour: the network's first address, else its second
			pfx, _ := a.Prefix(ones)
			nb := pfx.Addr().Next()
			if nb == a {
				nb = nb.Next()
			}
			targets = append(targets, nb)
		}
		for j, a := range targets {
			name := fmt.Sprintf("self%d-%d.test", i, j)
			res[name] = []netip.Addr{a}
			allow = append(allow, name, a.String())
			dests = append(dests, net.JoinHostPort(name, strconv.Itoa(port)), net.JoinHostPort(a.String(), strconv.Itoa(port)))
		}
	}
	if len(dests) == 0 {
		t.Fatal("this host has no address but loopback")
	}
	p, ev := start(t, egress.Options{Allow: allow}, res)
	for _, hp := range dests {
		c, st, err := connect(p, hp)
		if c != nil {
			c.Close()
		}
		host, _, _ := net.SplitHostPort(hp)
		// Refused, not failed: no connection was tried.
		if e, ok := ev.Find(host, egress.Refused); c != nil || !strings.HasPrefix(st, "403") || !ok {
			t.Errorf("CONNECT %s (an address of this host or its networks): %q %v, event %+v, want 403 and refused; events:\n%s", hp, st, err, e, ev)
		}
	}
}

// The destination a client asks for is the sandbox's to choose, any
// bytes: an event carries it printable (it is shown on terminals, in
// logs), with no control character that could drive a terminal.
func TestProxyEventHostPrintable(t *testing.T) {
	p, ev := start(t, egress.Options{Allow: []string{"allowed.test"}}, egresstest.Resolver{})
	for _, tc := range []struct{ name, host string }{
		{"SOCKS5 escape", "\x1b]0;owned\x07\x1b[2Jallowed.test"},
		{"SOCKS5 C1", "a\u009b31mb.test"},
		{"SOCKS5 newline", "x.test\nfake event line"},
		{"CONNECT C1", "a\u009b31mb.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(ev.All())
			c, err := net.Dial("unix", p.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if strings.HasPrefix(tc.name, "SOCKS5") {
				if code, err := socksConnect(c, tc.host, 443); err != nil || code == 0 {
					t.Fatalf("SOCKS5 reply %d %v, want a refusal", code, err)
				}
			} else {
				fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\n\r\n", tc.host)
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.Copy(io.Discard, c)
			}
			sandboxtest.Eventually(t, 10*time.Second, func() error {
				if len(ev.All()) == before {
					return errors.New("no event")
				}
				return nil
			})
			e := ev.All()[before]
			if e.Verdict != egress.Refused || e.Host == "" {
				t.Fatalf("event %+v, want refused naming the host", e)
			}
			for _, s := range []string{e.Host, e.Reason} {
				for i := 0; i < len(s); i++ {
					if s[i] < 0x20 || s[i] >= 0x7f {
						t.Fatalf("event %+v: byte %#x in %q", e, s[i], s)
					}
				}
			}
		})
	}
}

// A connection that waits holds no more than a share of the byte budget
// left: others still get through, and the budget is not taken for spent
// while most of it is.
func TestProxyIdleConnectionKeepsBudget(t *testing.T) {
	idle := sandboxtest.ServeTCP(t, "127.0.0.1:0", func(c net.Conn) { io.Copy(io.Discard, c) })
	talker := sandboxtest.ServeTCP(t, "127.0.0.1:0", func(c net.Conn) { // answers once asked: connect reads no further than the proxy's answer
		if _, err := c.Read(make([]byte, 1)); err == nil {
			c.Write(make([]byte, 10<<10))
		}
	})
	p, ev := start(t, egress.Options{Allow: []string{"allowed.test"}, Caps: egress.Caps{MaxBytes: 1 << 20}}, egresstest.Resolver{"allowed.test": loopback})
	waiting, st, err := connect(p, fmt.Sprintf("allowed.test:%d", idle))
	if waiting == nil {
		t.Fatalf("idle tunnel: %s %v", st, err)
	}
	defer waiting.Close()
	time.Sleep(100 * time.Millisecond) // its relay is waiting to read, both ways
	for i := range 3 {
		c, st, err := connect(p, fmt.Sprintf("allowed.test:%d", talker))
		if c == nil {
			t.Fatalf("tunnel %d beside an idle one, with the budget nearly whole: %s %v; events:\n%s", i, st, err, ev)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "?")
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		if n != 10<<10 {
			t.Fatalf("tunnel %d relayed %d bytes, want %d; events:\n%s", i, n, 10<<10, ev)
		}
	}
}

// The sandbox can speak on the proxy's socket itself (it is bound in):
// a handover of anything but one TCP connection is refused, and every
// descriptor it sent is closed.
func TestProxyHostileHandover(t *testing.T) {
	p, ev := start(t, egress.Options{Allow: []string{"allowed.test"}}, egresstest.Resolver{})
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	uf, err := udp.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer uf.Close()
	open := func() int { d, _ := os.ReadDir("/proc/self/fd"); return len(d) }
	before := open()
	for _, tc := range []struct {
		name   string
		fds    []int
		reason string
	}{
		{"none", nil, "want exactly one descriptor"},
		{"a pipe", []int{int(pr.Fd())}, "bad handover"},
		{"a UDP socket", []int{int(uf.Fd())}, "not a TCP connection"},
		{"two", []int{int(pr.Fd()), int(pw.Fd())}, "want exactly one descriptor"},
		{"more than fit", []int{0, 1, 2, 0, 1, 2, 0, 1, 2}, "want exactly one descriptor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(ev.All())
			c, err := net.Dial("unix", p.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var oob []byte
			if tc.fds != nil {
				oob = syscall.UnixRights(tc.fds...)
			}
			if _, _, err := c.(*net.UnixConn).WriteMsgUnix([]byte{0}, oob, nil); err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(15 * time.Second))
			io.Copy(io.Discard, c) // the proxy hangs up
			sandboxtest.Eventually(t, 10*time.Second, func() error {
				if len(ev.All()) == n {
					return errors.New("no event")
				}
				return nil
			})
			if e := ev.All()[n]; e.Verdict != egress.Refused || !strings.Contains(e.Reason, tc.reason) {
				t.Fatalf("event %+v, want refused with %q", e, tc.reason)
			}
		})
	}
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if n := open(); n > before {
			return fmt.Errorf("%d descriptors open after the handovers, %d before", n, before)
		}
		return nil
	})
}

// A name that resolves to loopback is refused unless the resolver is a
// test's marked one (egresstest.AllowLoopback): no field of Options
// turns the check off.
func TestResolvedLoopbackNeedsTestResolver(t *testing.T) {
	port := sandboxtest.ServeTCP(t, "127.0.0.1:0", func(net.Conn) {})
	hp := fmt.Sprintf("allowed.test:%d", port)
	res := egresstest.Resolver{"allowed.test": loopback}
	for _, tc := range []struct {
		name    string
		res     egress.Resolver
		allowed bool
	}{
		{"plain", res, false},
		{"marked", egresstest.AllowLoopback(res), true},
	} {
		ev := &egresstest.Events{}
		p, err := egress.Listen(filepath.Join(t.TempDir(), "egress.sock"), egress.Options{Allow: []string{"allowed.test"}, Resolver: tc.res, OnEvent: ev.Add})
		if err != nil {
			t.Fatal(err)
		}
		c, st, err := connect(p, hp)
		if err != nil || (c != nil) != tc.allowed {
			t.Errorf("%s resolver: CONNECT %s = %q, %v; want allowed=%v", tc.name, hp, st, err, tc.allowed)
		}
		if c != nil {
			c.Close()
		}
		p.Close() // returns once every connection's event is reported
		if !tc.allowed {
			if e, ok := ev.Find("allowed.test", egress.Refused); !ok || !strings.Contains(e.Reason, "loopback") {
				t.Errorf("plain resolver: no refusal naming loopback: %s", ev)
			}
		}
	}
}
