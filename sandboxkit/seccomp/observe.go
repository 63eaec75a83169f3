package seccomp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Observing the blocklist in Log mode. SECCOMP_RET_LOG lands in the
// kernel's audit log, which a server cannot read per sandbox. Instead a
// second filter is stacked inside the sandbox that hands each call of
// the blocklist to a listener (SECCOMP_RET_USER_NOTIF) whose descriptor
// the host holds; the host notes the call and lets it continue
// (SECCOMP_USER_NOTIF_FLAG_CONTINUE), as the Log filter would have.
//
// The kernel applies the strongest verdict of all stacked filters, and
// an errno refusal outranks a notification: under Enforce the blocking
// filter answers first, and the listener never sees, let alone allows,
// a refused call. Observation can fail open (no listener: the calls are
// still logged and let through by the Log filter); enforcement never
// depends on it.

// ErrNoListener wraps the reason a listener could not be installed.
var ErrNoListener = errors.New("seccomp: no user-notification listener")

// Listen stacks the observing filter on every thread of this process
// (and so on everything it starts from now on) and returns the
// listener's descriptor, close-on-exec, for the host to Watch. It needs
// Linux 5.7 and no_new_privs (bwrap sets it).
//
// From then on every thread waits in a blocklisted call until the
// listener is served, the Go runtime's own included: a cgo program's
// runtime starts threads with the C library, whose clone3 is
// blocklisted, and can do so at any moment. So the listener must be
// served by another process, and this one must not depend on itself
// until it is: a program that keeps running (a supervisor that hands
// the listener on, say) wants ListenThread.
func Listen() (*os.File, error) {
	return listen(unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH)
}

// ListenThread is Listen for the calling thread alone, and the
// processes it starts from now on: the caller must hold the thread with
// runtime.LockOSThread (and start from it every process to observe),
// else the goroutine moves off the filtered thread and the runtime may
// start threads from it. The runtime's other threads stay unobserved,
// and a locked thread asks the runtime's template thread, which is not
// filtered, for new threads: no thread of this program waits for a
// listener that has no reader yet.
func ListenThread() (*os.File, error) {
	return listen(0)
}

func listen(flags uintptr) (*os.File, error) {
	prog, err := Generate(runtime.GOARCH, notify)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoListener, err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog) / insnSize), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return nil, fmt.Errorf("%w: installing the filter (needs Linux 5.7): %v", ErrNoListener, e)
	}
	unix.CloseOnExec(int(fd))
	return os.NewFile(fd, "seccomp-listener"), nil
}

// Call is one blocklisted call a sandboxed process made while observed.
type Call struct {
	// Syscall is the call's name ("ptrace"), or "syscall N" for a number
	// above the reviewed ones; "x32" for any call through the x32 ABI.
	Syscall string `json:"syscall"`
	// ABI is the system call table (x86_64, i386, aarch64, arm).
	ABI string `json:"abi"`
	// Args shows the first three arguments, e.g. "(0x10000000, 0, 0)".
	Args string `json:"args"`
	// Command is the calling process's name (its comm, at most 15
	// bytes), as the kernel keeps it.
	Command string `json:"command"`
	// Pid is the caller's pid, as the host sees it.
	Pid int `json:"pid"`
	// Refusal is what Enforce mode answers the call: "EPERM", or
	// "ENOSYS" where C libraries fall back to an older call (clone3 →
	// clone), so that a program keeps working.
	Refusal string `json:"refusal"`
}

// ListenerFile wraps a listener descriptor received from a sandbox
// (Listen's, passed over a socket) for Watch: non-blocking and
// close-on-exec, so that the runtime's poller waits on it and a Close
// from another goroutine ends Watch.
func ListenerFile(fd int) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("seccomp: listener: %w", err)
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "seccomp-listener"), nil
}

// Watch serves the listener l (from ListenerFile) until every process
// under its filter has ended (then it returns nil) or l is closed (an
// error wrapping os.ErrClosed): each call is described to report, then
// let continue. report must return quickly: the caller waits for it.
func Watch(l *os.File, report func(Call)) error {
	rc, err := l.SyscallConn()
	if err != nil {
		return err
	}
	names := callNames()
	for {
		var n seccompNotif
		var got bool
		var end error
		err := rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			k, err := unix.Poll(pfd, 0)
			switch {
			case err == unix.EINTR, err == nil && k == 0:
				return false // wait for the poller
			case err != nil:
				end = err
				return true
			case pfd[0].Revents&unix.POLLIN == 0:
				end = io.EOF // POLLHUP: no process is left under the filter
				return true
			}
			_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n)))
			got = e == 0 // ENOENT: the caller went away meanwhile
			return true
		})
		if err != nil {
			return err
		}
		if end == io.EOF {
			return nil
		}
		if end != nil {
			return end
		}
		if !got {
			continue
		}
		c := describe(&n, names)
		// The name (and clone3's flags) are read before the id is
		// checked again: a pid reused after the caller died would name
		// another process.
		c.Command = comm(c.Pid)
		ordinary := c.Syscall == "clone3" && ordinaryClone3(c.Pid, (*notifData)(unsafe.Pointer(&n.data[0])).args[0])
		// Pid 1 of the sandbox is the supervisor that installed the
		// filter (sandboxkit's, not a command): its C library's threads
		// call clone3 too, and its memory is not readable (it is not
		// dumpable).
		ordinary = ordinary || sandboxInit(c.Pid)
		// Reported before it continues: once a command has exited,
		// every call it made is in the report (reported after, the last
		// one could come after the host read the report, and count for
		// the next command).
		rc.Control(func(fd uintptr) {
			id := n.id
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id))); e != 0 {
				return
			}
			if !ordinary {
				report(c)
			}
			r := seccompNotifResp{id: n.id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
			unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&r)))
		})
	}
}

// notifData is struct seccomp_data, in a notification.
type notifData struct {
	nr   int32
	arch uint32
	ip   uint64
	args [6]uint64
}

// callNames maps audit arch and number to the blocklist's names.
func callNames() map[uint32]map[uint32]string {
	out := map[uint32]map[uint32]string{}
	a, ok := archs[runtime.GOARCH]
	if !ok {
		return out
	}
	for _, t := range []abi{a.native, a.compat} {
		m := map[uint32]string{}
		for name, nr := range t.nr {
			m[nr] = name
		}
		out[t.audit] = m
	}
	return out
}

func abiName(audit uint32) string {
	if a, ok := archs[runtime.GOARCH]; ok {
		for _, t := range []abi{a.native, a.compat} {
			if t.audit == audit {
				return t.name
			}
		}
	}
	return fmt.Sprintf("arch %#x", audit)
}

func describe(n *seccompNotif, names map[uint32]map[uint32]string) Call {
	d := (*notifData)(unsafe.Pointer(&n.data[0]))
	c := Call{ABI: abiName(d.arch), Pid: int(n.pid)}
	nr := uint32(d.nr)
	c.Refusal = "ENOSYS"
	switch name, ok := names[d.arch][nr]; {
	case ok:
		c.Syscall = name
		for _, r := range rules {
			if r.name == name {
				c.Refusal = errnoName(int(r.errno))
			}
		}
	case d.arch == auditArchX86_64 && nr&x32Bit != 0:
		c.Syscall, c.ABI = "x32", "x32"
	default:
		c.Syscall = "syscall " + strconv.FormatUint(uint64(nr), 10)
	}
	args := make([]string, 3)
	for i := range args {
		args[i] = "0x" + strconv.FormatUint(d.args[i], 16)
		if d.args[i] == 0 {
			args[i] = "0"
		}
	}
	c.Args = "(" + strings.Join(args, ", ") + ")"
	return c
}

// ordinaryClone3 reports a clone3 call whose struct clone_args, at addr
// in process pid, asks for no new user namespace: the C library's thread
// or process start (glibc tries clone3 first, and falls back to clone on
// the ENOSYS that enforce mode answers), not worth a report. Flags that
// cannot be read are not ordinary.
func ordinaryClone3(pid int, addr uint64) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		return false
	}
	defer f.Close()
	var b [8]byte
	if addr == 0 || addr > 1<<63 {
		return false
	}
	if k, err := f.ReadAt(b[:], int64(addr)); err != nil || k != 8 {
		return false
	}
	flags := *(*uint64)(unsafe.Pointer(&b[0]))
	return flags&cloneNewUser == 0
}

// sandboxInit reports that thread tid belongs to pid 1 of its innermost
// pid namespace (the last NStgid of its status).
func sandboxInit(tid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "NStgid:"); ok {
			f := strings.Fields(rest)
			return len(f) > 1 && f[len(f)-1] == "1"
		}
	}
	return false
}

// comm is the name of process pid, or "?" once it is gone.
func comm(pid int) string {
	b := make([]byte, 32)
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return "?"
	}
	defer f.Close()
	k, _ := f.Read(b)
	s := strings.TrimSuffix(string(b[:k]), "\n")
	if s == "" {
		return "?"
	}
	return strings.ToValidUTF8(s, "?")
}

// ProbeCallsUnobserved makes each call of the probe suite through the
// native table, as RunProbes does but without a listener of its own, so
// that an observer outside (Listen's) sees them: what an observer's test
// runs inside a sandbox in log mode. It returns the name under which
// each call is reported, in order ("syscall N" for the unreviewed
// number). Run it only inside a sandbox whose filter lets the calls
// fail harmlessly (see probeSpec).
func ProbeCallsUnobserved() ([]string, error) {
	a, ok := archs[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("seccomp: no filter for architecture %s", runtime.GOARCH)
	}
	// Persona is per thread: query, set and restore it on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	persona, _, _ := unix.RawSyscall(unix.SYS_PERSONALITY, personalityQuery, 0, 0)
	var names []string
	for _, s := range probeSpecs {
		nr, ok := a.native.nr[s.rule]
		name := s.rule
		if s.rule == unreviewed {
			nr, ok = a.native.reviewed+1, true
			name = "syscall " + strconv.FormatUint(uint64(nr), 10)
		}
		if !ok {
			continue
		}
		args := s.args
		if s.rule == "personality" {
			args[0] |= uint64(uint32(persona))
		}
		unix.Syscall6(uintptr(nr), uintptr(args[0]), uintptr(args[1]), uintptr(args[2]), uintptr(args[3]), uintptr(args[4]), uintptr(args[5]))
		if s.rule == "personality" {
			unix.RawSyscall(unix.SYS_PERSONALITY, persona, 0, 0)
		}
		names = append(names, name)
	}
	return names, nil
}
