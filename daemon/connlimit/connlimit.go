// Package connlimit is the server's listener: it bounds the connections
// clients can hold open and survives running out of file descriptors.
//
// fasthttp's accept loop (under Fiber) treats every accept error but a
// timeout as fatal, so a flood of idle connections that ran the process
// out of descriptors (EMFILE) ended the server. A Listener never returns
// such an error: it retries with backoff, as net/http's Server does. It
// keeps the connections below the descriptor limit by not accepting
// beyond MaxConns (waiting connections stay in the kernel's backlog and
// hold none of the process's descriptors), and closes at once a
// connection from an address that already holds MaxPerIP, so that one
// client cannot take all the places (a trusted proxy's address excepted). Idle connections are the HTTP
// server's to close (header and idle timeouts).
package connlimit

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options are a Listener's caps.
type Options struct {
	// MaxConns caps open connections (required).
	MaxConns int
	// MaxPerIP caps one remote address's connections (required).
	MaxPerIP int
	// Proxies are the trusted reverse proxies, which MaxPerIP does not
	// bind: every client behind one has its address (MaxConns does).
	Proxies []netip.Prefix
	// Log reports refused connections and accept errors, each kind at
	// most once a second (nil: not reported).
	Log func(msg string, args ...any)
}

// Defaults derives the caps from the process's descriptor limit
// (RLIMIT_NOFILE, which the Go runtime has raised to its hard limit):
// connections may take half of it, the rest is for the database, logs and
// sandboxes; one address may take a quarter of that.
func Defaults() (maxConns, maxPerIP int) {
	n := uint64(1024)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 {
		n = min(rl.Cur, 1<<21)
	}
	maxConns = max(int(n/2), 8)
	return maxConns, max(maxConns/4, 2)
}

// Listener is a net.Listener with connection caps that survives EMFILE.
type Listener struct {
	net.Listener
	o      Options
	slots  chan struct{} // one per open connection
	closed chan struct{}
	once   sync.Once

	mu    sync.Mutex
	perIP map[netip.Addr]int

	lastLog [2]atomic.Int64 // unix nanoseconds, per kind of report
}

// New wraps ln.
func New(ln net.Listener, o Options) *Listener {
	if o.MaxConns < 1 || o.MaxPerIP < 1 {
		panic("connlimit: MaxConns and MaxPerIP must be positive")
	}
	return &Listener{Listener: ln, o: o, slots: make(chan struct{}, o.MaxConns), closed: make(chan struct{}), perIP: map[netip.Addr]int{}}
}

// Accept waits for a place and a connection. It returns an error only
// when the listener is closed or fails permanently.
func (l *Listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			if !temporary(err) {
				return nil, err
			}
			// Out of descriptors (or a similar passing state): wait for
			// connections to close rather than give up, 5 ms doubling to
			// 1 s as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.report(0, "accept failed; retrying", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-l.closed:
				return nil, net.ErrClosed
			}
			continue
		}
		delay = 0
		ip := remoteIP(c)
		if !l.admit(ip) {
			<-l.slots
			c.Close()
			l.report(1, "connection refused: its address holds max_connections_per_ip connections", "addr", ip, "max", l.o.MaxPerIP)
			continue
		}
		return &conn{Conn: c, l: l, ip: ip}, nil
	}
}

// Close stops accepting; open connections stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// Open is the number of connections open now.
func (l *Listener) Open() int { return len(l.slots) }

func (l *Listener) admit(ip netip.Addr) bool {
	proxy := slices.ContainsFunc(l.o.Proxies, func(p netip.Prefix) bool { return p.Contains(ip) })
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perIP[ip] >= l.o.MaxPerIP && !proxy {
		return false
	}
	l.perIP[ip]++
	return true
}

func (l *Listener) release(ip netip.Addr) {
	l.mu.Lock()
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
	l.mu.Unlock()
	<-l.slots
}

func (l *Listener) report(kind int, msg string, args ...any) {
	if l.o.Log == nil {
		return
	}
	now := time.Now().UnixNano()
	last := l.lastLog[kind].Load()
	if now-last < int64(time.Second) || !l.lastLog[kind].CompareAndSwap(last, now) {
		return
	}
	l.o.Log(msg, args...)
}

// temporary reports whether an accept error is a passing state of the
// process or the system rather than a broken listener.
func temporary(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func remoteIP(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{} // not TCP: one shared place
}

// conn gives its place back when closed.
type conn struct {
	net.Conn
	l    *Listener
	ip   netip.Addr
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
