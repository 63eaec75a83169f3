package egresstest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/codumentor/codumentor/sandboxkit/egress/internal/handover"
)

// Relay is the proxy's topology with none of its policy, the most the
// proxy can do on the way out, for benchmarks to compare it with: it
// takes each client a bridge hands over on its UNIX socket (its send
// buffer sized as the proxy sizes it), reads its CONNECT, dials its
// server (whatever was asked), answers 200 and splices both ways
// (io.Copy between two TCP sockets).
type Relay struct {
	ln      *net.UnixListener
	server  string
	tunnels atomic.Int64
}

// ServeRelay listens on a UNIX socket at path and relays every tunnel
// to server until Close.
func ServeRelay(path, server string) (*Relay, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	r := &Relay{ln: ln, server: server}
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

// Path is the socket's path.
func (r *Relay) Path() string { return r.ln.Addr().String() }

// Err is always nil: a relay has no policy to fail.
func (r *Relay) Err() error { return nil }

// Close stops accepting; tunnels already open run to their end.
func (r *Relay) Close() error { return r.ln.Close() }

// Tunnels is the number of CONNECTs answered so far.
func (r *Relay) Tunnels() int64 { return r.tunnels.Load() }

func (r *Relay) relay(uc *net.UnixConn) {
	c, _, err := handover.Receive(uc)
	uc.Close()
	if err != nil || c == nil {
		return
	}
	defer c.Close()
	c.SetWriteBuffer(handover.ClientSendBuffer)
	// The client sends nothing before the answer: nothing is read ahead.
	if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
		return
	}
	up, err := net.Dial("tcp", r.server)
	if err != nil {
		return
	}
	defer up.Close()
	// Counted before the client can have its answer.
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
