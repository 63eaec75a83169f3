package sandboxkit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/egress/egresstest"
	"github.com/codumentor/codumentor/sandboxkit/internal/invocation"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
)

// egressFixture is a TLS server for allowed.test, other.test and
// meta.test on 127.0.0.1, a policy whose allow-list is allowed.test and
// meta.test (which resolves to the metadata address), with the test CA
// at /workspace/ca.pem, and the events of its proxy.
type egressFixture struct {
	p      *Policy
	port   int
	ev     *egresstest.Events
	hostIP string // a non-loopback address of this host
}

func newEgressFixture(t *testing.T) *egressFixture {
	t.Helper()
	requireSandbox(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed on the host (and so in the sandbox's /usr)")
	}
	var srv *egresstest.TLSServer
	srv = egresstest.NewTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, fmt.Sprintf("https://other.test:%d/", srv.Port()), http.StatusFound)
			return
		}
		io.WriteString(w, "hello from "+r.Host+"\n")
	}), "allowed.test", "other.test", "meta.test")
	p := sessionPolicy(t)
	if err := os.WriteFile(filepath.Join(p.Workspace.Lower, "ca.pem"), srv.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	f := &egressFixture{p: p, port: srv.Port(), ev: &egresstest.Events{}, hostIP: hostAddr(t)}
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	p.Egress = &egress.Options{
		Allow: []string{"allowed.test", "meta.test"},
		// Test only: the names above may resolve to 127.0.0.1.
		Resolver: egresstest.AllowLoopback(egresstest.Resolver{"allowed.test": lo, "other.test": lo, "meta.test": {netip.MustParseAddr("169.254.169.254")}}),
		OnEvent:  f.ev.Add,
	}
	return f
}

// hostAddr is an address of this host that is not loopback.
func hostAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Fatal("this host has no non-loopback IPv4 address")
	return ""
}

// refused finds the refused event for host with proto.
func (f *egressFixture) refused(t *testing.T, host, proto, reason string) {
	t.Helper()
	for _, e := range f.ev.All() {
		if e.Host == host && e.Proto == proto && e.Verdict == egress.Refused && strings.Contains(e.Reason, reason) {
			return
		}
	}
	t.Errorf("no refused %s event for %s with %q; events:\n%s", proto, host, reason, f.ev)
}

// TestEgressRun is the must-show of the egress allow-list, in a one-shot
// sandbox: only allowed.test gets through, every other way is refused
// (with an event) or has no route at all.
func TestEgressRun(t *testing.T) {
	f := newEgressFixture(t)
	port, host := f.port, f.hostIP
	script := fmt.Sprintf(`
c() { name=$1; shift; out=$(curl -sS --max-time 10 --cacert /workspace/ca.pem "$@" 2>&1); echo "$name=$? $out"; }
c allowed https://allowed.test:%[1]d/
c other -f http://other.test:%[1]d/
c literal https://127.0.0.1:%[1]d/
c public https://93.184.216.34/
c redirect -L https://allowed.test:%[1]d/redirect
c meta https://meta.test:%[1]d/
c hostproxy -f http://%[2]s:%[1]d/
c rawhost --noproxy '*' http://%[2]s:%[1]d/
c rawlo --noproxy '*' https://127.0.0.1:%[1]d/
ip -o link | awk '{print "iplink=" $2}'
env | grep -i _proxy= | sort | tr '\n' ' '
`, port, host)
	out, err := sh(t, f.p, script)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log(out)
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			lines[k] = v
		}
	}
	if got := lines["allowed"]; got != fmt.Sprintf("0 hello from allowed.test:%d", port) {
		t.Errorf("curl https://allowed.test: %q", got)
	}
	for _, k := range []string{"other", "literal", "public", "redirect", "meta", "hostproxy", "rawhost", "rawlo"} {
		if strings.HasPrefix(lines[k], "0 ") {
			t.Errorf("%s got through: %q", k, lines[k])
		}
	}
	// No /sys inside: ip (iproute2, in /usr) asks the kernel.
	if lines["iplink"] != "lo:" {
		t.Errorf("network interfaces inside: ip link %q; want only lo", lines["iplink"])
	}
	if e, ok := f.ev.Find("allowed.test", egress.Allowed); !ok || e.Port != port || e.Received == 0 || e.Addr != "127.0.0.1" {
		t.Errorf("allowed event %+v; events:\n%s", e, f.ev)
	}
	f.refused(t, "other.test", "http", "not in the allow-list")
	f.refused(t, "127.0.0.1", "connect", "not in the allow-list")
	f.refused(t, "93.184.216.34", "connect", "not in the allow-list")
	f.refused(t, "other.test", "connect", "not in the allow-list") // the redirect
	f.refused(t, "meta.test", "connect", "169.254.169.254")
	f.refused(t, host, "http", "not in the allow-list")
}

// TestEgressRunDescriptors: the command of a one-shot sandbox with egress
// inherits no descriptor of the bridge's launcher (this program, opened
// on the host: readlink names its host path), and cannot ptrace or read
// the bridge.
func TestEgressRunDescriptors(t *testing.T) {
	f := newEgressFixture(t)
	out, err := sh(t, f.p, `for fd in /proc/$$/fd/*; do echo "fd $(readlink $fd)"; done
for p in /proc/[0-9]*; do
	case "$(cat $p/cmdline 2>/dev/null | tr '\0' ' ')" in
	"/proc/self/exe --sandboxkit-egress serve ") echo bridge-seen; ls $p/fd/ >/dev/null 2>&1 && echo bridge-fds-readable; head -c 1 $p/exe >/dev/null 2>&1 && echo bridge-exe-readable;;
	esac
done
echo done`)
	if err != nil || !strings.Contains(out, "done") {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "bridge-seen") {
		t.Errorf("no bridge process found:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		// Its stdin, its output pipes, and copies the shell makes of them.
		if target, ok := strings.CutPrefix(l, "fd "); ok && target != "/dev/null" && !strings.HasPrefix(target, "pipe:") {
			t.Errorf("the command inherited a descriptor of %s:\n%s", target, out)
		}
	}
	for _, bad := range []string{"bridge-fds-readable", "bridge-exe-readable"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s:\n%s", bad, out)
		}
	}
}

// TestEgressProxyDies: once the proxy is gone, mid-command, nothing gets
// out, and the command's result says why.
func TestEgressProxyDies(t *testing.T) {
	f := newEgressFixture(t)
	script := fmt.Sprintf(`
curl -sS --max-time 10 --cacert /workspace/ca.pem https://allowed.test:%[1]d/ && echo first-ok
read line
curl -sS --max-time 5 --cacert /workspace/ca.pem https://allowed.test:%[1]d/ && echo second-ok
curl -sS --max-time 5 --noproxy '*' http://%[2]s:%[1]d/ && echo direct-ok
echo done
`, f.port, f.hostIP)

	t.Run("run", func(t *testing.T) {
		c := Command(t.Context(), f.p, "sh", "-c", script)
		stdin, w := io.Pipe()
		c.Stdin = stdin
		pr, pw := io.Pipe()
		c.Stdout, c.Stderr = pw, pw
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		done := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(pr)
			killed := false
			for sc.Scan() {
				out.WriteString(sc.Text() + "\n")
				if sc.Text() == "first-ok" && !killed {
					killed = true
					c.egress.px.Close()
					w.Write([]byte("go\n"))
				}
			}
			done <- nil
		}()
		err := c.Wait()
		pw.Close()
		<-done
		checkAfterDeath(t, out.String(), err)
	})
	t.Run("session", func(t *testing.T) {
		s := startSession(t, f.p, SessionOptions{})
		out, _, err := inSession(t, s, fmt.Sprintf("curl -sS --max-time 10 --cacert /workspace/ca.pem https://allowed.test:%d/ && echo first-ok", f.port))
		if err != nil || !strings.Contains(out, "first-ok") {
			t.Fatalf("before: %v\n%s", err, out)
		}
		s.egress.px.Close()
		out, _, err = inSession(t, s, "echo go | sh -c "+shellQuote(script[strings.Index(script, "read line"):]))
		checkAfterDeath(t, "first-ok\n"+out, err)
		if out, _, _ := inSession(t, s, "ip -o link | awk '{print $2}'"); strings.TrimSpace(out) != "lo:" {
			t.Errorf("ip link after the proxy died: %q", out)
		}
	})
}

func checkAfterDeath(t *testing.T, out string, err error) {
	t.Helper()
	if !strings.Contains(out, "first-ok") || !strings.Contains(out, "done") {
		t.Fatalf("the script did not run through: %v\n%s", err, out)
	}
	if strings.Contains(out, "second-ok") || strings.Contains(out, "direct-ok") {
		t.Errorf("a connection got out after the proxy died:\n%s", out)
	}
	if !errors.Is(err, egress.ErrProxyDown) {
		t.Errorf("Wait = %v, want an error wrapping egress.ErrProxyDown", err)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestEgressPolicy: Egress is bound and announced as the argv shows, and
// refused with the host's network.
func TestEgressPolicy(t *testing.T) {
	p := &Policy{Egress: &egress.Options{Allow: []string{"allowed.test"}}}
	l, err := p.build([]string{"true"}, buildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(l.Args, " ")
	for _, want := range []string{"--unshare-all", "--ro-bind " + invocation.EgressSocketPlaceholder + " " + supervisor.EgressSocket, "--setenv HTTPS_PROXY http://127.0.0.1:3128", "--setenv ALL_PROXY socks5h://127.0.0.1:3128", "--setenv NO_PROXY "} {
		if !strings.Contains(args, want) {
			t.Errorf("argv lacks %q:\n%s", want, args)
		}
	}
	if strings.Contains(args, "--share-net") {
		t.Errorf("argv shares the network:\n%s", args)
	}
	for _, bad := range []*Policy{
		{ShareNet: true, Egress: &egress.Options{}},
		{HostView: true, Egress: &egress.Options{}},
		{Egress: &egress.Options{Allow: []string{"*.com"}}},
	} {
		if _, err := bad.build([]string{"true"}, buildOptions{}); err == nil {
			t.Errorf("Build(%+v) succeeded", bad)
		}
	}
}

// TestEgressNeedsOwnNetwork: a Policy with Egress keeps its own network
// namespace: with ShareNet or HostView it does not build (the proxy is
// the way out of a sandbox without the host network), alone it binds the
// proxy's socket in and points the *_PROXY variables at the bridge.
func TestEgressNeedsOwnNetwork(t *testing.T) {
	eg := &egress.Options{Allow: []string{"registry.npmjs.org"}}
	for _, tc := range []struct {
		name string
		set  func(*Policy)
		ok   bool
	}{
		{"alone", func(*Policy) {}, true},
		{"share-net", func(p *Policy) { p.ShareNet = true }, false},
		{"host-view", func(p *Policy) { p.HostView = true }, false},
	} {
		p, err := Settings{}.Workspace("test", &Workspace{Lower: "/l", Upper: "/u", Work: "/w"})
		if err != nil {
			t.Fatal(err)
		}
		p.Egress = eg
		tc.set(p)
		l, err := p.build([]string{"true"}, buildOptions{})
		if (err == nil) != tc.ok {
			t.Errorf("%s: Build = %v, want ok=%v", tc.name, err, tc.ok)
			continue
		}
		if tc.ok && (!slices.Contains(l.Args, invocation.EgressSocketPlaceholder) || !slices.Contains(l.Args, "HTTPS_PROXY")) {
			t.Errorf("%s: the argv lacks the proxy's socket or HTTPS_PROXY: %q", tc.name, l.Args)
		}
	}
}

// TestEgressProxyCannotStart: without its proxy, a sandbox with Egress
// does not start at all, and the error says why.
func TestEgressProxyCannotStart(t *testing.T) {
	requireSandbox(t)
	p := sessionPolicy(t)
	p.Egress = &egress.Options{Allow: []string{"allowed.test"}}
	marker := filepath.Join(p.Workspace.Upper, "ran")
	// The proxy's socket dir cannot be made: no tmpfs, a missing TMPDIR.
	defer func(old func() []string) { socketBases = old }(socketBases)
	socketBases = func() []string { return nil }
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	err := Command(t.Context(), p, "touch", "/workspace/ran").Run()
	if !errors.Is(err, egress.ErrProxyDown) || strings.Contains(err.Error(), "/missing") {
		t.Errorf("Run = %v, want egress.ErrProxyDown naming no path", err)
	}
	if s, err := StartSession(t.Context(), p, SessionOptions{}); !errors.Is(err, egress.ErrProxyDown) {
		if s != nil {
			s.Close()
		}
		t.Errorf("StartSession = %v, want egress.ErrProxyDown", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
}
