package sandboxkit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// A Policy with Egress keeps its own network namespace (only loopback);
// its one way out is an egress proxy on the host (package egress),
// started with the sandbox and stopped with it. The proxy's UNIX socket
// is bound at egressSocket inside, and a bridge listens on
// 127.0.0.1:egress.Port there and hands each connection to the proxy: in
// a Session the supervisor (pid 1) runs it; in a one-shot sandbox this
// binary runs first (egressBridgeFlag), starts the bridge and executes
// the command in its place.

// egressSocket is where the proxy's socket is bound inside the sandbox.
const egressSocket = "/run/sandboxkit-egress.sock"

// EgressSocketPlaceholder stands for the proxy's host socket in the argv
// that Policy.Build returns: Run and StartSession bind the socket of the
// proxy they start.
const EgressSocketPlaceholder = "/run/sandboxkit/EGRESS-PROXY.sock"

// egressBridgeFlag is os.Args[1] of the re-executed binary that starts
// the bridge in a one-shot sandbox and executes the command.
const egressBridgeFlag = "--sandboxkit-egress"

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
	px  *egress.Proxy
	dir string
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
	px, err := egress.Listen(filepath.Join(dir, "proxy.sock"), *p.Egress)
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

// egressLaunch is the argv of a one-shot sandbox with egress: this
// binary (at exe inside) starts the bridge, then executes argv.
func egressLaunch(exe string, argv []string) []string {
	return append([]string{exe, egressBridgeFlag}, argv...)
}

// listenBridge listens on the bridge's address inside the sandbox.
func listenBridge() (*net.TCPListener, error) {
	return net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: egress.Port})
}

// runEgressBridge is egressBridgeFlag: with "serve", the bridge itself
// on the listener at fd 3; otherwise args is the command, started after
// the bridge. It returns only on failure.
func runEgressBridge(args []string) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "sandboxkit: "+format+"\n", a...)
		return code
	}
	if len(args) == 1 && args[0] == "serve" {
		// The command runs as the same uid: without this it could ptrace
		// the bridge or open /proc/PID/fd and /proc/PID/exe (this
		// program, opened on the host, named by its host path).
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			return fail(2, "egress bridge: PR_SET_DUMPABLE: %v", err)
		}
		// Tell the launcher, which starts the command only then.
		ready := os.NewFile(4, "egress-bridge-ready")
		if _, err := ready.Write([]byte{1}); err != nil {
			return fail(2, "egress bridge: %v", err)
		}
		ready.Close()
		ln, err := net.FileListener(os.NewFile(3, "egress-bridge"))
		if err != nil {
			return fail(2, "egress bridge: %v", err)
		}
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			return fail(2, "egress bridge: fd 3 is not a TCP listener")
		}
		egress.Bridge(tl, egressSocket)
		return 2
	}
	if len(args) == 0 {
		return fail(2, "egress bridge: no command")
	}
	ln, err := listenBridge()
	if err != nil {
		return fail(2, "egress bridge: %v", err)
	}
	f, err := ln.File()
	if err != nil {
		return fail(2, "egress bridge: %v", err)
	}
	// The bridge becomes a sibling of the command (CLONE_PARENT: a child
	// of bwrap's init, which reaps it), not its child: nothing the
	// command waits for, and it dies with the sandbox.
	// The command starts once the bridge is not dumpable any more
	// (ready): before, it could read the bridge's /proc entries.
	rr, rw, err := os.Pipe()
	if err != nil {
		return fail(2, "egress bridge: %v", err)
	}
	b := exec.Command("/proc/self/exe", egressBridgeFlag, "serve")
	b.ExtraFiles = []*os.File{f, rw}
	b.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_PARENT}
	if err := b.Start(); err != nil {
		return fail(2, "egress bridge: %v", err)
	}
	f.Close()
	ln.Close()
	rw.Close()
	var one [1]byte
	if n, _ := rr.Read(one[:]); n != 1 {
		return fail(2, "egress bridge: it did not start")
	}
	rr.Close()
	// Whatever is still open (this program's descriptor, bwrap's status
	// pipe) must not reach the command.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail(2, "egress bridge: close_range: %v", err)
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fail(127, "%s: command not found", args[0])
	}
	err = syscall.Exec(path, args, os.Environ())
	if errors.Is(err, syscall.EACCES) {
		return fail(126, "%s: permission denied", args[0])
	}
	return fail(126, "exec %s: %v", args[0], err)
}
