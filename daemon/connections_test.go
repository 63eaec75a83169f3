package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// healthyFrom requires GET /healthz to answer 200 from the loopback
// address ip within 10 s.
func (p *proc) healthyFrom(ip string) {
	p.t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	res, err := hc.Get(p.URL + "/healthz")
	if err != nil {
		p.t.Fatalf("GET /healthz from %s: %v\nserver log:\n%s", ip, err, tailLog(p.stderr.String()))
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		p.t.Fatalf("GET /healthz from %s: %d", ip, res.StatusCode)
	}
	select {
	case <-p.done:
		p.t.Fatalf("the server exited:\n%s", tailLog(p.stderr.String()))
	default:
	}
}

func tailLog(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// The item 1 as a load test: two clients (127.0.0.1 and
// 127.0.0.2) open 1,500 idle connections each, together three times the
// server's descriptor limit of 1,024, within a few seconds. The server
// stays up, answers a third address during the flood, closes every idle
// connection by itself (header timeout), and answers afterwards.
func TestIdleConnectionFlood(t *testing.T) {
	in := newInstance(t, "server:\n  header_timeout: 2s\n")
	in.nofile = 1024
	p := in.start()
	addr := strings.TrimPrefix(p.URL, "http://")

	const perClient = 1500
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var conns []net.Conn
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		for w := 0; w < 10; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 3 * time.Second}
				for i := 0; i < perClient/10 && ctx.Err() == nil; i++ {
					c, err := d.DialContext(ctx, "tcp", addr)
					if err != nil {
						failed.Add(1)
						continue
					}
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d idle connections open, %d dials failed", len(conns), failed.Load())
	select {
	case <-p.done:
		t.Fatalf("the server exited under the load:\n%s", tailLog(p.stderr.String()))
	default:
	}
	if len(conns) < perClient {
		t.Fatalf("only %d of %d connections opened: the load did not happen", len(conns), 2*perClient)
	}
	p.healthyFrom("127.0.0.3")

	// Every idle connection is closed by the server: at once beyond the
	// caps, after the header timeout otherwise.
	var open atomic.Int64
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(deadline)
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				open.Add(1)
			}
		}()
	}
	wg.Wait()
	for _, c := range conns {
		c.Close()
	}
	if n := open.Load(); n > 0 {
		t.Errorf("%d idle connections still open 10 s later (header_timeout 2s)", n)
	}
	p.healthyFrom("127.0.0.1")
	p.healthyFrom("127.0.0.2")
}

// Behind a trusted reverse proxy every client has the proxy's address,
// so the per-address connection cap does not apply to it (the total cap
// does): with max_connections 40 (10 per address), the proxy holds 20
// idle connections while an untrusted address gets 10 and no more.
func TestProxyConnectionsNotCappedPerIP(t *testing.T) {
	in := newInstance(t, "trusted_proxies: [127.0.0.1]\nserver:\n  max_connections: 40\n  header_timeout: 5s\n")
	p := in.start()
	addr := strings.TrimPrefix(p.URL, "http://")
	openFrom := func(ip string, n int) int {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 3 * time.Second}
		var conns []net.Conn
		for range n {
			c, err := d.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("dial from %s: %v", ip, err)
			}
			t.Cleanup(func() { c.Close() })
			conns = append(conns, c)
		}
		// A connection beyond a cap is closed at once; an admitted one
		// stays open until the header timeout.
		deadline := time.Now().Add(time.Second)
		var kept atomic.Int64
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() {
				c.SetReadDeadline(deadline)
				var b [1]byte
				var ne net.Error
				if _, err := c.Read(b[:]); errors.As(err, &ne) && ne.Timeout() {
					kept.Add(1)
				}
			})
		}
		wg.Wait()
		return int(kept.Load())
	}
	if n := openFrom("127.0.0.1", 20); n != 20 {
		t.Errorf("the trusted proxy kept %d of 20 connections, want all", n)
	}
	if n := openFrom("127.0.0.2", 20); n != 10 {
		t.Errorf("an untrusted address kept %d of 20 connections, want 10 (max_connections/4)", n)
	}
	p.healthyFrom("127.0.0.3")
}

// The item 6 as a load test: one user asks for 100 event
// streams at once; 16 open and the rest get 429. Another user still
// gets a stream until the global cap (max_streams: 20) is reached; a
// closed stream frees its place.
func TestEventStreamCaps(t *testing.T) {
	in := newInstance(t, "server:\n  max_streams: 20\n")
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a, b := p.login("alice", pw), p.login("bob", pw)
	convA, convB := a.newConversation(), b.newConversation()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr := &http.Transport{MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var bodies []io.Closer
	var mu sync.Mutex
	open := func(c *client, conv string) int {
		req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/api/v1/conversations/"+conv+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		res, err := hc.Do(req)
		if err != nil {
			t.Errorf("events: %v", err)
			return 0
		}
		if res.StatusCode == http.StatusOK {
			mu.Lock()
			bodies = append(bodies, res.Body)
			mu.Unlock()
		} else {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return res.StatusCode
	}
	count := func(c *client, conv string, n int) map[int]int {
		got := map[int]int{}
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := open(c, conv)
				mu.Lock()
				got[st]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		return got
	}
	if got := count(a, convA, 100); got[http.StatusOK] != 16 || got[http.StatusTooManyRequests] != 84 {
		t.Fatalf("alice's 100 streams: %v, want 16 × 200 and 84 × 429", got)
	}
	if got := count(b, convB, 10); got[http.StatusOK] != 4 || got[http.StatusTooManyRequests] != 6 {
		t.Fatalf("bob's 10 streams with 16 of 20 in use: %v, want 4 × 200 and 6 × 429", got)
	}
	// The 429 is the API's JSON error.
	status, body, hdr := b.do("GET", "/api/v1/conversations/"+convB+"/events", nil)
	if status != http.StatusTooManyRequests || !strings.Contains(string(body), `"too_many_streams"`) || hdr.Get("Retry-After") == "" {
		t.Fatalf("over the cap: %d %s %v", status, body, hdr)
	}
	// Closing one of alice's streams frees a place, for her or anyone.
	bodies[0].Close()
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if st := open(b, convB); st != http.StatusOK {
			return fmt.Errorf("a closed stream's place was not freed: %d", st)
		}
		return nil
	})
	for _, c := range bodies {
		c.Close()
	}
	p.healthyFrom("127.0.0.1")
}

// The item 3: concurrent mixed-method traffic, then /metrics
// parses and its labels hold only the methods sent.
func TestMetricsAfterMixedTraffic(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()

	methods := []string{"GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"}
	paths := []string{"/healthz", "/api/v1/conversations", "/api/v1/conversations/" + conv, "/api/v1/secrets/X", "/nope"}
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 150; i++ {
				m, path := methods[(w+i)%len(methods)], paths[(w*7+i)%len(paths)]
				req, _ := http.NewRequest(m, p.URL+path, strings.NewReader(`{}`))
				req.Header.Set("Authorization", "Bearer "+a.token)
				res, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
	status, body, _ := p.anon().do("GET", "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d %.600s", status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	fam := fams["codumentor_http_requests_total"]
	if fam == nil {
		t.Fatal("no codumentor_http_requests_total")
	}
	var total float64
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "method" && !strings.Contains(" "+strings.Join(methods, " ")+" ", " "+l.GetValue()+" ") {
				t.Errorf("method label %q was never sent", l.GetValue())
			}
		}
		total += m.GetCounter().GetValue()
	}
	if total < 16*150 {
		t.Errorf("counted %v requests, sent more than %d", total, 16*150)
	}
}

// Items 9, 10 and 12: answers that were wrong in small ways.
func TestAPIHygiene(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	expect := func(want int, method, path string, body any) {
		t.Helper()
		if got, b, _ := a.do(method, path, body); got != want {
			t.Errorf("%s %s: %d, want %d: %s", method, path, got, want, b)
		}
	}

	// 9: a name that cannot exist is absent for DELETE as for GET.
	expect(http.StatusNotFound, "GET", "/api/v1/secrets/1abc", nil)
	expect(http.StatusNotFound, "DELETE", "/api/v1/secrets/1abc", nil)

	// 10: no host path or raw OS error reaches the client.
	status, body, _ := a.do("GET", "/api/v1/conversations/"+conv+"/workspace/files?path="+strings.Repeat("a", 300), nil)
	if status != http.StatusBadRequest || strings.Contains(string(body), in.dir) || strings.Contains(string(body), "lstat") || strings.Contains(string(body), "/") {
		t.Errorf("a 300-byte file name: %d %s", status, body)
	}
	// The server logs the error after it answers, and its output reaches
	// the test through a pipe: wait for the line a little.
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(p.stderr.String(), "file name too long") {
			return fmt.Errorf("the server log does not have the OS error:\n%s", tailLog(p.stderr.String()))
		}
		return nil
	})

	// 12: a limit that is not a number; titles with control characters.
	for _, q := range []string{"abc", "1e3", "-1", "0", "1001"} {
		expect(http.StatusBadRequest, "GET", "/api/v1/conversations?limit="+url.QueryEscape(q), nil)
	}
	a.must(http.StatusOK, "GET", "/api/v1/conversations?limit=5", nil, nil)
	// The answer quotes a bad value only in part.
	for _, path := range []string{"/api/v1/conversations?limit=", "/api/v1/conversations/" + conv + "/events?after="} {
		if status, body, _ := a.do("GET", path+strings.Repeat("9a", 1000), nil); status != http.StatusBadRequest || len(body) > 400 {
			t.Errorf("GET %s<2000 bytes>: %d, %d bytes: %.100s…", path, status, len(body), body)
		}
	}
	for _, title := range []string{"a\x00b", "red \x1b[31m", "two\nlines", "tab\there", "c1 \u0085 next line"} {
		expect(http.StatusBadRequest, "POST", "/api/v1/conversations", map[string]string{"title": title})
	}
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "Ünïcode — fine"}, nil)

	// 12: HEAD on an event stream answers its headers and no body.
	req, _ := http.NewRequest("HEAD", p.URL+"/api/v1/conversations/"+conv+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Close = true
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req.Write(conn)
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	raw, _ := io.ReadAll(conn)
	head, rest, _ := strings.Cut(string(raw), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 200") || !strings.Contains(head, "text/event-stream") || rest != "" {
		t.Errorf("HEAD /events: %q then %q", head, rest)
	}
	p.healthyFrom("127.0.0.1")
}
