package supervisor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// The egress bridge of a sandbox with an egress proxy (sandboxkit starts
// the proxy on the host): inside, a bridge listens
// on 127.0.0.1:egress.Port and hands each connection to the proxy's
// socket, bound at EgressSocket. In a Session the supervisor (pid 1) runs
// it; in a one-shot sandbox this binary runs first (EgressBridgeFlag),
// starts the bridge and executes the command in its place.

// EgressSocket is where the proxy's socket is bound inside the sandbox.
const EgressSocket = "/run/sandboxkit-egress.sock"

// EgressBridgeFlag is os.Args[1] of the re-executed binary that starts
// the bridge in a one-shot sandbox and executes the command; after a
// supervisor's arguments, it makes the supervisor run the bridge.
const EgressBridgeFlag = "--sandboxkit-egress"

// EgressLaunch is the argv of a one-shot sandbox with egress: this
// binary (at exe inside) starts the bridge, then executes argv.
func EgressLaunch(exe string, argv []string) []string {
	return append([]string{exe, EgressBridgeFlag}, argv...)
}

// listenBridge listens on the bridge's address inside the sandbox.
func listenBridge() (*net.TCPListener, error) {
	return net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: egress.Port})
}

// runEgressBridge is EgressBridgeFlag: with "serve", the bridge itself
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
		egress.Bridge(tl, EgressSocket)
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
	b := exec.Command("/proc/self/exe", EgressBridgeFlag, "serve")
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
