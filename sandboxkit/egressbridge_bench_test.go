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
	"slices"
	"sync/atomic"
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
	viaRelay         // Egress, the bridge to a bare relay (benchRelay)
	viaProxy         // Egress, the bridge to the proxy
)

// BenchmarkEgressCurlDownload is the 100 MB download as a sandboxed
// client makes it: curl (a process of its own, as in production) in a
// Session with Egress, through the bridge and the proxy (CONNECT); the
// same through the bridge and a bare relay on the host in the proxy's
// place (benchRelay: the same topology, no policy); and the same curl
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
	var relay *benchRelay
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
	if n := relay.tunnels.Load(); n != int64(len(ratios)) {
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
// benchRelay to server in place of a proxy: the sandbox, its bridge and
// the socket's bind are those of any Session with Egress.
func startRelaySession(b *testing.B, p *Policy, server string) (*Session, *benchRelay) {
	b.Helper()
	var r *benchRelay
	listen := listenEgress
	defer func() { listenEgress = listen }()
	listenEgress = func(path string, _ egress.Options) (egressListener, error) {
		var err error
		r, err = serveRelay(path, server)
		return r, err
	}
	s := startSession(b, p, SessionOptions{})
	if r == nil {
		b.Fatal("the session did not start a relay")
	}
	return s, r
}

// benchRelay is the proxy's topology with none of its policy, the most
// the proxy can do on this path: it takes each client the bridge hands
// over on its UNIX socket (its send buffer sized as the proxy sizes it),
// reads its CONNECT, dials server (whatever was asked), answers 200 and
// splices both ways (io.Copy between two TCP sockets).
type benchRelay struct {
	ln      *net.UnixListener
	server  string
	tunnels atomic.Int64 // CONNECTs answered
}

func serveRelay(path, server string) (*benchRelay, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	r := &benchRelay{ln: ln, server: server}
	go func() {
		for {
			uc, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go r.relay(uc)
		}
	}()
	return r, nil
}

func (r *benchRelay) Path() string { return r.ln.Addr().String() }
func (r *benchRelay) Err() error   { return nil }
func (r *benchRelay) Close() error { return r.ln.Close() }

// relaySendBuffer is the proxy's SO_SNDBUF for a client's socket
// (egress's clientSendBuffer).
const relaySendBuffer = 256 << 10

func (r *benchRelay) relay(uc *net.UnixConn) {
	c, err := receiveHandover(uc)
	uc.Close()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetWriteBuffer(relaySendBuffer)
	// The client sends nothing before the answer: nothing is read ahead.
	if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
		return
	}
	up, err := net.Dial("tcp", r.server)
	if err != nil {
		return
	}
	defer up.Close()
	// Counted before curl can have its answer.
	r.tunnels.Add(1)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(c, up)
	c.CloseWrite()
	<-done
}

// receiveHandover reads the bridge's one message: a byte and the
// client's TCP socket (SCM_RIGHTS).
func receiveHandover(uc *net.UnixConn) (*net.TCPConn, error) {
	oob := make([]byte, syscall.CmsgSpace(4))
	_, oobn, _, _, err := uc.ReadMsgUnix(make([]byte, 1), oob)
	if err != nil {
		return nil, err
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, errors.New("no descriptor in the handover")
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, errors.New("not one descriptor in the handover")
	}
	f := os.NewFile(uintptr(fds[0]), "client")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		conn.Close()
		return nil, errors.New("the handover is not a TCP socket")
	}
	return tc, nil
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
