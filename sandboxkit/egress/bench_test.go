package egress_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/egress/egresstest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// benchPath is the whole way a sandboxed client goes: TCP to the
// bridge (in-process here, on 127.0.0.1:0), which hands the connection
// over on the proxy's UNIX socket, then the proxy's TCP connection to
// the server. relayBridge is the same way with a bare relay in the
// proxy's place (egresstest.Relay).
type benchPath struct {
	server, bridge, relayBridge string
}

// The ways a benchmark's client reaches the server.
const (
	viaDirect = iota
	viaRelay
	viaProxy
)

func newBenchPath(b *testing.B, serve func(net.Conn)) *benchPath {
	b.Helper()
	port := sandboxtest.ServeTCP(b, "127.0.0.1:0", serve)
	server := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := egress.Listen(filepath.Join(b.TempDir(), "egress.sock"), egress.Options{
		Allow: []string{"allowed.test"}, Resolver: egresstest.AllowLoopback(egresstest.Resolver{"allowed.test": loopback}),
		Caps: egress.Caps{MaxBytes: 1 << 40}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return &benchPath{server: server, bridge: serveBridge(b, p.Path()),
		relayBridge: serveBridge(b, serveRelay(b, server))}
}

// serveBridge runs a bridge to the UNIX socket at path and returns its
// TCP address.
func serveBridge(b *testing.B, path string) string {
	b.Helper()
	br, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	go egress.Bridge(br.(*net.TCPListener), path)
	return br.Addr().String()
}

// serveRelay serves an egresstest.Relay to server and returns its
// socket's path.
func serveRelay(b *testing.B, server string) string {
	b.Helper()
	r, err := egresstest.ServeRelay(filepath.Join(b.TempDir(), "relay.sock"), server)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r.Path()
}

// tunnel opens a connection to the server, directly, through a bridge
// and the relay, or through a bridge and the proxy.
func (bp *benchPath) tunnel(b *testing.B, via int) net.Conn {
	addr := [...]string{viaDirect: bp.server, viaRelay: bp.relayBridge, viaProxy: bp.bridge}[via]
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	if via == viaDirect {
		return c
	}
	_, port, _ := net.SplitHostPort(bp.server)
	fmt.Fprintf(c, "CONNECT allowed.test:%s HTTP/1.1\r\nHost: allowed.test\r\n\r\n", port)
	// Read the answer byte by byte: nothing of the tunnel is buffered.
	resp, err := http.ReadResponse(bufio.NewReaderSize(oneByte{c}, 16), nil)
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("CONNECT: %v %v", resp, err)
	}
	return c
}

type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:1]) }

// BenchmarkEgressDownload downloads 100 MB from a server on loopback
// directly, through a bridge and the bare relay, and through a bridge
// and the proxy, the three paired in each iteration; it reports the
// three rates and the proxy's ratio to the relay (target ≥ 0.9), and to
// direct. Direct is not the target: both other paths relay over a second
// loopback connection, which on a machine of few cores costs a quarter
// or more of direct's rate whatever the relay does.
func BenchmarkEgressDownload(b *testing.B) {
	const size = 100 << 20
	block := make([]byte, 1<<20)
	bp := newBenchPath(b, func(c net.Conn) {
		for range size / len(block) {
			if _, err := c.Write(block); err != nil {
				return
			}
		}
	})
	var took, cpu [3]time.Duration
	order := []int{viaDirect, viaRelay, viaProxy}
	for b.Loop() {
		// Relay and proxy take turns going first.
		order[1], order[2] = order[2], order[1]
		for _, via := range order {
			c0, t0 := processCPU(b), time.Now()
			c := bp.tunnel(b, via)
			n, err := io.Copy(io.Discard, c)
			c.Close()
			if err != nil || n != size {
				b.Fatalf("read %d bytes, %v", n, err)
			}
			took[via] += time.Since(t0)
			cpu[via] += processCPU(b) - c0
		}
	}
	mb := float64(size) / 1e6 * float64(b.N)
	b.ReportMetric(mb/took[viaDirect].Seconds(), "direct-MB/s")
	b.ReportMetric(mb/took[viaRelay].Seconds(), "relay-MB/s")
	b.ReportMetric(mb/took[viaProxy].Seconds(), "proxy-MB/s")
	b.ReportMetric(took[viaRelay].Seconds()/took[viaProxy].Seconds(), "ratio")
	b.ReportMetric(took[viaDirect].Seconds()/took[viaProxy].Seconds(), "ratio-direct")
	// Server, bridge, relay or proxy and client all run in this process:
	// its CPU time is the whole path's, which a loaded machine does not
	// stretch as it does the rates.
	for via, name := range [...]string{"direct", "relay", "proxy"} {
		b.ReportMetric(float64(cpu[via].Milliseconds())/float64(b.N), name+"-cpu-ms")
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEgressConnect measures what the bridge and the proxy add to
// a new connection (connect, then a one-byte answer), paired in each
// iteration; it reports the p50 and p99 of the difference (target p50
// ≤ 1 ms).
func BenchmarkEgressConnect(b *testing.B) {
	bp := newBenchPath(b, func(c net.Conn) { c.Write([]byte{1}) })
	var added []time.Duration
	one := make([]byte, 1)
	for b.Loop() {
		var d [2]time.Duration
		for i, via := range []int{viaDirect, viaProxy} {
			t0 := time.Now()
			c := bp.tunnel(b, via)
			if _, err := io.ReadFull(c, one); err != nil {
				b.Fatal(err)
			}
			d[i] = time.Since(t0)
			c.Close()
		}
		added = append(added, d[1]-d[0])
	}
	slices.Sort(added)
	b.ReportMetric(float64(added[len(added)/2].Microseconds())/1000, "p50-added-ms")
	b.ReportMetric(float64(added[len(added)*99/100].Microseconds())/1000, "p99-added-ms")
}
