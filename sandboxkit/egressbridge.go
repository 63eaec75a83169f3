package sandboxkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// A Policy with Egress keeps its own network namespace (only loopback);
// its one way out is an egress proxy on the host (package egress),
// started with the sandbox and stopped with it. The proxy's UNIX socket
// is bound at supervisor.EgressSocket inside, and a bridge listens on
// 127.0.0.1:egress.Port there and hands each connection to the proxy: in
// a Session the supervisor (pid 1) runs it; in a one-shot sandbox this
// binary runs first (supervisor.EgressBridgeFlag), starts the bridge and
// executes the command in its place (internal/supervisor/bridge.go).

// egressEnv points HTTP, HTTPS and SOCKS clients at the bridge; nothing
// is exempt from the proxy (there is no other way out).
func egressEnv() []string {
	httpProxy := "http://127.0.0.1:" + strconv.Itoa(egress.Port)
	socks := "socks5h://127.0.0.1:" + strconv.Itoa(egress.Port)
	return []string{
		"http_proxy=" + httpProxy, "HTTP_PROXY=" + httpProxy,
		"https_proxy=" + httpProxy, "HTTPS_PROXY=" + httpProxy,
		"all_proxy=" + socks, "ALL_PROXY=" + socks,
		"no_proxy=", "NO_PROXY=",
	}
}

// egressProxy is the running proxy of one sandbox.
type egressProxy struct {
	px  egressListener
	dir string
}

// egressListener is what a sandbox needs of its proxy: an *egress.Proxy,
// or in a benchmark (listenEgress) a bare relay to compare it with.
type egressListener interface {
	Path() string
	Err() error
	Close() error
}

// listenEgress starts the proxy of a sandbox on its socket at path. Only
// test code replaces it (a benchmark's bare relay on the same path).
var listenEgress = func(path string, o egress.Options) (egressListener, error) {
	return egress.Listen(path, o)
}

// startEgress starts the proxy of a sandbox under p, on a socket in a
// new private directory. Errors wrap egress.ErrProxyDown: nothing
// starts without it.
func startEgress(p *Policy) (*egressProxy, error) {
	if p.Egress == nil {
		return nil, nil
	}
	dir, err := os.MkdirTemp(socketBase(), "sandboxkit-egress-")
	if err != nil {
		// No path in the error: it may reach a model.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("sandboxkit: %w: cannot make a directory for its socket in the temp dir: %v", egress.ErrProxyDown, err)
	}
	px, err := listenEgress(filepath.Join(dir, "proxy.sock"), *p.Egress)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("sandboxkit: %w", err)
	}
	return &egressProxy{px: px, dir: dir}, nil
}

// socketBase is where a proxy's socket directory is made. The socket is
// bound into the sandbox, and /proc/self/mountinfo there shows a bind's
// source by its path within its filesystem: at the root of a filesystem
// of its own (a tmpfs: XDG_RUNTIME_DIR, /dev/shm) that is
// /sandboxkit-egress-N/proxy.sock, which says nothing of the host; in the
// temp dir, on the root filesystem, it is the temp dir's whole path.
func socketBase() string {
	for _, d := range socketBases() {
		if d != "" && filepath.IsAbs(d) && mountedDir(d) {
			return d
		}
	}
	return os.TempDir()
}

// socketBases are the tmpfs candidates of socketBase, in order (a
// variable so that a test can take them away): XDG_RUNTIME_DIR, meant
// for a user's sockets, then /dev/shm unless TMPDIR is set (an operator
// who set it chose where temporary files go).
var socketBases = func() []string {
	if os.Getenv("TMPDIR") != "" {
		return []string{os.Getenv("XDG_RUNTIME_DIR")}
	}
	return []string{os.Getenv("XDG_RUNTIME_DIR"), "/dev/shm"}
}

// mountedDir reports whether dir is a writable directory on another
// filesystem than its parent: the root of a mount (usually of its
// filesystem too).
func mountedDir(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Dev != parent.Dev && unix.Access(dir, unix.W_OK|unix.X_OK) == nil
}

func (e *egressProxy) socket() string {
	if e == nil {
		return ""
	}
	return e.px.Path()
}

// close stops the proxy and reports whether it had died before (an
// error wrapping egress.ErrProxyDown).
func (e *egressProxy) close() error {
	if e == nil {
		return nil
	}
	died := e.px.Err()
	e.px.Close()
	os.RemoveAll(e.dir)
	return died
}

// down adds to a command's result that the proxy stopped while it ran:
// the command had no way out from then on.
func (e *egressProxy) down(err error) error {
	if e == nil {
		return err
	}
	if died := e.px.Err(); died != nil {
		return errors.Join(err, fmt.Errorf("sandboxkit: %w", died))
	}
	return err
}
