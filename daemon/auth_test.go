package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/auth"
)

// healthy fails the test unless the server answers /healthz.
func (p *proc) healthy() {
	p.t.Helper()
	p.anon().must(http.StatusOK, "GET", "/healthz", nil, nil)
}

// loginStatus tries one login and returns the status, error code and
// Retry-After header.
func (p *proc) loginStatus(name, password string, header ...string) (int, string, string) {
	p.t.Helper()
	body, _ := json.Marshal(map[string]string{"username": name, "password": password})
	req, _ := http.NewRequest("POST", p.URL+"/api/v1/auth/login", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("login %.20s: %v", name, err)
	}
	defer res.Body.Close()
	var e struct{ Error struct{ Code string } }
	json.NewDecoder(res.Body).Decode(&e)
	return res.StatusCode, e.Error.Code, res.Header.Get("Retry-After")
}

// A password change, disabling the user and signing out each end the
// tokens issued before; re-enabling a user does not bring them back.
func TestTokensRevoked(t *testing.T) {
	in := newInstance(t, "plugins: []\n")
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()

	old := p.login("alice", pw)
	old.must(http.StatusOK, "GET", "/api/v1/me", nil, nil)
	in.users(func(ctx context.Context, us *auth.Users) error {
		return us.SetPassword(ctx, auth.CommandLine, "alice", "new password 1")
	})
	old.must(http.StatusUnauthorized, "GET", "/api/v1/me", nil, nil)
	a := p.login("alice", "new password 1")
	a.must(http.StatusOK, "GET", "/api/v1/me", nil, nil)

	other := p.login("alice", "new password 1")
	a.must(http.StatusNoContent, "POST", "/api/v1/auth/logout", nil, nil)
	a.must(http.StatusUnauthorized, "GET", "/api/v1/me", nil, nil)
	other.must(http.StatusUnauthorized, "GET", "/api/v1/me", nil, nil) // sign-out ends every session
	a.must(http.StatusUnauthorized, "POST", "/api/v1/auth/logout", nil, nil)
	p.login("alice", "new password 1").must(http.StatusOK, "GET", "/api/v1/me", nil, nil)

	b := p.login("bob", pw)
	in.users(func(ctx context.Context, us *auth.Users) error {
		return us.SetDisabled(ctx, auth.CommandLine, "bob", true)
	})
	b.must(http.StatusUnauthorized, "GET", "/api/v1/me", nil, nil)
	in.users(func(ctx context.Context, us *auth.Users) error {
		return us.SetDisabled(ctx, auth.CommandLine, "bob", false)
	})
	b.must(http.StatusUnauthorized, "GET", "/api/v1/me", nil, nil)
	p.login("bob", pw).must(http.StatusOK, "GET", "/api/v1/me", nil, nil)
}

// The Authorization scheme is case-insensitive (RFC 9110 §11.1).
func TestBearerSchemeCase(t *testing.T) {
	in := newInstance(t, "plugins: []\n")
	in.addUser("alice", pw, false)
	p := in.start()
	tok := p.login("alice", pw).token
	for h, want := range map[string]int{
		"Bearer " + tok: http.StatusOK, "bearer " + tok: http.StatusOK, "BEARER " + tok: http.StatusOK, "Bearer   " + tok: http.StatusOK,
		"Basic " + tok: http.StatusUnauthorized, "Bearer": http.StatusUnauthorized, "Bearer ": http.StatusUnauthorized,
		tok: http.StatusUnauthorized, "Bearerx " + tok: http.StatusUnauthorized,
	} {
		req, _ := http.NewRequest("GET", p.URL+"/api/v1/me", nil)
		req.Header.Set("Authorization", h)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Authorization %.12q…: %d, want %d", h, res.StatusCode, want)
		}
	}
}

// ended waits until the stream's connection ends, failing after timeout.
func (s *stream) ended(timeout time.Duration) {
	s.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case <-s.events:
		case err := <-s.err:
			if !strings.Contains(err.Error(), "stream ended") {
				s.t.Fatalf("stream: %v", err)
			}
			return
		case <-deadline:
			s.t.Fatalf("the event stream is still open after %v", timeout)
		}
	}
}

// An open event stream ends at the next heartbeat once its user is
// disabled, its token is revoked by a password change, or it expires.
// Through the real server process, with bob holding as many streams as
// a user may (16, over 4 conversations): every one of them ends, and
// their places are free again for his next session.
func TestStreamEndsWithItsToken(t *testing.T) {
	// The tokens outlive the setup (logins and 18 streams) on a loaded
	// machine: the streams must be seen open before any expires.
	in := newInstance(t, "  token_ttl: 15s\nplugins: []\n")
	in.args = []string{"--sse-heartbeat", "100ms"}
	in.addUser("bob", pw, false)
	in.addUser("carol", pw, false)
	in.addUser("dave", pw, false)
	p := in.start()

	const perUser = 16 // server.max_streams_per_user's default
	openAll := func(c *client) []*stream {
		var ss []*stream
		for range perUser / 4 {
			conv := c.newConversation()
			for range 4 {
				ss = append(ss, c.follow(conv, ""))
			}
		}
		return ss
	}
	open := func(name string) (*client, *stream) {
		c := p.login(name, pw)
		s := c.follow(c.newConversation(), "")
		return c, s
	}
	bobs := openAll(p.login("bob", pw))
	_, carol := open("carol")
	_, dave := open("dave")
	// All stay open across heartbeats while their tokens are good.
	heartbeats(t, 2, 10*time.Second, append(bobs, carol, dave)...)

	in.users(func(ctx context.Context, us *auth.Users) error {
		return us.SetDisabled(ctx, auth.CommandLine, "bob", true)
	})
	in.users(func(ctx context.Context, us *auth.Users) error {
		return us.SetPassword(ctx, auth.CommandLine, "carol", "new password 1")
	})
	for _, s := range bobs {
		s.ended(10 * time.Second)
	}
	carol.ended(10 * time.Second)
	// dave's token expires 15 s after its login.
	dave.ended(30 * time.Second)

	// The ended streams gave their places back: bob, enabled again,
	// opens his 16 at once.
	in.users(func(ctx context.Context, us *auth.Users) error {
		return us.SetDisabled(ctx, auth.CommandLine, "bob", false)
	})
	for _, s := range openAll(p.login("bob", pw)) {
		s.cancel()
	}
	p.healthy()
}

// Logins that race for one name are limited as if they came one by
// one, and a burst of logins is bounded in memory by the hashing slots.
// Through the real server process.
func TestLoginFlood(t *testing.T) {
	in := newInstance(t, "plugins: []\ntrusted_proxies: [127.0.0.1]\n")
	in.addUser("alice", pw, false)
	p := in.start()

	burst := func(n int, req func(i int) *http.Request) map[int]int {
		tr := &http.Transport{MaxIdleConnsPerHost: n, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr, Timeout: 60 * time.Second}
		var mu sync.Mutex
		counts := map[int]int{}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			r := req(i)
			wg.Go(func() {
				<-start
				res, err := cl.Do(r)
				status := 0 // a refused or reset connection
				if err == nil {
					if res.StatusCode == http.StatusServiceUnavailable || res.StatusCode == http.StatusTooManyRequests {
						if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 {
							t.Errorf("%d without a Retry-After: %q", res.StatusCode, res.Header.Get("Retry-After"))
						}
					}
					res.Body.Close()
					status = res.StatusCode
				}
				mu.Lock()
				counts[status]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		return counts
	}
	login := func(name, password, client string) *http.Request {
		body, _ := json.Marshal(map[string]string{"username": name, "password": password})
		r, _ := http.NewRequest("POST", p.URL+"/api/v1/auth/login", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Forwarded-For", client)
		return r
	}

	// only reports whether every answer is one of statuses (0: the
	// connection was refused, as a connection cap may do).
	only := func(counts map[int]int, statuses ...int) bool {
		n := 0
		for _, s := range append(statuses, 0) {
			n += counts[s]
		}
		total := 0
		for _, c := range counts {
			total += c
		}
		return n == total
	}

	// 60 simultaneous wrong passwords for one name, from 60 addresses:
	// at most the per-user limit (10) get a password check (401).
	counts := burst(60, func(i int) *http.Request {
		return login("alice", "wrong guess", fmt.Sprintf("198.51.100.%d", i+1))
	})
	t.Logf("60 wrong logins for one name: %v", counts)
	if counts[http.StatusUnauthorized] > 10 || counts[http.StatusUnauthorized] == 0 ||
		!only(counts, http.StatusUnauthorized, http.StatusTooManyRequests, http.StatusServiceUnavailable) {
		t.Errorf("60 simultaneous wrong logins for one name: %v; want 1 to 10 checked (401), the rest 429/503", counts)
	}
	p.healthy()

	// 500 simultaneous logins of different names from different
	// addresses: the limiter lets them all through, the hashing slots
	// keep the memory bounded.
	counts = burst(500, func(i int) *http.Request {
		return login(fmt.Sprintf("user%d", i), "wrong guess", fmt.Sprintf("10.%d.%d.1", i/256, i%256))
	})
	t.Logf("500 logins: %v", counts)
	if counts[http.StatusUnauthorized] == 0 || !only(counts, http.StatusUnauthorized, http.StatusServiceUnavailable) {
		t.Errorf("500 simultaneous logins: %v; want 401 or 503 (busy)", counts)
	}
	hwm := vmHWM(t, p.cmd.Process.Pid)
	t.Logf("server peak RSS %d MiB", hwm>>20)
	if hwm > 500<<20 {
		t.Errorf("server peak RSS %d MiB after a burst of 500 logins, want under 500 MiB", hwm>>20)
	}
	p.healthy()
	p.login("alice", pw) // from 127.0.0.1: neither the name's failures nor the addresses' lock it out for long
}

// vmHWM is the peak resident set size of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 { return procStatus(t, pid, "VmHWM") }

// A user name longer than any user can have is refused before the
// limiter counts it or the log records it.
func TestLoginLongName(t *testing.T) {
	in := newInstance(t, "plugins: []\n")
	in.addUser("alice", pw, false)
	p := in.start()
	long := strings.Repeat("x", 100<<10)
	for range 40 { // more than the per-address limit
		if status, code, _ := p.loginStatus(long, "wrong guess"); status != http.StatusBadRequest || code != "bad_request" {
			t.Fatalf("a 100 KB user name: %d %s, want 400 bad_request", status, code)
		}
	}
	p.login("alice", pw)
	if status, _, _ := p.loginStatus(strings.Repeat("y", 65), "wrong guess"); status != http.StatusBadRequest {
		t.Fatalf("a 65-byte user name: %d, want 400", status)
	}
	if status, _, _ := p.loginStatus(strings.Repeat("y", 64), "wrong guess"); status != http.StatusUnauthorized {
		t.Fatalf("a 64-byte user name: %d, want 401", status)
	}
	log, err := os.ReadFile(in.config().LogFile())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(log, []byte(strings.Repeat("x", 100))) || len(log) > 64<<10 {
		t.Fatalf("the log holds the long names (%d bytes)", len(log))
	}
}

// Behind a trusted proxy each client has its own failure count; a
// client that is not a trusted proxy cannot choose its address with
// X-Forwarded-For.
func TestTrustedProxies(t *testing.T) {
	in := newInstance(t, "plugins: []\ntrusted_proxies: [\"127.0.0.0/8\"]\n")
	in.addUser("alice", pw, false)
	p := in.start()
	// One client uses up its address's 30 failures over many names.
	var last int
	for i := 0; i < 40 && last != http.StatusTooManyRequests; i++ {
		last, _, _ = p.loginStatus(fmt.Sprintf("nobody%d", i), "wrong guess", "X-Forwarded-For", "192.0.2.66, 203.0.113.7")
	}
	if last != http.StatusTooManyRequests {
		t.Fatalf("the client's address was never limited: last %d", last)
	}
	// The left-most entry is the client's own claim: it does not count.
	if status, _, _ := p.loginStatus("alice", pw, "X-Forwarded-For", "203.0.113.8, 203.0.113.7"); status != http.StatusTooManyRequests {
		t.Fatalf("a client that prepends an address escapes the limit: %d", status)
	}
	// Another client of the same proxy logs in.
	if status, _, _ := p.loginStatus("alice", pw, "X-Forwarded-For", "203.0.113.8"); status != http.StatusOK {
		t.Fatalf("another client behind the proxy: %d, want 200", status)
	}
	if status, _, _ := p.loginStatus("alice", pw, "X-Forwarded-For", "203.0.113.8, 127.0.0.5"); status != http.StatusOK {
		t.Fatalf("another client behind two proxies: %d, want 200", status)
	}
}

// The peer is not a trusted proxy: X-Forwarded-For is ignored.
func TestUntrustedForwardedFor(t *testing.T) {
	in := newInstance(t, "plugins: []\n")
	in.addUser("alice", pw, false)
	p := in.start()
	var last int
	for i := 0; i < 40 && last != http.StatusTooManyRequests; i++ {
		last, _, _ = p.loginStatus(fmt.Sprintf("nobody%d", i), "wrong guess", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1))
	}
	if last != http.StatusTooManyRequests {
		t.Fatalf("X-Forwarded-For from an untrusted peer spread the failures over many addresses: last %d", last)
	}
}

// An unreachable directory is the server's problem: 503, not 500, and
// not a failed login.
func TestLDAPUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	in := newInstance(t, fmt.Sprintf("  ldap:\n    url: ldap://%s\n    bind_dn: uid={username},ou=people,dc=example,dc=org\n", addr))
	in.addUser("alice", pw, false)
	p := in.start()
	for range 12 { // more than the per-user limit: these are not failures
		if status, code, ra := p.loginStatus("carol", "ldap password 1"); status != http.StatusServiceUnavailable || code != "ldap_unavailable" || ra == "" {
			t.Fatalf("login with the directory down: %d %s (Retry-After %q), want 503 ldap_unavailable", status, code, ra)
		}
	}
	p.login("alice", pw)
}

// Guessing at a name from one address keeps the name's slowdown going,
// paced to end each time the slowdown does; meanwhile its owner, from
// another address, signs in with the right password every few moments
// and gets in every time, while the guesses stay slowed down. (The
// limits are the defaults scaled down 20 times: 10 free failures, then
// 50 ms doubling to 3 s.)
func TestLoginOwnerDuringGuessing(t *testing.T) {
	in := newInstance(t, "  login_limits: {user_failures: 10, user_delay: 50ms, max_user_delay: 3s, address_failures: 30, window: 15m}\n"+
		"plugins: []\ntrusted_proxies: [\"127.0.0.0/8\"]\n")
	in.addUser("alice", pw, false)
	p := in.start()
	const attacker, owner = "198.51.100.66", "192.0.2.10"
	const delay = 50 * time.Millisecond
	done, slowed, quit := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer func() { close(quit); <-done }() // the guesser ends before the server
	var admitted []time.Time               // the guesses that were checked (401)
	refused := 0
	go func() {
		defer close(done)
		for len(admitted) < 19 {
			select {
			case <-quit:
				return
			default:
			}
			status, code, ra := p.loginStatus("alice", "wrong guess", "X-Forwarded-For", attacker)
			switch {
			case status == http.StatusUnauthorized:
				if admitted = append(admitted, time.Now()); len(admitted) == 10 {
					close(slowed)
				}
			case status == http.StatusTooManyRequests && ra != "":
				refused++
				time.Sleep(5 * time.Millisecond) // polls for the slowdown's end
			default:
				t.Errorf("guess: %d %s (Retry-After %q)", status, code, ra)
				return
			}
		}
	}()
	// The owner signs in during the slowdown.
	select {
	case <-slowed:
	case <-done:
	}
	signins := 0
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		case <-time.After(100 * time.Millisecond):
		}
		if status, code, ra := p.loginStatus("alice", pw, "X-Forwarded-For", owner); status != http.StatusOK {
			t.Errorf("sign-in %d of the owner, from another address, during the slowdown: %d %s (Retry-After %s), want 200", signins+1, status, code, ra)
			return
		}
		signins++
	}
	if t.Failed() {
		return
	}
	// The guesses beyond the free ones came one slowdown apart, and
	// the owner's sign-ins did not start the guesser over.
	for i := 10; i < len(admitted); i++ {
		want := min(delay<<(i-10), 3*time.Second)
		// Less a little: the times are the answers' arrivals here.
		if gap := admitted[i].Sub(admitted[i-1]); gap < want*9/10 {
			t.Errorf("guess %d came %v after the one before, want at least %v: guesses are not slowed down", i+1, gap, want)
		}
	}
	if refused == 0 || signins < 10 {
		t.Fatalf("%d guesses refused, %d sign-ins: the test did not exercise the slowdown", refused, signins)
	}
}
