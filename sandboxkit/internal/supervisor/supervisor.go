package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// The supervisor is pid 1 of a Session's sandbox: the host binary,
// re-executed by bwrap (see Main). It starts the commands the host asks
// for, reaps every process of the sandbox, and exits when the control
// socket closes; the kernel then kills everything left in the pid
// namespace.
//
// Control protocol: one SOCK_SEQPACKET record per message, JSON. A start
// request carries the command's stdin, stdout and stderr as SCM_RIGHTS,
// so output flows from the command straight into the host's pipes.

// SupervisorFlag is os.Args[1] of the re-executed binary.
const SupervisorFlag = "--sandboxkit-supervisor"

// ObserveFlag, after the supervisor's descriptors, asks it to observe
// the seccomp blocklist (seccomp.Listen) and send the host the listener
// with its ready message.
const ObserveFlag = "observe"

// Causes of a command that did not start (StartError.Cause).
const (
	CauseNotFound      = "not-found"
	CauseNotExecutable = "not-executable"
)

const (
	// maxInlineRequest is the largest request sent as the record itself.
	// Larger ones (long scripts, big environments) travel in a sealed
	// memfd: a record cannot exceed the socket buffer (about 200 KiB).
	maxInlineRequest = 32 << 10
	// maxRequest bounds argv and environment together; execve itself
	// refuses much more than this.
	maxRequest = 8 << 20
	// maxRequestFds bounds the descriptors of one request: stdio, bwrap's
	// own (status, control, executable, files) and the request blob.
	maxRequestFds = 32
)

type ctlRequest struct {
	Op   string   `json:"op"` // "start" or "kill"
	ID   uint64   `json:"id"`
	Args []string `json:"args,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// Blob says the request is in the memfd passed after the stdio fds.
	Blob bool `json:"blob,omitempty"`
	// Cgroup (spawner only) is how many of the fds, at the end, put the
	// new process in its cgroup (cgroup.Join.Files); CgroupV2 says which
	// kind.
	Cgroup   int  `json:"cgroup,omitempty"`
	CgroupV2 bool `json:"cgroup_v2,omitempty"`
}

type ctlReply struct {
	Op   string `json:"op"` // "ready", "started", "failed" or "exited"
	ID   uint64 `json:"id,omitempty"`
	Pid  int    `json:"pid,omitempty"`
	Code int    `json:"code,omitempty"`
	Err  string `json:"err,omitempty"`
	// Cause says why a command did not start, when known (StartError.Cause).
	Cause string `json:"cause,omitempty"`
	// Listener (ready): the seccomp listener's descriptor comes with the
	// message; NoListener says why there is none when one was asked for.
	Listener   bool   `json:"listener,omitempty"`
	NoListener string `json:"no_listener,omitempty"`
}

type supervisor struct {
	ctl *os.File
	// spawner: children are bwraps, each pid 1 of a new pid namespace,
	// and may get descriptors beyond stdio.
	spawner bool

	// mu orders starts against reaping: a command is in procs before
	// the reaper can see it exit.
	mu    sync.Mutex
	procs map[int]uint64 // pid (= process group) → request id
	byID  map[uint64]int
}

// supervise runs the supervisor; args are the control and executable
// fds, then ObserveFlag to observe the seccomp blocklist,
// then EgressBridgeFlag to run the egress bridge (bridge.go).
func supervise(args []string) int {
	bridge := len(args) > 2 && args[len(args)-1] == EgressBridgeFlag
	if bridge {
		args = args[:len(args)-1]
	}
	observe := len(args) == 3 && args[2] == ObserveFlag
	if observe {
		args = args[:2]
	}
	if len(args) != 2 {
		return supervisorFail("want the control and executable descriptors, got %q", args)
	}
	ctl, err1 := strconv.Atoi(args[0])
	exe, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil || ctl < 3 || exe < 3 {
		return supervisorFail("bad descriptors %q", args)
	}
	// The executable was opened by the host for bwrap to exec; nothing
	// here needs it.
	unix.Close(exe)
	if bridge {
		// Up before the first command: the way out through the egress
		// proxy (bridge.go).
		ln, err := listenBridge()
		if err != nil {
			return supervisorFail("egress bridge: %v", err)
		}
		go egress.Bridge(ln, EgressSocket)
	}
	return serveControl(ctl, false, observe)
}

// spawn runs the spawner (spawner.go); args are the control fd, then
// RLIMIT_FSIZE and RLIMIT_NOFILE (0: inherited).
func spawn(args []string) int {
	if len(args) != 3 {
		return supervisorFail("want the control descriptor and two rlimits, got %q", args)
	}
	ctl, err := strconv.Atoi(args[0])
	if err != nil || ctl < 3 {
		return supervisorFail("bad descriptor %q", args)
	}
	// Hard and soft, so that nothing below can raise them; every bwrap
	// and sandbox inherits them. syscall.Setrlimit, not x/sys: for
	// RLIMIT_NOFILE it stops Go from restoring the original in children.
	set := []struct {
		res int
		arg string
	}{{unix.RLIMIT_CORE, "0"}, {unix.RLIMIT_FSIZE, args[1]}, {unix.RLIMIT_NOFILE, args[2]}}
	for i, r := range set {
		n, err := strconv.ParseUint(r.arg, 10, 64)
		if err != nil {
			return supervisorFail("bad rlimit %q", r.arg)
		}
		if n == 0 && i > 0 {
			continue
		}
		if err := syscall.Setrlimit(r.res, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			return supervisorFail("setrlimit %d to %d: %v", r.res, n, err)
		}
	}
	return serveControl(ctl, true, false)
}

func supervisorFail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "sandboxkit supervisor: "+format+"\n", a...)
	return 2
}

// serveControl is the supervisor's life as pid 1, in a Session's sandbox
// or as the spawner.
func serveControl(ctl int, spawner, observe bool) int {
	fail := supervisorFail
	if os.Getpid() != 1 {
		return fail("runs only as pid 1 of a Session sandbox or of the spawner's namespace")
	}
	// Whatever bwrap left open (its status pipe, anything inherited) must
	// not reach the commands: the fork below keeps every descriptor that
	// is not close-on-exec. The control socket is close-on-exec too.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail("close_range: %v", err)
	}
	// Commands run as the same uid: without this they could ptrace the
	// supervisor or open /proc/1/fd and take the control socket.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail("PR_SET_DUMPABLE: %v", err)
	}
	name := []byte("sandboxkit\x00")
	if spawner {
		name = []byte("sandboxkit-spwn\x00")
	}
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)

	// Pid 1 gets only the signals it handles. Catch them all so that a
	// command's kill(1, ...) neither stops nor crashes the supervisor; a
	// caught (not ignored) signal is reset to default in the commands.
	ignored := make(chan os.Signal, 16)
	signal.Notify(ignored)
	go func() {
		for range ignored {
		}
	}()
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)

	if spawner || observe {
		// The spawner: children's Pdeathsig follows the thread that
		// forked them. Observing: the listener's filter is on this
		// thread alone (see ready), and commands inherit it from the
		// thread that forks them. Either way serve forks from this
		// thread, which lives as long as the process. Never unlocked.
		runtime.LockOSThread()
	}
	if spawner {
		if err := dropInheritedCaps(); err != nil {
			return fail("capabilities: %v", err)
		}
	}
	if err := unix.SetNonblock(ctl, true); err != nil {
		return fail("control socket: %v", err)
	}
	sv := &supervisor{ctl: os.NewFile(uintptr(ctl), "sandboxkit-control"), spawner: spawner, procs: map[int]uint64{}, byID: map[uint64]int{}}
	go sv.reap(chld)
	if err := sv.ready(observe); err != nil {
		return fail("control socket: %v", err)
	}
	sv.serve()
	// The host closed the socket (Close, or it died): returning exits pid
	// 1, and the kernel kills the rest of the namespace.
	return 0
}

// dropInheritedCaps keeps CAP_SYS_ADMIN in this thread's effective and
// permitted sets (to create pid namespaces) but clears the ambient and
// inheritable sets, so that bwrap, executed from this thread, starts
// with no capability: bwrap refuses to run with capabilities when it is
// not setuid.
func dropInheritedCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

func (sv *supervisor) send(r ctlReply) error {
	// A reply must fit the host's read buffer, whatever the request held.
	if len(r.Err) > 1024 {
		r.Err = r.Err[:1024] + "..."
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = sv.ctl.Write(b)
	return err
}

// serve handles requests until the control socket closes.
func (sv *supervisor) serve() {
	rc, err := sv.ctl.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(maxRequestFds*4))
	for {
		var n, oobn, flags int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
			return rerr != unix.EAGAIN
		})
		if err != nil || (rerr != nil && rerr != unix.EINTR) || (rerr == nil && n == 0 && oobn == 0) {
			return
		}
		if rerr == unix.EINTR {
			continue
		}
		fds := parseRights(oob[:oobn])
		var req ctlRequest
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			err = errors.New("request truncated")
		} else {
			err = json.Unmarshal(buf[:n], &req)
		}
		if err == nil && req.Blob {
			err = readBlob(&req, &fds)
		}
		switch {
		case err != nil:
			closeFds(fds)
			sv.send(ctlReply{Op: "failed", ID: req.ID, Err: "bad request: " + err.Error()})
		case req.Op == "start":
			sv.start(&req, fds)
		case req.Op == "kill":
			closeFds(fds)
			sv.kill(req.ID)
		default:
			closeFds(fds)
			sv.send(ctlReply{Op: "failed", ID: req.ID, Err: "unknown request " + strconv.Quote(req.Op)})
		}
	}
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// readBlob replaces req with the request in the memfd that is the last of
// fds, and drops that fd from fds.
func readBlob(req *ctlRequest, fds *[]int) error {
	if len(*fds) == 0 {
		return errors.New("request blob missing")
	}
	last := len(*fds) - 1
	f := os.NewFile(uintptr((*fds)[last]), "request")
	*fds = (*fds)[:last]
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(io.NewSectionReader(f, 0, maxRequest+1), maxRequest+1))
	if err != nil {
		return err
	}
	if len(b) > maxRequest {
		return errors.New("request too large")
	}
	id := req.ID
	*req = ctlRequest{}
	if err := json.Unmarshal(b, req); err != nil {
		return err
	}
	req.ID = id
	return nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// start forks and execs one command with the fds it was sent as 0, 1,
// 2, ...: a Session's commands get exactly stdio.
func (sv *supervisor) start(req *ctlRequest, fds []int) {
	defer closeFds(fds)
	failed := func(err, cause string) {
		sv.send(ctlReply{Op: "failed", ID: req.ID, Err: err, Cause: cause})
	}
	var cg []int
	if req.Cgroup > 0 {
		if !sv.spawner || req.Cgroup > len(fds) || (!req.CgroupV2 && req.Cgroup%2 != 0) || (req.CgroupV2 && req.Cgroup != 1) {
			failed(fmt.Sprintf("bad cgroup request: %d descriptors", req.Cgroup), "")
			return
		}
		cg, fds = fds[len(fds)-req.Cgroup:], fds[:len(fds)-req.Cgroup]
	}
	if len(fds) < 3 || (!sv.spawner && len(fds) != 3) || len(req.Args) == 0 {
		failed(fmt.Sprintf("bad start request: %d descriptors, %d args", len(fds), len(req.Args)), "")
		return
	}
	if req.Dir != "" {
		// Checked here because a failed chdir in the child is reported
		// like a missing executable.
		if fi, err := os.Stat(req.Dir); err != nil || !fi.IsDir() {
			failed(fmt.Sprintf("working directory %s: not a directory in the sandbox", req.Dir), "")
			return
		}
	}
	path, err := lookPath(req.Args[0], req.Env, req.Dir)
	if err != nil {
		failed(err.Error(), CauseNotFound)
		return
	}
	files := make([]uintptr, len(fds))
	for i, fd := range fds {
		files[i] = uintptr(fd)
	}
	attr := &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   req.Env,
		Files: files,
		// Its own session and process group, so that a kill reaches the
		// command and everything it started.
		Sys: &syscall.SysProcAttr{Setsid: true},
	}
	if sv.spawner {
		// bwrap is pid 1 of its own pid namespace: killing it, at any
		// moment of its set-up, kills its sandbox. Without CLONE_NEWUSER
		// Go still forks with vfork, which keeps a launch cheap.
		attr.Sys.Cloneflags = syscall.CLONE_NEWPID
		attr.Sys.Pdeathsig = syscall.SIGKILL
		if IsLaunchStep(req.Args) {
			// Its own /proc before bwrap runs: see launchstep.go.
			attr.Sys.Cloneflags |= syscall.CLONE_NEWNS
			attr.Sys.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
		}
	}
	argv := req.Args
	if sv.spawner {
		// bwrap's command line is readable in its sandbox (a one-shot
		// sandbox's pid 1 is bwrap's init): its name, not its host path.
		argv = nameOnly(path, req.Args)
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	var pid int
	if len(cg) > 0 {
		pid, err = forkInCgroup(path, argv, attr, cg, req.CgroupV2)
	} else {
		pid, err = syscall.ForkExec(path, argv, attr)
	}
	if err != nil {
		cause := ""
		switch {
		case errors.Is(err, syscall.ENOENT):
			cause = CauseNotFound
		case errors.Is(err, syscall.EACCES):
			cause = CauseNotExecutable
		}
		failed(fmt.Sprintf("exec %s: %v", req.Args[0], err), cause)
		return
	}
	sv.procs[pid] = req.ID
	sv.byID[req.ID] = pid
	sv.send(ctlReply{Op: "started", ID: req.ID, Pid: pid})
}

// nameOnly is argv with argv[0] replaced by the base name of path: what
// the spawner and the launch steps execute bwrap (or a step) with.
func nameOnly(path string, argv []string) []string {
	return append([]string{filepath.Base(path)}, argv[1:]...)
}

// forkInCgroup starts the child inside its cgroup from its first
// instruction, so that nothing it forks escapes the group. v2: clone3's
// CLONE_INTO_CGROUP with the group's directory (cg[0]). v1: writing "0"
// to a tasks file moves the writing thread alone; this thread (locked:
// serveControl) enters the group's tasks files (the first half of cg),
// forks, and leaves to the subtree's root (the second half).
func forkInCgroup(path string, argv []string, attr *syscall.ProcAttr, cg []int, v2 bool) (int, error) {
	if v2 {
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, cg[0]
		return syscall.ForkExec(path, argv, attr)
	}
	enter, leave := cg[:len(cg)/2], cg[len(cg)/2:]
	move := func(fds []int) error {
		for _, fd := range fds {
			if _, err := unix.Write(fd, []byte("0")); err != nil {
				return err
			}
		}
		return nil
	}
	err := move(enter)
	pid := 0
	if err == nil {
		pid, err = syscall.ForkExec(path, argv, attr)
	} else {
		err = fmt.Errorf("enter the sandbox's cgroup: %w", err)
	}
	if lerr := move(leave); lerr != nil {
		// This thread stays in the group: whatever it starts next would
		// too. Dying kills every sandbox of this spawner; the host starts
		// a new one.
		fmt.Fprintf(os.Stderr, "sandboxkit spawner: cannot leave a sandbox's cgroup: %v\n", lerr)
		os.Exit(3)
	}
	return pid, err
}

// kill kills a command's process group; the spawner kills bwrap alone
// (see killTarget).
func (sv *supervisor) kill(id uint64) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if pid, ok := sv.byID[id]; ok {
		unix.Kill(sv.killTarget(pid), unix.SIGKILL)
	}
}

// killTarget is what to kill to end child pid and what it started: its
// process group, or for the spawner only bwrap, pid 1 of its pid
// namespace, whose death makes the kernel kill the sandbox. A group kill
// would also catch bwrap's child during set-up (before its setsid) and so
// hide a sandbox that outlives bwrap.
func (sv *supervisor) killTarget(pid int) int {
	if sv.spawner {
		return pid
	}
	return -pid
}

// reap waits for every child: as pid 1 the supervisor inherits all
// orphans of the sandbox, and unreaped they would fill the pid table.
// When a command exits, what it left in its process group is killed
// first, while its zombie still reserves the group's id; a bwrap's exit
// has already ended its pid namespace.
func (sv *supervisor) reap(chld <-chan os.Signal) {
	for range chld {
		sv.mu.Lock()
		for {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
			if err == unix.EINTR {
				continue
			}
			pid := siginfoPid(&info)
			if err != nil || pid <= 0 {
				break
			}
			id, known := sv.procs[pid]
			if known && !sv.spawner {
				unix.Kill(-pid, unix.SIGKILL)
			}
			var ws unix.WaitStatus
			for {
				if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
					break
				}
			}
			if known {
				delete(sv.procs, pid)
				delete(sv.byID, id)
				sv.send(ctlReply{Op: "exited", ID: id, Code: exitCode(ws)})
			}
		}
		sv.mu.Unlock()
	}
}

// siginfoPid reads si_pid, which x/sys/unix does not name: the union
// after signo, errno and code is pointer-aligned, and si_pid is first.
func siginfoPid(info *unix.Siginfo) int {
	off := (3*4 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}

func exitCode(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// lookPath finds argv0 as execvp would, on the PATH of the command's
// environment; relative entries are relative to dir.
func lookPath(argv0 string, env []string, dir string) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, argv0)
		check := p
		if !filepath.IsAbs(p) && dir != "" {
			check = filepath.Join(dir, p)
		}
		if fi, err := os.Stat(check); err == nil && fi.Mode().IsRegular() && unix.Access(check, unix.X_OK) == nil {
			if !filepath.IsAbs(p) {
				p = "./" + p
			}
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found on PATH %s", argv0, path)
}

// ready tells the host the supervisor serves. With observe, it first
// stacks the seccomp listener's filter on its serving thread (locked by
// serveControl), before any command exists, and sends the listener with
// the message; if that fails, the sandbox runs on with its own filter
// alone, and the host learns why. Only that thread: until the host
// serves the listener, a filtered thread that creates a thread (the
// runtime of a cgo binary does, with clone3) waits for ever, and the
// message that would bring the listener to the host waits with it.
func (sv *supervisor) ready(observe bool) error {
	if !observe {
		return sv.send(ctlReply{Op: "ready"})
	}
	l, err := seccomp.ListenThread()
	if err != nil {
		return sv.send(ctlReply{Op: "ready", NoListener: err.Error()})
	}
	defer l.Close()
	b, err := json.Marshal(ctlReply{Op: "ready", Listener: true})
	if err != nil {
		return err
	}
	rc, err := sv.ctl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, unix.UnixRights(int(l.Fd())), nil, 0)
		return serr != unix.EAGAIN
	})
	return errors.Join(err, serr)
}
