package supervisor

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Abstract UNIX sockets live in the network namespace, not the
// filesystem: a sandbox that shares the host's network (Policy.ShareNet)
// could connect to every abstract socket a host process listens on
// (session buses, X11, container runtimes), and seccomp cannot see the
// address of a connect. Landlock's abstract-socket scope (ABI 6, Linux
// 6.12) closes that: a process in a scoped domain connects only to
// abstract sockets created inside its own domain.
//
// The scope is applied before bwrap starts, so bwrap, a Session's
// supervisor and every command inherit it: the spawner runs this binary
// with ScopeFlag instead of bwrap, and it restricts itself and then
// executes bwrap. Each sandbox gets a domain of its own, so two sandboxes
// sharing the network cannot reach each other's sockets either.

// ScopeFlag is os.Args[1] of the re-executed binary that scopes itself
// and executes the bwrap command line that follows.
const ScopeFlag = "--sandboxkit-scope"

// ScopeABI is the first Landlock ABI with
// LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET.
const ScopeABI = 6

// ABI caches the kernel's Landlock ABI version for the life of
// the process (0: no Landlock, or disabled at boot).
var ABI = sync.OnceValue(func() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
})

// Scoped reports whether this kernel keeps sandboxes that share the host
// network from the host's abstract UNIX sockets.
func Scoped() bool { return ABI() >= ScopeABI }

// StepScope returns the command line the spawner executes for the bwrap
// command line args of a sandbox: args itself, or, when the sandbox
// shares the host network and the kernel can scope abstract sockets,
// this binary with ScopeFlag in front of it.
func StepScope(shareNet bool, args []string) []string {
	if !shareNet || !Scoped() {
		return args
	}
	// Executed by the spawner, a fork of this very binary.
	return append([]string{"/proc/self/exe", ScopeFlag}, args...)
}

// landlockRulesetAttr is struct landlock_ruleset_attr up to scoped (ABI
// 6); the kernel accepts a prefix of its own struct.
type landlockRulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

// scopeAbstractUnix puts the calling thread in a new Landlock domain
// that handles no file or network access and scopes abstract UNIX
// sockets. Only this thread is restricted, and what it executes.
func scopeAbstractUnix() error {
	// Landlock wants no_new_privs from a process without CAP_SYS_ADMIN;
	// bwrap sets it anyway.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	attr := landlockRulesetAttr{scoped: unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	defer unix.Close(int(fd))
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	return nil
}

// runScoped is the scope step (see ScopeFlag): args is bwrap's command
// line. It returns only on failure, and then nothing has run.
func runScoped(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "sandboxkit: abstract socket scope: "+format+"\n", a...)
		return 2
	}
	if len(args) == 0 {
		return fail("no command")
	}
	if err := ownProc(); err != nil {
		return fail("%v", err)
	}
	// Landlock restricts the calling thread: restrict and execute on
	// the same one.
	runtime.LockOSThread()
	if err := scopeAbstractUnix(); err != nil {
		return fail("%v (the sandbox shares the host network and is not started without it)", err)
	}
	err := syscall.Exec(args[0], nameOnly(args[0], args), os.Environ())
	return fail("exec %s: %v", args[0], err)
}
