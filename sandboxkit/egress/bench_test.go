package egress_test

import (
	"bufio"
	"fmt"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/egress/egresstest"
)

// benchPath is the whole way a sandboxed client goes: TCP to the
// bridge (in-process here, on 127.0.0.1:0), the proxy's UNIX socket,
// then TCP to the server.
type benchPath struct {
	server, bridge string
}

func newBenchPath(b *testing.B, serve func(net.Conn)) *benchPath {
	b.Helper()
	port := sandboxtest.ServeTCP(b, "127.0.0.1:0", serve)
	p, err := egress.Listen(filepath.Join(b.TempDir(), "egress.sock"), egress.Options{
		Allow: []string{"allowed.test"}, Resolver: egresstest.AllowLoopback(egresstest.Resolver{"allowed.test": loopback}),
		Caps: egress.Caps{MaxBytes: 1 << 40}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	br, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	go egress.Bridge(br.(*net.TCPListener), p.Path())
	return &benchPath{server: fmt.Sprintf("127.0.0.1:%d", port), bridge: br.Addr().String()}
}

// tunnel opens a connection to the server, through the proxy or not.
func (bp *benchPath) tunnel(b *testing.B, proxied bool) net.Conn {
	if !proxied {
		c, err := net.Dial("tcp", bp.server)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	c, err := net.Dial("tcp", bp.bridge)
	if err != nil {
		b.Fatal(err)
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

// BenchmarkEgressDownload downloads 100 MB from a server on loopback,
// directly and through the bridge and the proxy, paired in each
// iteration; it reports both rates and their ratio (target ≥ 0.8).
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
	var direct, proxied time.Duration
	for b.Loop() {
		for _, viaProxy := range []bool{false, true} {
			t0 := time.Now()
			c := bp.tunnel(b, viaProxy)
			n, err := io.Copy(io.Discard, c)
			c.Close()
			if err != nil || n != size {
				b.Fatalf("read %d bytes, %v", n, err)
			}
			if viaProxy {
				proxied += time.Since(t0)
			} else {
				direct += time.Since(t0)
			}
		}
	}
	mb := float64(size) / 1e6 * float64(b.N)
	b.ReportMetric(mb/direct.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/proxied.Seconds(), "proxy-MB/s")
	b.ReportMetric(direct.Seconds()/proxied.Seconds(), "ratio")
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
		for i, viaProxy := range []bool{false, true} {
			t0 := time.Now()
			c := bp.tunnel(b, viaProxy)
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
