package mcp

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/egress/egresstest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// fetchServer builds testdata/fetchserver, an MCP server of our own
// whose tool fetch GETs a URL through the proxy of its environment.
func fetchServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fetchserver")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/fetchserver").CombinedOutput(); err != nil {
		t.Fatalf("building testdata/fetchserver: %v\n%s", err, out)
	}
	return bin
}

// egressSite is an HTTPS server on 127.0.0.1 for allowed.test and
// other.test, which the test resolver maps there: / answers a greeting,
// /big 1 MiB.
func egressSite(t *testing.T) (*egresstest.TLSServer, egresstest.Resolver) {
	t.Helper()
	srv := egresstest.NewTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(make([]byte, 1<<20))
			return
		}
		w.Write([]byte("hello from " + r.Host))
	}), "allowed.test", "other.test")
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	return srv, egresstest.Resolver{"allowed.test": lo, "other.test": lo}
}

// fetcher starts a manager with the fetch server and returns its tool.
func fetcher(t *testing.T, o Options, c ServerConfig) (*Manager, agentcore.Tool) {
	t.Helper()
	o.Servers = []ServerConfig{c}
	m := newManager(t, o)
	f := toolsByName(t.Context(), m)["mcp__fetch__fetch"]
	if f == nil {
		t.Fatalf("no fetch tool; status %+v", m.Status())
	}
	return m, f
}

// TestEgressAllowlist: a server with egress_allowlist [allowed.test]
// reaches allowed.test through the egress proxy (HTTPS via CONNECT),
// and nothing else: another name, an IP literal (not a loopback one:
// Go's HTTP client never proxies those); each attempt is counted
// in its status and passed to Options.OnEgress. Without the list it
// has no network at all.
func TestEgressAllowlist(t *testing.T) {
	requireSandbox(t)
	bin := fetchServer(t)
	srv, res := egressSite(t)
	port := strconv.Itoa(srv.Port())
	var mu sync.Mutex
	var events []egress.Event
	cfg := ServerConfig{Name: "fetch", Command: bin, Env: map[string]string{"FETCHSERVER_CA": string(srv.CAPEM)}, AutoApprove: []string{"fetch"}}
	withList := cfg
	withList.EgressAllowlist = []string{"allowed.test"}
	m, fetch := fetcher(t, Options{Sandbox: sandboxkit.Settings{EgressResolver: egresstest.AllowLoopback(res)}, OnEgress: func(e egress.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}, withList)
	for _, tc := range []struct{ url, want string }{
		{"https://allowed.test:" + port + "/", "status 200, 29 bytes: hello from allowed.test:" + port},
		{"https://allowed.test:" + port + "/big", "status 200, 1048576 bytes"},
		{"https://other.test:" + port + "/", "fetch failed"},
		{"https://192.0.2.1:" + port + "/", "fetch failed"},
	} {
		if out, err := call(t.Context(), fetch, map[string]string{"url": tc.url}); err != nil || !strings.HasPrefix(out, tc.want) {
			t.Errorf("with the allow-list, fetch %s = %q, %v; want %q", tc.url, out, err, tc.want)
		}
	}
	// An attempt is reported when its connection ends (the server keeps
	// none alive), which may be after the fetch returned: in any order.
	// The counters and the events are reported one after the other: wait
	// for both.
	refusedEvents := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var hosts []string
		for _, e := range events {
			if e.Verdict == egress.Refused {
				hosts = append(hosts, e.Host)
			}
		}
		return hosts
	}
	var st Status
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		st = m.Status()[0]
		if n := len(refusedEvents()); st.EgressAttempts[egress.Allowed] < 2 || st.EgressAttempts[egress.Refused] < 2 || n < 2 {
			return fmt.Errorf("status %+v and %d refused events, want 2 allowed and 2 refused attempts", st, n)
		}
		return nil
	})
	if st.EgressAllowlist[0] != "allowed.test" || st.EgressAttempts[egress.Allowed] != 2 || st.EgressAttempts[egress.Refused] != 2 {
		t.Errorf("status = %+v, want 2 allowed and 2 refused attempts", st)
	}
	refused := refusedEvents()
	slices.Sort(refused)
	if strings.Join(refused, " ") != "192.0.2.1 other.test" {
		t.Errorf("refused events for %q, want other.test and 192.0.2.1", refused)
	}
	m.Close()

	m, fetch = fetcher(t, Options{Sandbox: sandboxkit.Settings{EgressResolver: egresstest.AllowLoopback(res)}}, cfg)
	for _, u := range []string{"https://allowed.test:" + port + "/", "https://127.0.0.1:" + port + "/"} {
		if out, err := call(t.Context(), fetch, map[string]string{"url": u}); err != nil || !strings.HasPrefix(out, "fetch failed") {
			t.Errorf("without the allow-list, fetch %s = %q, %v; want no network", u, out, err)
		}
	}
	if st := m.Status()[0]; st.EgressAllowlist != nil || st.EgressAttempts != nil {
		t.Errorf("status without the allow-list = %+v", st)
	}
}

// TestEgressCaps: the caps of Options.Sandbox.EgressCaps (sandbox.egress in
// config.yaml) hold through the server's proxy: with 64 KiB of bytes,
// the 1 MiB download TestEgressAllowlist makes is cut.
func TestEgressCaps(t *testing.T) {
	requireSandbox(t)
	bin := fetchServer(t)
	srv, res := egressSite(t)
	_, fetch := fetcher(t, Options{Sandbox: sandboxkit.Settings{EgressResolver: egresstest.AllowLoopback(res), EgressCaps: egress.Caps{MaxBytes: 64 << 10}}},
		ServerConfig{Name: "fetch", Command: bin, Env: map[string]string{"FETCHSERVER_CA": string(srv.CAPEM)}, AutoApprove: []string{"fetch"}, EgressAllowlist: []string{"allowed.test"}})
	u := "https://allowed.test:" + strconv.Itoa(srv.Port()) + "/big"
	out, err := call(t.Context(), fetch, map[string]string{"url": u})
	if err != nil || !strings.HasPrefix(out, "fetch failed") {
		t.Errorf("fetch of 1 MiB with a cap of 64 KiB = %q, %v; want it cut", out, err)
	}
	// Spent: the next connection is refused.
	if out, err := call(t.Context(), fetch, map[string]string{"url": u}); err != nil || !strings.HasPrefix(out, "fetch failed") {
		t.Errorf("fetch after the budget was spent = %q, %v", out, err)
	}
}

// TestEgressProxyDownFailsClosed: when the proxy cannot start (its
// socket cannot be bound), the server is not started (in particular not
// without its proxy, and nothing runs on the host: a marker stays
// absent) and its tool says why, with egress.ErrProxyDown.
func TestEgressProxyDownFailsClosed(t *testing.T) {
	requireSandbox(t)
	marker := filepath.Join(t.TempDir(), "ran")
	// A temp dir so deep that no UNIX socket can be bound in it: the
	// sandbox itself can start, its proxy cannot.
	tmp := filepath.Join(t.TempDir(), strings.Repeat("d", 110))
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	m := newManager(t, Options{Servers: []ServerConfig{{Name: "marker", Command: "/bin/sh", Args: []string{"-c", "touch " + marker}, EgressAllowlist: []string{"allowed.test"}}}})
	tools := m.Tools(t.Context())
	if len(tools) != 1 || tools[0].Spec().Name != "mcp__marker" || !strings.Contains(tools[0].Spec().Description, "egress proxy") {
		t.Fatalf("tools = %v (%q)", tools, tools[0].Spec().Description)
	}
	_, err := tools[0].Run(t.Context(), &agentcore.Call{Name: "mcp__marker"})
	if !errors.Is(err, egress.ErrProxyDown) || !strings.Contains(err.Error(), "nothing was run") || strings.Contains(err.Error(), "ddd") {
		t.Errorf("call = %v, want egress.ErrProxyDown, naming no path", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the server ran: %v", err)
	}
	if st := m.Status()[0]; st.State != StateStopped || !strings.Contains(st.LastError, "egress proxy") {
		t.Errorf("status = %+v", st)
	}
}
