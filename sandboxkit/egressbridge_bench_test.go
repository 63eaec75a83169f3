package sandboxkit

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/egress/egresstest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// The ways curl in a sandbox reaches the server.
const (
	viaDirect = iota // ShareNet, straight to the server
	viaRelay         // Egress, the bridge to a bare relay (egresstest.Relay)
	viaProxy         // Egress, the bridge to the proxy
)

// BenchmarkEgressCurlDownload is the 100 MB download as a sandboxed
// client makes it: curl (a process of its own, as in production) in a
// Session with Egress, through the bridge and the proxy (CONNECT); the
// same through the bridge and a bare relay on the host in the proxy's
// place (egresstest.Relay: the same topology, no policy); and the same curl
// in a Session with ShareNet straight to the server. All three pay the
// same sandbox (seccomp included); only the way out differs. They are
// paired in each iteration, relay and proxy taking turns going first.
// The times are curl's own (time_total, connect and CONNECT included):
// starting a command in a session is not counted. It reports the three
// rates, the proxy's ratio to the relay (total times; target ≥ 0.9),
// the median of the iterations' ratios, the ratio to direct (for
// reference: both other ways relay over a second loopback connection),
// and the CPU time of this process (server, and relay or proxy) per
// download; curl's own is not counted, it reads the same bytes from one
// TCP socket on every way.
func BenchmarkEgressCurlDownload(b *testing.B) {
	requireSandbox(b)
	if _, err := exec.LookPath("curl"); err != nil {
		b.Fatal("curl is needed on the host (and so in the sandbox's /usr)")
	}
	const size = 100 << 20
	block := make([]byte, 1<<20) // only read from
	port := sandboxtest.ServeTCP(b, "127.0.0.1:0", func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", size)
		for range size / len(block) {
			if _, err := c.Write(block); err != nil {
				return
			}
		}
	})
	server := fmt.Sprintf("127.0.0.1:%d", port)
	p := sessionPolicy(b)
	p.Egress = &egress.Options{Allow: []string{"allowed.test"},
		// Test only: allowed.test may resolve to 127.0.0.1.
		Resolver: egresstest.AllowLoopback(egresstest.Resolver{"allowed.test": {netip.MustParseAddr("127.0.0.1")}}),
		Caps:     egress.Caps{MaxBytes: 1 << 40}}
	var sessions [3]*Session
	sessions[viaProxy] = startSession(b, p, SessionOptions{})
	rp := sessionPolicy(b) // a workspace of its own
	rp.Egress = p.Egress
	var relay *egresstest.Relay
	sessions[viaRelay], relay = startRelaySession(b, rp, server)
	hp := sessionPolicy(b)
	hp.ShareNet = true
	sessions[viaDirect] = startSession(b, hp, SessionOptions{})

	get := func(via int) time.Duration {
		argv := []string{"curl", "-sS", "-o", "/dev/null", "-w", "%{size_download} %{time_total}"}
		if via == viaDirect {
			argv = append(argv, "--noproxy", "*", "http://"+server+"/")
		} else {
			// -p: a CONNECT tunnel, through http_proxy (the bridge).
			argv = append(argv, "-p", fmt.Sprintf("http://allowed.test:%d/", port))
		}
		var out bytes.Buffer
		c := sessions[via].Command(b.Context(), argv...)
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			b.Fatalf("curl (way %d): %v\n%s", via, err, out.String())
		}
		var n int64
		var secs float64
		if _, err := fmt.Sscan(out.String(), &n, &secs); err != nil || n != size {
			b.Fatalf("curl (way %d): %q, want %d bytes", via, out.String(), size)
		}
		return time.Duration(secs * float64(time.Second))
	}
	var took, cpu [3]time.Duration
	var ratios []float64
	order := []int{viaDirect, viaRelay, viaProxy}
	for b.Loop() {
		order[1], order[2] = order[2], order[1]
		var d [3]time.Duration
		for _, via := range order {
			c0 := processCPU(b)
			d[via] = get(via)
			cpu[via] += processCPU(b) - c0
			took[via] += d[via]
		}
		ratios = append(ratios, d[viaRelay].Seconds()/d[viaProxy].Seconds())
	}
	if n := relay.Tunnels(); n != int64(len(ratios)) {
		b.Fatalf("the relay answered %d CONNECTs, want %d", n, len(ratios))
	}
	slices.Sort(ratios)
	mb := float64(size) / 1e6 * float64(len(ratios))
	b.ReportMetric(mb/took[viaDirect].Seconds(), "direct-MB/s")
	b.ReportMetric(mb/took[viaRelay].Seconds(), "relay-MB/s")
	b.ReportMetric(mb/took[viaProxy].Seconds(), "proxy-MB/s")
	b.ReportMetric(took[viaRelay].Seconds()/took[viaProxy].Seconds(), "ratio")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
	b.ReportMetric(took[viaDirect].Seconds()/took[viaProxy].Seconds(), "ratio-direct")
	for via, name := range [...]string{"direct", "relay", "proxy"} {
		b.ReportMetric(float64(cpu[via].Milliseconds())/float64(len(ratios)), name+"-cpu-ms")
	}
}

// startRelaySession starts a Session under p whose Egress socket is a
// egresstest.Relay to server in place of a proxy: the sandbox, its bridge and
// the socket's bind are those of any Session with Egress.
func startRelaySession(b *testing.B, p *Policy, server string) (*Session, *egresstest.Relay) {
	b.Helper()
	var r *egresstest.Relay
	listen := listenEgress
	defer func() { listenEgress = listen }()
	listenEgress = func(path string, _ egress.Options) (egressListener, error) {
		var err error
		r, err = egresstest.ServeRelay(path, server)
		return r, err
	}
	s := startSession(b, p, SessionOptions{})
	if r == nil {
		b.Fatal("the session did not start a relay")
	}
	return s, r
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
