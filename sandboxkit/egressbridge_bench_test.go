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
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/egress/egresstest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// BenchmarkEgressCurlDownload is the 100 MB download as a sandboxed
// client makes it: curl (a process of its own, as in production) in a
// Session with Egress, through the bridge and the proxy (CONNECT), vs
// the same curl in a Session with ShareNet straight to the same server,
// so that both pay the same sandbox (seccomp included) and only the way
// out differs; paired in each iteration, the order alternating. The
// times are curl's own (time_total, connect and CONNECT included):
// starting a command in a session is not counted. It reports both
// rates, their ratio (total times) and the median of the iterations'
// ratios (target ≥ 0.8).
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
	p := sessionPolicy(b)
	p.Egress = &egress.Options{Allow: []string{"allowed.test"},
		// Test only: allowed.test may resolve to 127.0.0.1.
		Resolver: egresstest.AllowLoopback(egresstest.Resolver{"allowed.test": {netip.MustParseAddr("127.0.0.1")}}),
		Caps:     egress.Caps{MaxBytes: 1 << 40}}
	viaProxy := startSession(b, p, SessionOptions{})
	hp := sessionPolicy(b)
	hp.ShareNet = true
	hostNet := startSession(b, hp, SessionOptions{})

	get := func(proxied bool) time.Duration {
		argv := []string{"curl", "-sS", "-o", "/dev/null", "-w", "%{size_download} %{time_total}"}
		s := hostNet
		if proxied {
			// -p: a CONNECT tunnel, through http_proxy (the bridge).
			s, argv = viaProxy, append(argv, "-p", fmt.Sprintf("http://allowed.test:%d/", port))
		} else {
			argv = append(argv, "--noproxy", "*", fmt.Sprintf("http://127.0.0.1:%d/", port))
		}
		var out bytes.Buffer
		c := s.Command(b.Context(), argv...)
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			b.Fatalf("curl (proxied %v): %v\n%s", proxied, err, out.String())
		}
		var n int64
		var secs float64
		if _, err := fmt.Sscan(out.String(), &n, &secs); err != nil || n != size {
			b.Fatalf("curl (proxied %v): %q, want %d bytes", proxied, out.String(), size)
		}
		return time.Duration(secs * float64(time.Second))
	}
	var direct, proxied time.Duration
	var ratios []float64
	for i := 0; b.Loop(); i++ {
		var d, px time.Duration
		if i%2 == 0 {
			d, px = get(false), get(true)
		} else {
			px, d = get(true), get(false)
		}
		direct += d
		proxied += px
		ratios = append(ratios, d.Seconds()/px.Seconds())
	}
	slices.Sort(ratios)
	mb := float64(size) / 1e6 * float64(len(ratios))
	b.ReportMetric(mb/direct.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/proxied.Seconds(), "proxy-MB/s")
	b.ReportMetric(direct.Seconds()/proxied.Seconds(), "ratio")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
}
