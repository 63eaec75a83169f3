// Package weaviatetest starts a real, throwaway Weaviate server on
// 127.0.0.1 for tests and benchmarks: its data in a temporary directory,
// free ports for REST, gRPC, gossip and Raft, anonymous access,
// telemetry and profiling off.
//
// The server is weaviate-server, built by scripts/install-prereqs with
// `go install github.com/weaviate/weaviate/cmd/weaviate-server@v1.35.2`
// into /var/cache/codumentor-prereqs/weaviate/bin (or found on PATH, or
// named by $CODUMENTOR_WEAVIATE). Without it Start skips the test, or
// fails it when CI=true.
package weaviatetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// Version is the server version scripts/install-prereqs builds.
const Version = "v1.35.2"

// DefaultBinary is where scripts/install-prereqs puts the server.
const DefaultBinary = "/var/cache/codumentor-prereqs/weaviate/bin/weaviate-server"

// Server is a running Weaviate.
type Server struct {
	URL string // http://127.0.0.1:PORT

	cmd  *exec.Cmd
	dir  string
	out  *sandboxtest.Buffer
	done chan struct{}
}

// ErrMissing is returned by Launch when no weaviate-server is installed.
var ErrMissing = errors.New("weaviate-server is not installed (scripts/install-prereqs builds it)")

// Binary finds weaviate-server.
func Binary() (string, error) {
	if b := os.Getenv("CODUMENTOR_WEAVIATE"); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath("weaviate-server"); err == nil {
		return b, nil
	}
	if _, err := os.Stat(DefaultBinary); err == nil {
		return DefaultBinary, nil
	}
	return "", ErrMissing
}

// Start launches a server stopped at the end of t.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Launch()
	if errors.Is(err, ErrMissing) {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Launch starts a server and waits until it is ready (at most a minute).
// Close stops it and removes its data.
func Launch() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "weaviatetest-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(6)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	s := &Server{URL: "http://127.0.0.1:" + p(0), dir: dir, out: &sandboxtest.Buffer{Max: 8192}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "--host", "127.0.0.1", "--port", p(0), "--scheme", "http")
	s.cmd.Env = []string{
		"PATH=/usr/bin:/bin",
		"HOME=" + dir,
		"PERSISTENCE_DATA_PATH=" + dir,
		"AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED=true",
		"DEFAULT_VECTORIZER_MODULE=none",
		"DISABLE_TELEMETRY=true",
		"GO_PROFILING_DISABLE=true",
		"CLUSTER_HOSTNAME=node1",
		"CLUSTER_BIND_ADDR=127.0.0.1",
		"CLUSTER_ADVERTISE_ADDR=127.0.0.1",
		"GRPC_PORT=" + p(1),
		"CLUSTER_GOSSIP_BIND_PORT=" + p(2),
		"CLUSTER_DATA_BIND_PORT=" + p(3),
		"RAFT_PORT=" + p(4),
		"RAFT_INTERNAL_RPC_PORT=" + p(5),
		"RAFT_BOOTSTRAP_EXPECT=1",
		"LOG_LEVEL=warning",
		"QUERY_DEFAULTS_LIMIT=100",
		"GOMAXPROCS=2",
	}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// Its own process group, and killed if the test binary dies.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("weaviatetest: starting %s: %w", bin, err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/.well-known/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.done:
			s.Close()
			return nil, fmt.Errorf("weaviatetest: weaviate-server exited: %s", s.out.String())
		case <-ctx.Done():
			s.Close()
			return nil, fmt.Errorf("weaviatetest: weaviate-server not ready within a minute: %s", s.out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Pid is the server's process ID (to read its resource use).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Close stops the server and removes its data.
func (s *Server) Close() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	os.RemoveAll(s.dir)
}

// freePorts finds n free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
