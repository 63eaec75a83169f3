package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
	"golang.org/x/sys/unix"
)

// Client is the host's end of a supervisor's control socket (see
// supervisor.go): a Session's supervisor inside its sandbox, or the
// spawner that starts every bwrap. It starts processes there and learns
// when they exit.
type Client struct {
	ctl *os.File
	// closedErr is the error of a request made after the end when no
	// reason was given.
	closedErr error

	ready     chan struct{}
	readyOnce sync.Once
	// listener is the seccomp listener a supervisor sent with ready (nil:
	// none); noListener why it has none. Both are set before ready
	// closes.
	listener   *os.File
	noListener string
	done       chan struct{} // closed once the socket is dead and every proc has ended
	err        error         // why it ended; set before done closes

	mu      sync.Mutex
	closing bool
	ending  error // the reason given to shutdown
	nextID  uint64
	procs   map[uint64]*Proc // started, not yet exited
}

// NewClient serves ctl, the host end of a Pair; closedErr is the error
// of requests made after the end when no reason was given.
func NewClient(ctl *os.File, closedErr error) *Client {
	return &Client{
		ctl:       ctl,
		closedErr: closedErr,
		ready:     make(chan struct{}),
		done:      make(chan struct{}),
		procs:     map[uint64]*Proc{},
	}
}

// Pair returns a SOCK_SEQPACKET pair: the host's end, non-blocking
// for the poller, and the end for the supervisor.
func Pair() (host, child *os.File, err error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sandboxkit: control socket: %w", err)
	}
	if err := unix.SetNonblock(pair[0], true); err != nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return nil, nil, fmt.Errorf("sandboxkit: control socket: %w", err)
	}
	// Non-blocking before NewFile: reads and writes then use the poller.
	return os.NewFile(uintptr(pair[0]), "sandboxkit-control"), os.NewFile(uintptr(pair[1]), "sandboxkit-control"), nil
}

// shutdown closes the socket: the supervisor exits, and the kernel kills
// what was left in its pid namespace. reason, if not nil, becomes the
// error of everything still pending.
func (c *Client) Shutdown(reason error) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing, c.ending = true, reason
	c.mu.Unlock()
	c.ctl.Close()
}

// closed returns nil while requests can be made, else why not.
func (c *Client) Closed() error {
	select {
	case <-c.done:
		return c.err
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.closing:
		return nil
	case c.ending != nil:
		return c.ending
	}
	return c.closedErr
}

// run dispatches the supervisor's messages until the socket closes. Then
// end (which may wait for the supervisor's process) says why, unless
// shutdown was given a reason, and every proc still running fails with it.
func (c *Client) Run(end func() error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, fds, err := c.read(buf, oob)
		if err != nil || n == 0 {
			closeFds(fds)
			break
		}
		var m ctlReply
		if json.Unmarshal(buf[:n], &m) == nil {
			fds = c.takeListener(&m, fds)
			c.dispatch(&m)
		}
		closeFds(fds)
	}
	c.Shutdown(nil)
	if l := c.TakeListener(); l != nil {
		l.Close() // no Session took it
	}
	why := end()
	c.mu.Lock()
	if c.ending == nil {
		c.ending = why
	}
	reason := c.ending
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	for _, p := range procs {
		if !p.isStarted {
			p.startErr, p.isStarted = reason, true
			close(p.started)
		}
		p.Err = reason
		close(p.Done)
	}
	c.err = reason
	close(c.done)
}

func (c *Client) dispatch(m *ctlReply) {
	if m.Op == "ready" {
		c.readyOnce.Do(func() { close(c.ready) })
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[m.ID]
	if p == nil {
		return
	}
	switch m.Op {
	case "started":
		if !p.isStarted {
			p.Pid, p.isStarted = m.Pid, true
			close(p.started)
		}
	case "failed":
		if !p.isStarted {
			p.startErr, p.isStarted = &StartError{Message: m.Err, Cause: m.Cause}, true
			close(p.started)
			delete(c.procs, m.ID)
			close(p.Done)
		}
	case "exited":
		delete(c.procs, m.ID)
		p.Code = m.Code
		close(p.Done)
	}
}

// Proc is one process started through a supervisor. Its fields are
// written under the Client's lock before the channel that publishes them
// closes: Pid once StartProc has returned it, Code and Err once Done is
// closed.
type Proc struct {
	ID        uint64
	started   chan struct{}
	isStarted bool
	Pid       int // in the supervisor's pid namespace
	startErr  error
	Done      chan struct{}
	Code      int
	Err       error // the supervisor's end, when it came before the exit
}

// StartError is a command the supervisor could not start (nothing of it
// ran): Message says why; Cause is CauseNotFound, CauseNotExecutable or
// empty.
type StartError struct {
	Message, Cause string
}

func (e *StartError) Error() string { return e.Message }

// StartProc asks the supervisor to start argv with files as descriptors
// 0, 1, 2, ..., and waits until it has. join, for the spawner only, puts
// the process in its cgroup.
func (c *Client) StartProc(ctx context.Context, argv, env []string, dir string, files []*os.File, join *cgroup.Join) (*Proc, error) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil, c.Closed()
	}
	c.nextID++
	p := &Proc{ID: c.nextID, started: make(chan struct{}), Done: make(chan struct{})}
	c.procs[p.ID] = p
	c.mu.Unlock()
	req := ctlRequest{Op: "start", ID: p.ID, Args: argv, Env: env, Dir: dir}
	if join != nil {
		cg := join.Files()
		files = append(slices.Clip(files), cg...)
		req.Cgroup, req.CgroupV2 = len(cg), join.Version == cgroup.V2
	}
	if err := c.send(req, files); err != nil {
		c.mu.Lock()
		closing := c.closing
		delete(c.procs, p.ID)
		c.mu.Unlock()
		if closing {
			return nil, c.Closed()
		}
		return nil, fmt.Errorf("sandboxkit: send command to the supervisor: %w", err)
	}
	select {
	case <-p.started:
	case <-ctx.Done():
		go func() {
			<-p.started
			if p.startErr == nil {
				c.Kill(p.ID)
			}
		}()
		return nil, ctx.Err()
	}
	if p.startErr != nil {
		return nil, p.startErr
	}
	return p, nil
}

// kill kills a process's process group.
func (c *Client) Kill(id uint64) error {
	return c.send(ctlRequest{Op: "kill", ID: id}, nil)
}

// send writes one request, with files as SCM_RIGHTS.
func (c *Client) send(req ctlRequest, files []*os.File) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(b) > maxInlineRequest {
		if len(b) > maxRequest {
			return fmt.Errorf("sandboxkit: command line and environment take %d bytes, more than the %d a command can have", len(b), maxRequest)
		}
		blob, err := memFile("request", b)
		if err != nil {
			return err
		}
		defer blob.Close()
		files = append(slices.Clip(files), blob)
		b, _ = json.Marshal(ctlRequest{Op: req.Op, ID: req.ID, Blob: true, Cgroup: req.Cgroup, CgroupV2: req.CgroupV2})
	}
	if len(files) > maxRequestFds {
		return fmt.Errorf("sandboxkit: %d descriptors for one command, more than %d", len(files), maxRequestFds)
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	rc, err := c.ctl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, nil, unix.MSG_NOSIGNAL)
		return serr != unix.EAGAIN
	})
	runtime.KeepAlive(files)
	if err != nil {
		return err
	}
	return serr
}

// RemoteCmd is the host side of one process started through a
// supervisor with the host's stdio: the pipes and their copying, the
// context that kills it, and waiting for its end.
type RemoteCmd struct {
	// Join, set before Start, puts a bwrap started by the spawner in its
	// sandbox's cgroup.
	Join      *cgroup.Join
	Proc      *Proc
	watchDone chan struct{}
	KillErr   error // why it was killed; written before watchDone closes
	copies    sync.WaitGroup
	copyMu    sync.Mutex
	copyErr   error
	readers   []*os.File // host ends of the output pipes
	stdinW    *os.File
}

// start starts argv through c. A nil stdin, stdout or stderr is
// /dev/null; an *os.File stdin is passed as is; stdout and stderr that
// are the same writer share one pipe, which keeps their order. extra
// follow as descriptors 3, 4, ... Cancelling ctx kills the process group.
func (rc *RemoteCmd) Start(ctx context.Context, c *Client, argv, env []string, dir string, stdin io.Reader, stdout, stderr io.Writer, extra []*os.File) (err error) {
	// child are the ends sent to the supervisor; ours go once sent.
	var child []*os.File
	defer func() {
		closeAll(child)
		if err != nil {
			rc.closeReaders()
		}
	}()
	var devnull *os.File
	null := func() (*os.File, error) {
		if devnull == nil {
			f, err := os.Open(os.DevNull)
			if err != nil {
				return nil, err
			}
			devnull = f
			child = append(child, f)
		}
		return devnull, nil
	}
	pipe := func(w io.Writer) (*os.File, error) {
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		child = append(child, pw)
		rc.readers = append(rc.readers, r)
		rc.copies.Add(1)
		go rc.copy(w, r)
		return pw, nil
	}

	var in, out, errf *os.File
	switch r := stdin.(type) {
	case nil:
		in, err = null()
	case *os.File:
		in = r
	default:
		var pr *os.File
		pr, rc.stdinW, err = os.Pipe()
		if err == nil {
			child = append(child, pr)
			in = pr
		}
	}
	if err != nil {
		return err
	}
	if stdout == nil {
		out, err = null()
	} else {
		out, err = pipe(stdout)
	}
	if err != nil {
		return err
	}
	switch {
	case stderr == nil:
		errf, err = null()
	case SameWriter(stdout, stderr):
		errf = out
	default:
		errf, err = pipe(stderr)
	}
	if err != nil {
		return err
	}

	p, err := c.StartProc(ctx, argv, env, dir, append([]*os.File{in, out, errf}, extra...), rc.Join)
	if err != nil {
		return err
	}
	rc.Proc = p
	if rc.stdinW != nil {
		go func() {
			io.Copy(rc.stdinW, stdin)
			rc.stdinW.Close()
		}()
	}
	rc.watchDone = make(chan struct{})
	go rc.watch(ctx, c)
	return nil
}

// watch kills the process group when ctx ends first.
func (rc *RemoteCmd) watch(ctx context.Context, c *Client) {
	defer close(rc.watchDone)
	p := rc.Proc
	select {
	case <-p.Done:
	case <-ctx.Done():
		select {
		case <-p.Done:
			return
		default:
		}
		rc.KillErr = ctx.Err()
		c.Kill(p.ID)
		<-p.Done
	}
}

func (rc *RemoteCmd) copy(w io.Writer, r *os.File) {
	defer rc.copies.Done()
	if _, err := io.Copy(w, r); err != nil && !errors.Is(err, os.ErrClosed) {
		rc.copyMu.Lock()
		if rc.copyErr == nil {
			rc.copyErr = err
		}
		rc.copyMu.Unlock()
		// Keep reading so that the process never blocks on a full pipe.
		io.Copy(io.Discard, r)
	}
}

// wait waits for the process to exit, then up to delay for its output:
// a process that left its group may hold the pipes open for ever.
func (rc *RemoteCmd) Wait(delay time.Duration) {
	<-rc.watchDone
	copied := make(chan struct{})
	go func() {
		rc.copies.Wait()
		close(copied)
	}()
	select {
	case <-copied:
	case <-time.After(delay):
		closeAll(rc.readers)
		<-copied
	}
	rc.closeReaders()
}

func (rc *RemoteCmd) closeReaders() {
	closeAll(rc.readers)
	if rc.stdinW != nil {
		rc.stdinW.Close()
	}
}

// outputErr is the first error of writing the output.
func (rc *RemoteCmd) OutputErr() error {
	rc.copyMu.Lock()
	defer rc.copyMu.Unlock()
	return rc.copyErr
}

// read reads one message of the supervisor, with the descriptors it
// carries (only ready's listener may).
func (c *Client) read(buf, oob []byte) (int, []int, error) {
	rc, err := c.ctl.SyscallConn()
	if err != nil {
		return 0, nil, err
	}
	var n, oobn int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	fds := parseRights(oob[:oobn])
	if err == nil {
		err = rerr
	}
	return n, fds, err
}

// Ready is closed once the supervisor serves.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// Err is why the socket ended; valid once Run returned.
func (c *Client) Err() error { return c.err }

// NoListener says why a supervisor sent no seccomp listener with ready;
// valid once Ready is closed.
func (c *Client) NoListener() string { return c.noListener }

// takeListener keeps the seccomp listener sent with the first ready
// message, if it is one, and returns the descriptors left to close.
func (c *Client) takeListener(m *ctlReply, fds []int) []int {
	if m.Op != "ready" {
		return fds
	}
	select {
	case <-c.ready:
		return fds // a second ready changes nothing
	default:
	}
	c.noListener = m.NoListener
	if !m.Listener {
		return fds
	}
	if len(fds) != 1 || !isSeccompListener(fds[0]) {
		c.noListener = "the supervisor sent no seccomp listener"
		return fds
	}
	f, err := seccomp.ListenerFile(fds[0])
	if err != nil {
		c.noListener = err.Error()
		return nil
	}
	c.listener = f
	return nil
}

// TakeListener hands the listener over, once (nil: none).
func (c *Client) TakeListener() *os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.listener
	c.listener = nil
	return l
}

// isSeccompListener reports that fd is a seccomp notification
// descriptor, not something else a supervisor could have passed.
func isSeccompListener(fd int) bool {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err == nil && target == "anon_inode:seccomp notify"
}
