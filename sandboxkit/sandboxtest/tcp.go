package sandboxtest

import (
	"net"
	"testing"
)

// ServeTCP listens on addr ("127.0.0.1:0" for a free port) until the
// test ends, hands each connection to h on its own goroutine, closing it
// after (a nil h just closes it: a listener whose reachability is the
// question), and returns the port.
func ServeTCP(tb testing.TB, addr string, h func(net.Conn)) int {
	tb.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if h != nil {
					h(c)
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
