package connlimit

import (
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func dialFrom(t *testing.T, ip string, addr net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// accepted returns the listener's next connection, or nil if none comes
// within wait.
func accepted(t *testing.T, ch <-chan net.Conn, wait time.Duration) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(wait):
		return nil
	}
}

// closedByServer reports whether the server closed c (reading ends).
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	ne, ok := err.(net.Error)
	return !(ok && ne.Timeout())
}

func serve(t *testing.T, o Options) (*Listener, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, o)
	t.Cleanup(func() { l.Close() })
	ch := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(ch)
				return
			}
			ch <- c
		}
	}()
	return l, ch
}

func TestCaps(t *testing.T) {
	l, ch := serve(t, Options{MaxConns: 6, MaxPerIP: 4})
	var mine []net.Conn
	for i := 0; i < 4; i++ {
		dialFrom(t, "127.0.0.1", l.Addr())
		mine = append(mine, accepted(t, ch, 5*time.Second))
	}
	// A fifth from the same address is closed at once.
	fifth := dialFrom(t, "127.0.0.1", l.Addr())
	if !closedByServer(fifth) {
		t.Fatal("a connection beyond MaxPerIP was not closed")
	}
	// Another address still gets in, up to MaxConns in all.
	for i := 0; i < 2; i++ {
		dialFrom(t, "127.0.0.2", l.Addr())
		if accepted(t, ch, 5*time.Second) == nil {
			t.Fatalf("connection %d from another address was not accepted", i)
		}
	}
	if l.Open() != 6 {
		t.Fatalf("Open() = %d, want 6", l.Open())
	}
	// At MaxConns the next waits in the backlog until a place frees.
	waiting := dialFrom(t, "127.0.0.3", l.Addr())
	if c := accepted(t, ch, 300*time.Millisecond); c != nil {
		t.Fatal("accepted beyond MaxConns")
	}
	mine[0].Close()
	mine[0].Close() // twice frees one place
	c := accepted(t, ch, 5*time.Second)
	if c == nil {
		t.Fatal("a freed place was not used")
	}
	c.Write([]byte("hi"))
	buf := make([]byte, 2)
	waiting.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(waiting, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("the waiting connection: %q %v", buf, err)
	}
	if l.Open() != 6 {
		t.Fatalf("Open() = %d, want 6", l.Open())
	}
	l.Close()
	if _, ok := <-ch; ok {
		t.Fatal("Accept after Close returned a connection")
	}
}

// With every descriptor of the process in use, Accept waits and retries
// instead of failing, and accepts once a descriptor is free. The EMFILE
// is real: the test lowers its own RLIMIT_NOFILE and fills the table.
func TestSurvivesEMFILE(t *testing.T) {
	var logged atomic.Int64
	l, ch := serve(t, Options{MaxConns: 100, MaxPerIP: 100, Log: func(string, ...any) { logged.Add(1) }})
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	var fillers []*os.File
	release := func() {
		for _, f := range fillers {
			f.Close()
		}
		fillers = nil
	}
	defer release()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		fillers = append(fillers, f)
	}
	// One descriptor for the client; the server has none to accept it.
	fillers[len(fillers)-1].Close()
	fillers = fillers[:len(fillers)-1]
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if c := accepted(t, ch, 500*time.Millisecond); c != nil {
		t.Fatal("accepted with no descriptor free")
	}
	if logged.Load() == 0 {
		t.Error("the failing accept was not reported")
	}
	release()
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	c := accepted(t, ch, 5*time.Second)
	if c == nil {
		t.Fatal("after descriptors were freed, the connection was not accepted")
	}
	c.Write([]byte("ok"))
	buf := make([]byte, 2)
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("the accepted connection: %q %v", buf, err)
	}
}

// A trusted proxy's address is bound by MaxConns only.
func TestProxyNotCappedPerIP(t *testing.T) {
	l, ch := serve(t, Options{MaxConns: 6, MaxPerIP: 2, Proxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	for i := 0; i < 4; i++ {
		dialFrom(t, "127.0.0.1", l.Addr())
		if accepted(t, ch, 5*time.Second) == nil {
			t.Fatalf("the proxy's connection %d was not accepted", i)
		}
	}
	for i := 0; i < 2; i++ {
		dialFrom(t, "127.0.0.2", l.Addr())
		if accepted(t, ch, 5*time.Second) == nil {
			t.Fatalf("connection %d from another address was not accepted", i)
		}
	}
	// MaxConns binds the proxy too.
	dialFrom(t, "127.0.0.1", l.Addr())
	if accepted(t, ch, 300*time.Millisecond) != nil || l.Open() != 6 {
		t.Fatalf("accepted beyond MaxConns: Open() = %d", l.Open())
	}
}
