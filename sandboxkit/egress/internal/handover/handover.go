// Package handover is the wire between an in-sandbox bridge and the
// host's egress proxy: one byte and the client's TCP socket as a
// descriptor (SCM_RIGHTS) over the proxy's UNIX socket.
package handover

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// Byte is the one byte of a bridge's message that carries a client's
// TCP connection: NUL, which starts no HTTP method and no SOCKS greeting
// (a client speaking on the socket itself may send "HEAD ...").
const Byte = 0

// ClientSendBuffer is the send buffer (SO_SNDBUF; the kernel doubles it)
// the proxy gives a bridge's client socket, on loopback inside the
// sandbox: ample for its round trips of microseconds. With the autotuned
// default, megabytes of a download queue towards the client, which then
// copies them out cold: curl spent 1.5× the CPU per byte of a direct
// download (BenchmarkEgressCurlDownload), and as much as direct with
// 128 KiB to 1 MiB here. The socket to the destination keeps its
// autotuned buffers.
const ClientSendBuffer = 256 << 10

// ErrBad is wrapped by the errors of a handover that is malformed.
var ErrBad = errors.New("bad handover")

// Send hands fd, a bridge's client socket, over on u.
func Send(u *net.UnixConn, fd int) error {
	_, _, err := u.WriteMsgUnix([]byte{Byte}, syscall.UnixRights(fd), nil)
	return err
}

// Receive reads the first byte a client sent on the proxy's socket: a
// bridge's handover comes with the client's TCP connection, returned as
// tc; anything else is a client speaking on the socket itself, and the
// byte read is returned as first. A failed read is returned as is
// (io.EOF when nothing came); a malformed handover wraps ErrBad. Every
// descriptor received but not returned is closed.
func Receive(uc *net.UnixConn) (tc *net.TCPConn, first []byte, err error) {
	b := make([]byte, 1)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(b, oob)
	if err != nil {
		return nil, nil, err
	}
	var fds []int
	if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if f, err := syscall.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	if n == 0 {
		return nil, nil, io.EOF
	}
	if b[0] != Byte {
		return nil, b, nil
	}
	if len(fds) != 1 || flags&syscall.MSG_CTRUNC != 0 {
		return nil, nil, fmt.Errorf("%w: want exactly one descriptor", ErrBad)
	}
	f := os.NewFile(uintptr(fds[0]), "egress-client")
	fds = nil
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBad, err)
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		conn.Close()
		return nil, nil, fmt.Errorf("%w: the descriptor is not a TCP connection", ErrBad)
	}
	return tc, nil, nil
}
