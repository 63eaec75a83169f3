package seccomp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The probe suite makes every call of the blocklist from inside a real
// sandbox and learns, for each, whether the sandbox's filter let it
// through. It cannot ask the outer filter; instead it stacks a filter
// of its own that sends the same calls to a listener in this process
// (SECCOMP_RET_USER_NOTIF). The kernel applies the strongest verdict of
// all stacked filters, and an errno refusal outranks a notification,
// while a notification outranks log and allow: the listener sees a call
// exactly when the sandbox's filter did not refuse it. The listener
// then lets the call run (SECCOMP_USER_NOTIF_FLAG_CONTINUE), with
// arguments that make it fail harmlessly (EFAULT, EBADF, EINVAL, ESRCH,
// or EPERM for want of a capability).

// ProbeCall is the outcome of one probed call.
type ProbeCall struct {
	// Call shows the call and its arguments, e.g. "clone(1<<32|CLONE_NEWUSER|CLONE_THREAD)".
	Call string `json:"call"`
	// Rule is the blocklist rule it exercises ("x32" for the x32 ABI).
	Rule string `json:"rule"`
	// ABI is the system call table it went through: x86_64, i386 (int
	// $0x80), x32, aarch64.
	ABI string `json:"abi"`
	// Reached reports that the call passed the sandbox's filter.
	Reached bool `json:"reached"`
	// Errno is what the call returned; 0 is success.
	Errno int `json:"errno"`
	// Refusal is the errno the rule asks for under Enforce.
	Refusal int `json:"refusal"`
	// Why is the rule's escape class.
	Why string `json:"why"`
}

// ProbeCheck is one thing that must keep working under a filter.
type ProbeCheck struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Skipped reports a check that could not run here (a toolchain the
	// host does not have); OK is false.
	Skipped bool   `json:"skipped,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// ProbeReport is what the probe program found inside one sandbox.
type ProbeReport struct {
	Arch  string       `json:"arch"` // GOARCH
	Calls []ProbeCall  `json:"calls"`
	Works []ProbeCheck `json:"works"`
	// CompatProbed reports that the compat table (i386, arm32) was
	// reached and probed; Compat says how, or why not.
	CompatProbed bool   `json:"compat_probed"`
	Compat       string `json:"compat"`
}

// Verdict says whether the call behaved as a sandbox whose filter is in
// mode m must: refused with the rule's errno under Enforce, let through
// under Log and Off. It returns nil when it did.
func (c ProbeCall) Verdict(m Mode) error {
	switch m {
	case Enforce:
		if c.Reached {
			return fmt.Errorf("%s passed the filter (%s)", c.Call, errnoName(c.Errno))
		}
		if c.Errno != c.Refusal {
			return fmt.Errorf("%s was refused with %s, want %s", c.Call, errnoName(c.Errno), errnoName(c.Refusal))
		}
	case Log, Off:
		if !c.Reached {
			return fmt.Errorf("%s was refused (%s) with the filter in %s mode", c.Call, errnoName(c.Errno), m)
		}
	default:
		return fmt.Errorf("unknown mode %q", m)
	}
	return nil
}

// Failures lists every result of r that breaks the promise of mode m:
// a call judged by Verdict, or something that must keep working and did
// not. Empty means the report is all-pass.
func (r *ProbeReport) Failures(m Mode) []string {
	var out []string
	for _, c := range r.Calls {
		if err := c.Verdict(m); err != nil {
			out = append(out, fmt.Sprintf("%s %s: %v", m, c.ABI, err))
		}
	}
	for _, w := range r.Works {
		if !w.OK {
			out = append(out, fmt.Sprintf("%s: %s broke: %s", m, w.Name, w.Detail))
		}
	}
	return out
}

// Outcome is the short form for a matrix cell: "refused EPERM", or
// "passed EINVAL" with what the kernel itself said.
func (c ProbeCall) Outcome() string {
	if c.Reached {
		return "passed " + errnoName(c.Errno)
	}
	return "refused " + errnoName(c.Errno)
}

func errnoName(e int) string {
	if e == 0 {
		return "ok"
	}
	if n := unix.ErrnoName(unix.Errno(e)); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", e)
}

const (
	cloneThread = 0x10000 // CLONE_THREAD
	afAlg       = 38
	afVsock     = 40
	sockBadFlag = 0x40000000 // a socket type flag that does not exist: EINVAL
	hi          = 1 << 32
	none        = ^uint64(0) // -1 as a descriptor or flags
	noPid       = 0x7ffffffe // above any pid_max
	// addrNoRandomize is a persona flag the filter refuses; a probe that
	// passes sets it and restores the persona at once.
	addrNoRandomize = 0x0040000
)

// probeSpec is one call of the suite. Arguments make the call fail
// harmlessly when the filter lets it through.
type probeSpec struct {
	rule, call string
	args       [6]uint64
	// wide marks calls whose point is bits above 32: only the 64-bit
	// table takes them.
	wide bool
}

var probeSpecs = []probeSpec{
	{rule: "unshare", call: "unshare(~0)", args: [6]uint64{none}},
	{rule: "setns", call: "setns(-1, 0)", args: [6]uint64{none}},
	{rule: "clone", call: "clone(CLONE_NEWUSER|CLONE_THREAD)", args: [6]uint64{cloneNewUser | cloneThread}},
	{rule: "clone", call: "clone(1<<32|CLONE_NEWUSER|CLONE_THREAD)", args: [6]uint64{hi | cloneNewUser | cloneThread}, wide: true},
	{rule: "clone3", call: "clone3(NULL, 0)"},
	{rule: "mount", call: "mount(1, 1, 1, 0, 0)", args: [6]uint64{1, 1, 1}},
	{rule: "umount", call: "umount(1)", args: [6]uint64{1}},
	{rule: "umount2", call: "umount2(1, ~0)", args: [6]uint64{1, none}},
	{rule: "pivot_root", call: "pivot_root(1, 1)", args: [6]uint64{1, 1}},
	{rule: "chroot", call: "chroot(1)", args: [6]uint64{1}},
	{rule: "open_tree", call: "open_tree(-1, 1, ~0)", args: [6]uint64{none, 1, none}},
	{rule: "move_mount", call: "move_mount(-1, 1, -1, 1, ~0)", args: [6]uint64{none, 1, none, 1, none}},
	{rule: "fsopen", call: "fsopen(1, ~0)", args: [6]uint64{1, none}},
	{rule: "fsconfig", call: "fsconfig(-1, ~0, 0, 0, 0)", args: [6]uint64{none, none}},
	{rule: "fsmount", call: "fsmount(-1, ~0, 0)", args: [6]uint64{none, none}},
	{rule: "fspick", call: "fspick(-1, 1, ~0)", args: [6]uint64{none, 1, none}},
	{rule: "mount_setattr", call: "mount_setattr(-1, 1, ~0, 0, 0)", args: [6]uint64{none, 1, none}},
	{rule: "open_tree_attr", call: "open_tree_attr(-1, 1, ~0, 0, 0)", args: [6]uint64{none, 1, none}},
	{rule: "ioctl", call: "ioctl(-1, TIOCSTI)", args: [6]uint64{none, tiocsti}},
	{rule: "ioctl", call: "ioctl(-1, TIOCLINUX)", args: [6]uint64{none, tioclinux}},
	{rule: "ioctl", call: "ioctl(-1, TIOCSETD)", args: [6]uint64{none, tiocsetd}},
	{rule: "ioctl", call: "ioctl(-1, 1<<32|TIOCSTI)", args: [6]uint64{none, hi | tiocsti}, wide: true},
	{rule: "ioctl", call: "ioctl(-1, 1<<32|TIOCSETD)", args: [6]uint64{none, hi | tiocsetd}, wide: true},
	{rule: "ptrace", call: "ptrace(PTRACE_ATTACH, no pid)", args: [6]uint64{16, noPid}},
	{rule: "process_vm_readv", call: "process_vm_readv(no pid, …, flags ~0)", args: [6]uint64{noPid, 0, 0, 0, 0, none}},
	{rule: "process_vm_writev", call: "process_vm_writev(no pid, …, flags ~0)", args: [6]uint64{noPid, 0, 0, 0, 0, none}},
	{rule: "pidfd_getfd", call: "pidfd_getfd(-1, -1, ~0)", args: [6]uint64{none, none, none}},
	{rule: "kcmp", call: "kcmp(no pid, no pid, ~0, 0, 0)", args: [6]uint64{noPid, noPid, none}},
	{rule: "process_madvise", call: "process_madvise(-1, 0, 0, 0, ~0)", args: [6]uint64{none, 0, 0, 0, none}},
	{rule: "prctl", call: "prctl(PR_SET_MM, 0xffff)", args: [6]uint64{prSetMM, 0xffff}},
	{rule: "prctl", call: "prctl(1<<32|PR_SET_MM, 0xffff)", args: [6]uint64{hi | prSetMM, 0xffff}, wide: true},
	{rule: "perf_event_open", call: "perf_event_open(NULL, 0, -1, -1, ~0)", args: [6]uint64{0, 0, none, none, none}},
	{rule: "bpf", call: "bpf(BPF_MAP_CREATE, 1, 8)", args: [6]uint64{0, 1, 8}},
	{rule: "userfaultfd", call: "userfaultfd(~0)", args: [6]uint64{none}},
	{rule: "io_uring_setup", call: "io_uring_setup(1, 1)", args: [6]uint64{1, 1}},
	{rule: "io_uring_enter", call: "io_uring_enter(-1, 0, 0, 0, 0, 0)", args: [6]uint64{none}},
	{rule: "io_uring_register", call: "io_uring_register(-1, 0, 0, 0)", args: [6]uint64{none}},
	{rule: "keyctl", call: "keyctl(0xffff)", args: [6]uint64{0xffff}},
	{rule: "add_key", call: "add_key(1, 1, 0, 0, 0)", args: [6]uint64{1, 1}},
	{rule: "request_key", call: "request_key(1, 1, 0, 0)", args: [6]uint64{1, 1}},
	{rule: "fanotify_init", call: "fanotify_init(~0, ~0)", args: [6]uint64{none, none}},
	{rule: "kexec_load", call: "kexec_load(0, 0, 0, ~0)", args: [6]uint64{0, 0, 0, none}},
	{rule: "kexec_file_load", call: "kexec_file_load(-1, -1, 0, 0, ~0)", args: [6]uint64{none, none, 0, 0, none}},
	{rule: "init_module", call: "init_module(1, 0, 1)", args: [6]uint64{1, 0, 1}},
	{rule: "finit_module", call: "finit_module(-1, 1, ~0)", args: [6]uint64{none, 1, none}},
	{rule: "delete_module", call: "delete_module(1, 0)", args: [6]uint64{1}},
	{rule: "open_by_handle_at", call: "open_by_handle_at(-1, 1, 0)", args: [6]uint64{none, 1}},
	{rule: "syslog", call: "syslog(0xffff, 0, 0)", args: [6]uint64{0xffff}},
	{rule: "acct", call: "acct(1)", args: [6]uint64{1}},
	{rule: "quotactl", call: "quotactl(~0, 1, 0, 0)", args: [6]uint64{none, 1}},
	{rule: "quotactl_fd", call: "quotactl_fd(-1, ~0, 0, 0)", args: [6]uint64{none, none}},
	{rule: "uselib", call: "uselib(1)", args: [6]uint64{1}},
	{rule: "modify_ldt", call: "modify_ldt(0xffff, 0, 0)", args: [6]uint64{0xffff}},
	// The current persona is or-ed into args[0] at run time, and a call
	// that passes is undone at once.
	{rule: "personality", call: "personality(current|ADDR_NO_RANDOMIZE)", args: [6]uint64{addrNoRandomize}},
	{rule: "personality", call: "personality(1<<32|current|ADDR_NO_RANDOMIZE)", args: [6]uint64{hi | addrNoRandomize}, wide: true},
	{rule: "mbind", call: "mbind(0, 0, 0xffff, 0, 0, 0)", args: [6]uint64{0, 0, 0xffff}},
	{rule: "set_mempolicy", call: "set_mempolicy(0xffff, 0, 0)", args: [6]uint64{0xffff}},
	{rule: "get_mempolicy", call: "get_mempolicy(1, 0, 0, 0, ~0)", args: [6]uint64{1, 0, 0, 0, none}},
	{rule: "migrate_pages", call: "migrate_pages(no pid, 0, 0, 0)", args: [6]uint64{noPid}},
	{rule: "move_pages", call: "move_pages(no pid, 0, 0, 0, 0, ~0)", args: [6]uint64{noPid, 0, 0, 0, 0, none}},
	{rule: "set_mempolicy_home_node", call: "set_mempolicy_home_node(0, 0, 0, ~0)", args: [6]uint64{0, 0, 0, none}},
	{rule: "socket", call: "socket(AF_ALG, bad flag)", args: [6]uint64{afAlg, sockBadFlag}},
	{rule: "socket", call: "socket(AF_VSOCK, bad flag)", args: [6]uint64{afVsock, sockBadFlag}},
	{rule: "socket", call: "socket(1<<32|AF_ALG, bad flag)", args: [6]uint64{hi | afAlg, sockBadFlag}, wide: true},
	{rule: "socketpair", call: "socketpair(AF_VSOCK, bad flag, 0, NULL)", args: [6]uint64{afVsock, sockBadFlag}},
	{rule: "socketpair", call: "socketpair(AF_INET, bad flag, 0, NULL)", args: [6]uint64{afInet, sockBadFlag}},
	{rule: "socketpair", call: "socketpair(1<<32|AF_VSOCK, bad flag, 0, NULL)", args: [6]uint64{hi | afVsock, sockBadFlag}, wide: true},
	{rule: "socketcall", call: "socketcall(SYS_SOCKET, 1)", args: [6]uint64{sysSocket, 1}},
	{rule: "socketcall", call: "socketcall(SYS_SOCKETPAIR, 1)", args: [6]uint64{sysSocketpair, 1}},
	// The first number above the reviewed ones (abi.reviewed), whatever
	// a newer kernel made of it; pointers of ~0 fault.
	{rule: unreviewed, call: "first unreviewed number (~0, …)", args: [6]uint64{none, none, none, none, none, none}},
}

// unreviewed is the probe's rule name for numbers above abi.reviewed.
const unreviewed = "unreviewed"

// seccompNotif is struct seccomp_notif.
type seccompNotif struct {
	id    uint64
	pid   uint32
	flags uint32
	data  [64]byte
}

// seccompNotifResp is struct seccomp_notif_resp.
type seccompNotifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// listener counts the calls its filter hands it and lets each run.
type listener struct {
	fd   int
	seen atomic.Uint64
}

func (l *listener) serve() {
	var n seccompNotif
	for {
		n = seccompNotif{}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n))); e != 0 {
			if e == unix.EINTR || e == unix.ENOENT {
				continue
			}
			return // the fd was closed: the probe is done
		}
		l.seen.Add(1)
		r := seccompNotifResp{id: n.id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		unix.Syscall(unix.SYS_IOCTL, uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&r)))
	}
}

// RunProbes makes the calls of the suite in this process and checks
// what must keep working. Run it only inside a sandbox: sandboxkit runs
// it for Probe, through the program's own binary (see sandboxkit.Main).
// It installs a filter on one thread of this process, which ends with
// the probe.
func RunProbes() (*ProbeReport, error) {
	rep := &ProbeReport{Arch: runtime.GOARCH}
	a, ok := archs[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("seccomp: no filter for architecture %s", runtime.GOARCH)
	}
	prog, err := Generate(runtime.GOARCH, notify)
	if err != nil {
		return nil, err
	}
	// A compat call does not release its P while it waits for the
	// listener, and a collection would wait for it: keep a second P and
	// the collector off.
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))

	compat, why := compatAvailable()
	rep.CompatProbed, rep.Compat = compat, why
	type result struct {
		calls []ProbeCall
		err   error
	}
	done := make(chan result, 1)
	go func() {
		// The filter goes on this thread alone, and the thread ends with
		// the goroutine, still locked.
		runtime.LockOSThread()
		calls, err := probeCalls(a, prog, compat)
		done <- result{calls, err}
	}()
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	rep.Calls = r.calls
	rep.Works = works()
	return rep, nil
}

func probeCalls(a *arch, prog []byte, compat bool) ([]ProbeCall, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("seccomp probe: no_new_privs: %w", err)
	}
	insns := len(prog) / insnSize
	fprog := unix.SockFprog{Len: uint16(insns), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return nil, fmt.Errorf("seccomp probe: install the listener filter (needs Linux 5.5): %w", e)
	}
	l := &listener{fd: int(fd)}
	go l.serve()
	defer unix.Close(l.fd)

	persona, _, _ := unix.RawSyscall(unix.SYS_PERSONALITY, personalityQuery, 0, 0)
	var calls []ProbeCall
	probe := func(t abi, s probeSpec, nr uint32, compat bool) {
		args := s.args
		if s.rule == "personality" {
			args[0] |= uint64(uint32(persona))
		}
		refusal, why := probeRule(s.rule)
		before := l.seen.Load()
		var e unix.Errno
		if compat {
			e = compatCall(nr, args)
		} else {
			_, _, e = unix.Syscall6(uintptr(nr), uintptr(args[0]), uintptr(args[1]), uintptr(args[2]), uintptr(args[3]), uintptr(args[4]), uintptr(args[5]))
		}
		if s.rule == "personality" {
			// Undo a persona that passed, through the native table
			// (the restore itself is allowed: it is the current persona,
			// or the query).
			unix.RawSyscall(unix.SYS_PERSONALITY, persona, 0, 0)
		}
		calls = append(calls, ProbeCall{Call: s.call, Rule: s.rule, ABI: t.name, Reached: l.seen.Load() != before, Errno: int(e), Refusal: int(refusal), Why: why})
	}
	number := func(t abi, rule string) (uint32, bool) {
		if rule == unreviewed {
			return t.reviewed + 1, true
		}
		nr, ok := t.nr[rule]
		return nr, ok
	}
	for _, s := range probeSpecs {
		if nr, ok := number(a.native, s.rule); ok {
			probe(a.native, s, nr, false)
		}
	}
	if compat {
		for _, s := range probeSpecs {
			if nr, ok := number(a.compat, s.rule); ok && !s.wide {
				probe(a.compat, s, nr, true)
			}
		}
	}
	if a.x32 {
		before := l.seen.Load()
		_, _, e := unix.Syscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
		calls = append(calls, ProbeCall{Call: "getpid through x32", Rule: "x32", ABI: "x32", Reached: l.seen.Load() != before, Errno: int(e), Refusal: int(enosys),
			Why: "x32 ABI: a second table of numbers (refused whole)"})
	}
	if p, _, _ := unix.RawSyscall(unix.SYS_PERSONALITY, personalityQuery, 0, 0); p != persona {
		return nil, fmt.Errorf("seccomp probe: personality changed from %#x to %#x", persona, p)
	}
	return calls, nil
}

// probeRule is the refusal and escape class of a probed rule.
func probeRule(name string) (errno, string) {
	if name == unreviewed {
		return enosys, unreviewedWhy
	}
	for _, r := range rules {
		if r.name == name {
			return r.errno, r.why
		}
	}
	panic("seccomp: probe for unknown rule " + name)
}

// works checks what a blocklist must leave alone.
func works() []ProbeCheck {
	var out []ProbeCheck
	check := func(name string, f func() error) {
		err := f()
		c := ProbeCheck{Name: name, OK: err == nil}
		if err != nil {
			c.Detail = err.Error()
		}
		out = append(out, c)
	}
	check("fork and exec", func() error {
		b, err := exec.Command("/bin/sh", "-c", "echo forked").Output()
		if err != nil || strings.TrimSpace(string(b)) != "forked" {
			return fmt.Errorf("sh -c: %q, %v", b, err)
		}
		return nil
	})
	check("threads", func() error {
		// Each goroutine holds its own OS thread: the runtime must
		// clone new ones.
		const n = 8
		tids := make(chan int, n)
		release := make(chan struct{})
		for range n {
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				tids <- unix.Gettid()
				<-release
			}()
		}
		seen := map[int]bool{}
		for range n {
			seen[<-tids] = true
		}
		close(release)
		if len(seen) != n {
			return fmt.Errorf("%d goroutines ran on %d threads", n, len(seen))
		}
		return nil
	})
	check("TCP on loopback", func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Write([]byte("pong"))
				c.Close()
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		b := make([]byte, 4)
		if _, err := c.Read(b); err != nil || string(b) != "pong" {
			return fmt.Errorf("read %q: %v", b, err)
		}
		return nil
	})
	check("UNIX socket pair", func() error {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		if _, err := unix.Write(fds[0], []byte("hi")); err != nil {
			return err
		}
		b := make([]byte, 2)
		if n, err := unix.Read(fds[1], b); err != nil || string(b[:n]) != "hi" {
			return fmt.Errorf("read %q: %v", b[:n], err)
		}
		return nil
	})
	check("netlink socket", func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
	check("prctl", func() error {
		if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("probe\x00")[0])), 0, 0, 0); err != nil {
			return fmt.Errorf("PR_SET_NAME: %w", err)
		}
		var name [16]byte
		if err := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
			return fmt.Errorf("PR_GET_NAME: %w", err)
		}
		if got := unix.ByteSliceToString(name[:]); got != "probe" {
			return fmt.Errorf("PR_GET_NAME = %q after PR_SET_NAME probe", got)
		}
		return nil
	})
	check("mmap and mprotect", func() error {
		b, err := unix.Mmap(-1, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		defer unix.Munmap(b)
		b[0], b[len(b)-1] = 1, 2
		return unix.Mprotect(b, unix.PROT_READ)
	})
	check("personality query", func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, personalityQuery, 0, 0); e != 0 {
			return e
		}
		return nil
	})
	check("personality(PER_LINUX32) and back", func() error {
		// What linux32 / setarch i686 do before running a 32-bit build.
		// Persona is per thread: set and restore it on one.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		old, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, personalityQuery, 0, 0)
		if e != 0 {
			return fmt.Errorf("query: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, perLinux32, 0, 0); e != 0 {
			return fmt.Errorf("PER_LINUX32: %w", e)
		}
		var u unix.Utsname
		err := unix.Uname(&u)
		if _, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, old, 0, 0); e != 0 {
			return fmt.Errorf("restore %#x: %w", old, e)
		}
		if m := unix.ByteSliceToString(u.Machine[:]); err != nil || (runtime.GOARCH == "amd64" && m != "i686") {
			return fmt.Errorf("uname under PER_LINUX32: %q, %v", m, err)
		}
		return nil
	})
	check("ioctl on a terminal-less fd", func() error {
		// An ordinary ioctl must still reach the kernel: TCGETS on a
		// pipe answers ENOTTY, not the filter's EPERM.
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		defer w.Close()
		_, err = unix.IoctlGetTermios(int(r.Fd()), unix.TCGETS)
		if !errors.Is(err, unix.ENOTTY) {
			return fmt.Errorf("TCGETS on a pipe: %v, want ENOTTY", err)
		}
		return nil
	})
	return out
}
