package egress

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress/internal/handover"
)

// TestHandoverSendBuffer: the proxy caps the send buffer of a bridge's
// client socket (handover.ClientSendBuffer); autotuned, it lets megabytes of a
// download queue towards the client, which then copies them out cold.
func TestHandoverSendBuffer(t *testing.T) {
	p, err := Listen(filepath.Join(t.TempDir(), "egress.sock"), Options{Allow: []string{"allowed.test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	tc, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	// The bridge's side of the connection, kept open to look at.
	f, err := tc.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sndbuf := func() int {
		v, err := syscall.GetsockoptInt(int(f.Fd()), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := 2 * handover.ClientSendBuffer // what the kernel makes of it
	if got := sndbuf(); got == want {
		t.Fatalf("SO_SNDBUF is %d before the handover already", got)
	}
	handOver(tc, p.Path())
	// A refused request: the answer comes after the proxy set the buffer.
	fmt.Fprintf(client, "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test\r\n\r\n")
	client.SetDeadline(time.Now().Add(10 * time.Second))
	// (No EOF: f keeps the connection open.)
	resp, err := http.ReadResponse(bufio.NewReader(client), nil)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("answer %v, %v; want a 403", resp, err)
	}
	if got := sndbuf(); got != want {
		t.Errorf("SO_SNDBUF of the handed-over client socket: %d, want %d", got, want)
	}
}
