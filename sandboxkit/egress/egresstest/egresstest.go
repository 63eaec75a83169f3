// Package egresstest has what tests of the egress proxy share: a
// resolver that maps test names to fixed addresses, and an HTTPS server
// on 127.0.0.1 with a certificate from a CA made for the test.
package egresstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/egress/internal/testloopback"
)

// Resolver maps names (lower case) to addresses; other names do not
// resolve.
type Resolver map[string][]netip.Addr

func (r Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[strings.ToLower(strings.TrimSuffix(host, "."))]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// AllowLoopback returns r as a resolver whose loopback answers the
// egress proxy allows (only those: IP literals and every other blocked
// range stay refused), so that a test can map names to servers on
// 127.0.0.1. It panics outside a test binary: no program can turn the
// protection off.
func AllowLoopback(r egress.Resolver) egress.Resolver {
	if !testing.Testing() {
		panic("egresstest: AllowLoopback outside a test binary")
	}
	return loopbackResolver{r}
}

type loopbackResolver struct{ egress.Resolver }

func (loopbackResolver) AllowsLoopback(testloopback.Token) {}

// TLSServer starts an HTTPS server on 127.0.0.1 for names, with a
// certificate signed by a new CA; CAPEM is that CA, for clients.
type TLSServer struct {
	*httptest.Server
	CAPEM []byte
	Pool  *x509.CertPool
}

// Port is the server's port.
func (s *TLSServer) Port() int { return s.Listener.Addr().(*net.TCPAddr).Port }

// NewTLSServer starts the server; it closes with the test.
func NewTLSServer(t testing.TB, h http.Handler, names ...string) *TLSServer {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egress test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &TLSServer{Server: s, CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), Pool: pool}
}

// Events collects a proxy's events.
type Events struct {
	mu sync.Mutex
	ev []egress.Event
}

// Add is an egress.Options.OnEvent.
func (e *Events) Add(ev egress.Event) {
	e.mu.Lock()
	e.ev = append(e.ev, ev)
	e.mu.Unlock()
}

// All returns the events so far.
func (e *Events) All() []egress.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]egress.Event(nil), e.ev...)
}

// Find returns the first event for host with verdict, waiting up to a
// few seconds for it (an allowed connection's event comes when it ends).
func (e *Events) Find(host, verdict string) (egress.Event, bool) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		for _, ev := range e.All() {
			if ev.Host == host && ev.Verdict == verdict {
				return ev, true
			}
		}
		if time.Now().After(deadline) {
			return egress.Event{}, false
		}
	}
}

// String lists the events, for failure messages.
func (e *Events) String() string {
	var b strings.Builder
	for _, ev := range e.All() {
		fmt.Fprintf(&b, "%s %s %s:%d %s %q\n", ev.Proto, ev.Verdict, ev.Host, ev.Port, ev.Addr, ev.Reason)
	}
	return b.String()
}
