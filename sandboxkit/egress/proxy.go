package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress/internal/testloopback"

	"github.com/codumentor/codumentor/sandboxkit/egress/internal/handover"
)

// Proxy is a running egress proxy on one UNIX socket, serving one
// sandbox. Its caps (Options) are the sandbox's.
type Proxy struct {
	o     Options
	rules []rule
	res   Resolver
	ln    *net.UnixListener
	path  string
	// loopback allows loopback answers of the resolver (a test's).
	loopback bool

	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{} // connections relaying
	shakes chan struct{} // connections not yet past their request
	budget atomic.Int64  // bytes left
	spent  atomic.Bool   // a connection was cut for the budget

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	done   chan struct{}
	err    error // why it stopped; set before done closes
}

// Listen starts a proxy on a new UNIX socket at path (which must not
// exist; its directory should be reachable by the sandbox's user only).
// Errors wrap ErrProxyDown.
func Listen(path string, o Options) (*Proxy, error) {
	rules, err := parseRules(o.Allow)
	if err != nil {
		return nil, err
	}
	if o.Caps.MaxConns <= 0 {
		o.Caps.MaxConns = DefaultMaxConns
	}
	if o.Caps.MaxBytes <= 0 {
		o.Caps.MaxBytes = DefaultMaxBytes
	}
	if o.Caps.MaxConnDuration <= 0 {
		o.Caps.MaxConnDuration = DefaultMaxConnDuration
	}
	if o.Caps.DialTimeout <= 0 {
		o.Caps.DialTimeout = DefaultDialTimeout
	}
	var res Resolver = net.DefaultResolver
	if o.Resolver != nil {
		res = o.Resolver
	}
	// Errors name no path: they may reach a model or a client.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("%w: cannot listen on its socket: %v", ErrProxyDown, errnoOf(err))
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("%w: cannot restrict its socket: %v", ErrProxyDown, errnoOf(err))
	}
	// A test's resolver (egresstest.AllowLoopback) may map names to
	// servers on 127.0.0.1; nothing else can make one.
	_, loopback := o.Resolver.(testloopback.Marked)
	p := &Proxy{o: o, rules: rules, res: res, ln: ln, path: path, loopback: loopback,
		slots: make(chan struct{}, o.Caps.MaxConns), shakes: make(chan struct{}, 2*o.Caps.MaxConns),
		conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.budget.Store(o.Caps.MaxBytes)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.serve()
	return p, nil
}

// Path is the proxy's socket.
func (p *Proxy) Path() string { return p.path }

// Done is closed when the proxy has stopped (Close, or it failed) and
// every connection through it is cut.
func (p *Proxy) Done() <-chan struct{} { return p.done }

// Err is nil while the proxy runs; afterwards it wraps ErrProxyDown and
// says why it stopped.
func (p *Proxy) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Close stops the proxy and cuts every connection through it.
func (p *Proxy) Close() error {
	p.stop(errors.New("closed"))
	<-p.done
	return nil
}

func (p *Proxy) stop(why error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.err = fmt.Errorf("%w: %v", ErrProxyDown, why)
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.cancel()
	p.ln.Close() // also removes the socket file
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors for a moment: not a reason to leave
				// the sandbox without a way out.
				time.Sleep(50 * time.Millisecond)
				continue
			}
			p.stop(fmt.Errorf("its socket failed: %v", errnoOf(err)))
			break
		}
		if !p.track(c) {
			c.Close()
			break
		}
		select {
		case p.shakes <- struct{}{}:
		default:
			p.untrack(c)
			c.Close()
			p.event(Event{Time: time.Now(), Verdict: Refused, Reason: fmt.Sprintf("too many connections waiting to be read (cap %d)", cap(p.shakes))})
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			defer c.Close()
			p.handle(c)
		}()
	}
	p.wg.Wait()
	close(p.done)
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) event(e Event) {
	if p.o.OnEvent != nil {
		p.o.OnEvent(e)
	}
}

// request is what a client asked for, read from its first bytes.
type request struct {
	proto string
	host  string
	port  int
	// http is a plain HTTP request to forward; nil for a tunnel.
	http *http.Request
	// refuse and accept answer the client in its protocol.
	refuse func(why string)
	accept func() error
}

func (p *Proxy) handle(c net.Conn) {
	start := time.Now()
	c.SetDeadline(start.Add(handshakeTimeout))
	var in io.Reader = c
	if uc, ok := c.(*net.UnixConn); ok {
		tc, first, err := receiveConn(uc)
		switch {
		case err != nil:
			<-p.shakes
			p.event(Event{Time: start, Verdict: Refused, Reason: err.Error(), Duration: time.Since(start)})
			return
		case tc != nil:
			// A bridge's client: served on its own socket from here on.
			uc.Close()
			if !p.track(tc) {
				tc.Close()
				<-p.shakes
				return
			}
			defer p.untrack(tc)
			defer tc.Close()
			// Ignored if it fails: only throughput depends on it.
			tc.SetWriteBuffer(handover.ClientSendBuffer)
			c, in = tc, tc
			c.SetDeadline(start.Add(handshakeTimeout))
		default:
			in = io.MultiReader(bytes.NewReader(first), c)
		}
	}
	// A request's head is bounded: textproto would read a line of any
	// length. The bound goes once the head is read.
	head := &io.LimitedReader{R: in, N: maxRequestHead}
	br := bufio.NewReaderSize(head, 4096)
	var req *request
	var err error
	first, perr := br.Peek(1)
	switch {
	case perr != nil:
		err = noRequest(perr)
	case first[0] == socksVersion:
		req, err = readSocks(c, br)
	default:
		req, err = readHTTP(c, br)
	}
	<-p.shakes
	head.N = math.MaxInt64
	ev := Event{Time: start, Verdict: Refused}
	if req != nil {
		ev.Proto, ev.Host, ev.Port = req.proto, printable(req.host), req.port
	}
	refuse := func(why string) {
		ev.Reason, ev.Duration = why, time.Since(start)
		if req != nil {
			req.refuse(why)
		}
		p.event(ev)
	}
	if err != nil {
		refuse(err.Error())
		return
	}
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	default:
		refuse(fmt.Sprintf("too many connections at once (cap %d)", cap(p.slots)))
		return
	}
	if p.spent.Load() || p.budget.Load() <= 0 {
		refuse(fmt.Sprintf("the sandbox's egress byte budget (%d) is spent", p.o.Caps.MaxBytes))
		return
	}
	up, addr, why := p.dial(req.host, req.port)
	if addr.IsValid() {
		ev.Addr = addr.String()
	}
	if up == nil {
		if why.failed {
			ev.Verdict = Failed
		}
		refuse(why.reason)
		return
	}
	if !p.track(up) {
		up.Close()
		refuse("proxy closing")
		return
	}
	defer p.untrack(up)
	defer up.Close()
	ev.Verdict = Allowed
	start = time.Now()
	deadline := start.Add(p.o.Caps.MaxConnDuration)
	c.SetDeadline(deadline)
	up.SetDeadline(deadline)
	if req.http != nil {
		ev.Sent, ev.Received, ev.Reason = p.forward(c, up, req.http)
	} else if err := req.accept(); err != nil {
		ev.Reason = fmt.Sprintf("client went away: %v", errnoOf(err))
	} else {
		ev.Sent, ev.Received, ev.Reason = p.relay(c, br, up)
	}
	ev.Duration = time.Since(start)
	p.event(ev)
}

// receiveConn is handover.Receive, a failed read said as noRequest.
func receiveConn(uc *net.UnixConn) (*net.TCPConn, []byte, error) {
	tc, first, err := handover.Receive(uc)
	if err != nil && !errors.Is(err, handover.ErrBad) {
		err = noRequest(err)
	}
	return tc, first, err
}

// noRequest says why no request came.
func noRequest(err error) error {
	var ne net.Error
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return errors.New("no request: the client hung up")
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no request within %v", handshakeTimeout)
	}
	return fmt.Errorf("no request: %v", errnoOf(err))
}

// errnoOf is err's system error, without the paths and addresses the
// wrapping errors name.
func errnoOf(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	if errors.Is(err, net.ErrClosed) {
		return net.ErrClosed
	}
	return errors.New("unknown error")
}

// dialFailure says why dial returned no connection; failed marks an
// allowed destination that could not be reached.
type dialFailure struct {
	reason string
	failed bool
}

// dial checks host:port against the allow-list and the blocked ranges,
// and connects to the address it checked.
func (p *Proxy) dial(host string, port int) (net.Conn, netip.Addr, dialFailure) {
	refused := func(format string, a ...any) (net.Conn, netip.Addr, dialFailure) {
		return nil, netip.Addr{}, dialFailure{reason: fmt.Sprintf(format, a...)}
	}
	if port < 1 || port > 65535 {
		return refused("port %d out of range", port)
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.o.Caps.DialTimeout)
	defer cancel()
	own, err := HostNetworks()
	if err != nil {
		return refused("cannot list this host's networks (to refuse them): %v", errnoOf(err))
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		a = a.Unmap()
		if !matchIP(p.rules, a, port) {
			return refused("IP literal %s is not in the allow-list (port %d)", a, port)
		}
		if why := blockedReason(a); why != "" {
			return refused("%s is %s", a, why)
		}
		if why := ownReason(own, a); why != "" {
			return refused("%s is %s", a, why)
		}
		addrs = []netip.Addr{a}
	} else {
		name, ok := normalName(host)
		if !ok {
			return refused("%+q is not a host name", host)
		}
		if !matchName(p.rules, name, port) {
			return refused("%s:%d is not in the allow-list", name, port)
		}
		found, err := p.res.LookupNetIP(ctx, "ip", name)
		if err != nil {
			return nil, netip.Addr{}, dialFailure{reason: "cannot resolve " + name, failed: true}
		}
		if len(found) == 0 {
			return nil, netip.Addr{}, dialFailure{reason: name + " has no address", failed: true}
		}
		// One blocked address refuses the name: a name that mixes public
		// and internal addresses is a rebinding attempt.
		for _, a := range found {
			a = a.Unmap()
			if p.loopback && a.IsLoopback() {
				continue
			}
			if why := blockedReason(a); why != "" {
				return nil, a, dialFailure{reason: fmt.Sprintf("%s resolves to %s, %s", name, a, why)}
			}
			if why := ownReason(own, a); why != "" {
				return nil, a, dialFailure{reason: fmt.Sprintf("%s resolves to %s, %s", name, a, why)}
			}
		}
		for _, a := range found {
			addrs = append(addrs, a.Unmap())
		}
	}
	d := net.Dialer{}
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, a, dialFailure{}
		}
		last = err
	}
	reason := "cannot connect"
	if errors.Is(last, context.DeadlineExceeded) {
		reason = fmt.Sprintf("no connection within %v", p.o.Caps.DialTimeout)
	}
	return nil, addrs[len(addrs)-1], dialFailure{reason: reason, failed: true}
}

// HostNetworks returns the addresses of this host's interfaces with
// their prefixes: whatever range they are in (a public one, a
// documentation one), a connection to one of the addresses is routed
// over loopback to the host's own services, and one to the rest of a
// prefix goes to a neighbour on the host's own network. They change
// (DHCP, hotplug): read them at each check (it costs some 20µs).
func HostNetworks() ([]netip.Prefix, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	own := make([]netip.Prefix, 0, len(ifas))
	for _, ifa := range ifas {
		n, ok := ifa.(*net.IPNet)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(n.IP) // an IPv4 address in 16 bytes
		ones, bits := n.Mask.Size()
		if a.Is4In6() {
			if a = a.Unmap(); bits == 128 {
				ones, bits = ones-96, 32
			}
		}
		if !ok {
			continue
		}
		if bits != a.BitLen() || ones < 0 { // a mask not understood: the address alone
			ones = a.BitLen()
		}
		own = append(own, netip.PrefixFrom(a, ones))
	}
	return own, nil
}

// ownReason says why a is no destination if it is in one of own (see
// HostNetworks), or "".
func ownReason(own []netip.Prefix, a netip.Addr) string {
	a = a.WithZone("") // a zone does not take an address off the host's networks
	for _, p := range own {
		switch {
		case p.Addr() == a:
			return "an address of this host (its own services answer there, as on loopback)"
		case p.Contains(a):
			// Not which one: the answer goes back to the sandbox.
			return "on a network this host is on"
		}
	}
	return ""
}

// relay copies both ways until both sides are done, and returns the
// bytes sent and received and why it was cut, if it was.
func (p *Proxy) relay(c net.Conn, br *bufio.Reader, up net.Conn) (sent, recv int64, why string) {
	errs := make(chan error, 2)
	go func() {
		var err error
		// What the client sent after its request (read ahead).
		if n := br.Buffered(); n > 0 {
			b, _ := br.Peek(n)
			var w int
			if w, err = p.write(up, b); err == nil {
				sent += int64(w)
			}
		}
		if err == nil {
			err = p.copy(up, c, &sent)
		}
		closeWrite(up)
		errs <- err
	}()
	go func() {
		err := p.copy(c, up, &recv)
		closeWrite(c)
		errs <- err
	}()
	var first error
	for range 2 {
		if err := <-errs; err != nil && first == nil {
			first = err
			// One side failed: cut both, so the other copy ends too.
			c.Close()
			up.Close()
		}
	}
	return sent, recv, p.cutReason(first)
}

// forward sends one plain HTTP request to up and relays the answer; the
// connection then ends (Connection: close).
func (p *Proxy) forward(c, up net.Conn, r *http.Request) (sent, recv int64, why string) {
	r.RequestURI = ""
	r.Close = true
	r.Header.Del("Proxy-Connection")
	r.Header.Del("Proxy-Authorization")
	if r.Body != nil {
		// An upload spends the byte budget as it goes.
		r.Body = &budgetReader{p: p, r: r.Body}
	}
	cw := &countWriter{w: up}
	err := r.Write(cw)
	sent = cw.n
	if err == nil {
		err = p.copy(c, up, &recv)
	}
	return sent, recv, p.cutReason(err)
}

func (p *Proxy) cutReason(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errBudget):
		return fmt.Sprintf("cut: the sandbox's egress byte budget (%d) is spent", p.o.Caps.MaxBytes)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("cut after %v (MaxConnDuration)", p.o.Caps.MaxConnDuration)
	case p.ctx.Err() != nil:
		return "cut: the proxy stopped"
	}
	return ""
}

var errBudget = errors.New("egress byte budget spent")

// copyChunk is the most copied between two looks at the byte budget.
const copyChunk = 4 << 20

var bufPool = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// copy copies src to dst until EOF, counting into *n against the byte
// budget. Between TCP and UNIX sockets io.Copy splices (no copy through
// user space).
func (p *Proxy) copy(dst, src net.Conn, n *int64) error {
	buf := bufPool.Get().(*[]byte)
	defer bufPool.Put(buf)
	for {
		chunk := p.reserve()
		if chunk <= 0 {
			return errBudget
		}
		w, err := io.CopyBuffer(dst, io.LimitReader(src, chunk), *buf)
		*n += w
		p.budget.Add(chunk - w)
		if err != nil {
			return err
		}
		if w < chunk {
			return nil // EOF
		}
	}
}

// reserve takes up to copyChunk bytes of the budget; 0 when it is spent.
// A copy that waits to read holds what it took, so it takes at most a
// share of what is left, one of as many as copies may run at once (two a
// connection): the others still get theirs, and the budget runs out
// only once spent.
func (p *Proxy) reserve() int64 {
	for {
		left := p.budget.Load()
		if left <= 0 {
			p.spent.Store(true)
			return 0
		}
		chunk := min(max(left/int64(2*p.o.Caps.MaxConns+1), 1), copyChunk)
		if p.budget.CompareAndSwap(left, left-chunk) {
			return chunk
		}
	}
}

func (p *Proxy) write(dst net.Conn, b []byte) (int, error) {
	if p.budget.Add(-int64(len(b))) < 0 {
		p.spent.Store(true)
		return 0, errBudget
	}
	return dst.Write(b)
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// budgetReader takes what it reads from the byte budget.
type budgetReader struct {
	p *Proxy
	r io.ReadCloser
}

func (b *budgetReader) Read(buf []byte) (int, error) {
	n, err := b.r.Read(buf)
	if b.p.budget.Add(-int64(n)) < 0 {
		b.p.spent.Store(true)
		return n, errBudget
	}
	return n, err
}

func (b *budgetReader) Close() error { return b.r.Close() }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// readHTTP reads a CONNECT or a plain (absolute-form) HTTP request.
func readHTTP(c net.Conn, br *bufio.Reader) (*request, error) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, errors.New("not an HTTP or SOCKS5 request")
	}
	answer := func(status int, why string) {
		body := why + "\n"
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, http.StatusText(status), len(body), body)
	}
	req := &request{proto: "connect", refuse: func(why string) { answer(http.StatusForbidden, "egress refused: "+why) }}
	if r.Method == http.MethodConnect {
		host, port, err := splitHostPort(r.RequestURI, 0)
		if err != nil {
			answer(http.StatusBadRequest, err.Error())
			return nil, err
		}
		req.host, req.port = host, port
		req.accept = func() error {
			_, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
			return err
		}
		return req, nil
	}
	req.proto = "http"
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		answer(http.StatusBadRequest, "want CONNECT host:port or an absolute http:// URL")
		return nil, fmt.Errorf("%s %+q is not a proxy request", clip(r.Method), clip(r.RequestURI))
	}
	host, port, err := splitHostPort(r.URL.Host, 80)
	if err != nil {
		answer(http.StatusBadRequest, err.Error())
		return nil, err
	}
	req.host, req.port, req.http = host, port, r
	return req, nil
}

// splitHostPort splits "host:port" ("[v6]:port"); def is the port when
// there is none (0: a port is required).
func splitHostPort(s string, def int) (string, int, error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		if def == 0 {
			return "", 0, fmt.Errorf("bad destination %+q: want host:port", clip(s))
		}
		host, ps = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), strconv.Itoa(def)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 || host == "" || len(host) > 255 {
		return "", 0, fmt.Errorf("bad destination %+q", clip(s))
	}
	return host, port, nil
}

// printable is host as a client asked for it, quoted and escaped to
// ASCII if it has a byte that is not printable ASCII: a sandbox chooses
// those bytes, and events are shown on terminals and in logs.
func printable(host string) string {
	for i := 0; i < len(host); i++ {
		if host[i] <= ' ' || host[i] >= 0x7f {
			return strconv.QuoteToASCII(host)
		}
	}
	return host
}

// clip shortens what a client wrote to a length fit for an event.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// SOCKS5 (RFC 1928), CONNECT without authentication only.
const (
	socksVersion     = 5
	socksNoAuth      = 0
	socksNoMethod    = 0xff
	socksConnect     = 1
	socksIPv4        = 1
	socksDomain      = 3
	socksIPv6        = 4
	socksOK          = 0
	socksNotAllowed  = 2
	socksCmdNotSupp  = 7
	socksAtypNotSupp = 8
)

func readSocks(c net.Conn, br *bufio.Reader) (*request, error) {
	reply := func(code byte) { c.Write([]byte{socksVersion, code, 0, socksIPv4, 0, 0, 0, 0, 0, 0}) }
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, errors.New("short SOCKS5 greeting")
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return nil, errors.New("short SOCKS5 greeting")
	}
	if !strings.ContainsRune(string(methods), socksNoAuth) {
		c.Write([]byte{socksVersion, socksNoMethod})
		return nil, errors.New("SOCKS5 client offers no method without authentication")
	}
	if _, err := c.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return nil, err
	}
	var rq [4]byte
	if _, err := io.ReadFull(br, rq[:]); err != nil || rq[0] != socksVersion {
		return nil, errors.New("bad SOCKS5 request")
	}
	req := &request{proto: "socks5", refuse: func(string) { reply(socksNotAllowed) }}
	if rq[1] != socksConnect {
		reply(socksCmdNotSupp)
		return nil, fmt.Errorf("SOCKS5 command %d not supported (only CONNECT)", rq[1])
	}
	switch rq[3] {
	case socksIPv4, socksIPv6:
		b := make([]byte, map[byte]int{socksIPv4: 4, socksIPv6: 16}[rq[3]])
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, errors.New("short SOCKS5 request")
		}
		a, _ := netip.AddrFromSlice(b)
		req.host = a.Unmap().String()
	case socksDomain:
		l, err := br.ReadByte()
		if err != nil {
			return nil, errors.New("short SOCKS5 request")
		}
		b := make([]byte, l)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, errors.New("short SOCKS5 request")
		}
		req.host = string(b)
	default:
		reply(socksAtypNotSupp)
		return nil, fmt.Errorf("SOCKS5 address type %d not supported", rq[3])
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return nil, errors.New("short SOCKS5 request")
	}
	req.port = int(pb[0])<<8 | int(pb[1])
	req.accept = func() error {
		_, err := c.Write([]byte{socksVersion, socksOK, 0, socksIPv4, 0, 0, 0, 0, 0, 0})
		return err
	}
	return req, nil
}
