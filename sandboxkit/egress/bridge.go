package egress

import (
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress/internal/handover"
)

// Bridge serves ln, a TCP listener on 127.0.0.1:Port inside a sandbox:
// each connection accepted is handed over, as a descriptor, to the proxy
// on its socket at socketPath (the bind of the host's socket), which
// then reads and writes the client's socket itself: no byte is copied
// inside the sandbox, and the proxy splices between two TCP sockets.
// When the proxy is gone a connection is closed at once: there is no
// other way out. Bridge returns when ln fails.
func Bridge(ln *net.TCPListener, socketPath string) error {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return err
		}
		handOver(c, socketPath)
	}
}

// handOver sends c to the proxy and closes this side's copies.
func handOver(c *net.TCPConn, socketPath string) {
	defer c.Close()
	u, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socketPath, Net: "unix"})
	if err != nil {
		return
	}
	defer u.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) { handover.Send(u, int(fd)) })
}
