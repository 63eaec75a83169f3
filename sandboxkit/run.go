package sandboxkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// Cmd is a command to run once in a fresh sandbox, or in a Session.
// Build it with Command (or Session.Command), set the fields, then call
// Run (or Start and Wait), as with os/exec.
type Cmd struct {
	// Policy is what the sandbox can see and do.
	Policy *Policy
	// Args is the command line inside the sandbox; Args[0] is looked up
	// on PATH inside. It is passed as a list: no shell is involved unless
	// Args names one.
	Args []string
	// Env adds "KEY=value" entries for this command only, after the
	// Policy's environment (and overriding it).
	Env []string
	// Dir is the working directory inside; empty means the Policy's.
	Dir string

	// Stdin, Stdout and Stderr are as in os/exec: nil means /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer

	// OutputLimit caps the bytes of stdout and stderr together that reach
	// Stdout and Stderr; the rest is read and dropped, a marker line says
	// so, and State.Truncated is set. Zero means no limit.
	OutputLimit int64

	// Timeout kills the whole sandbox (in a Session: the command's
	// process group) once it has run this long. Zero means no limit
	// beyond the context.
	Timeout time.Duration

	// State is set by Wait.
	State *State

	ctx     context.Context
	cancel  context.CancelFunc
	rc      *supervisor.RemoteCmd // bwrap, started through the spawner
	status  *statusReader
	stderr  *bwrapStderr
	cap     *outputCap
	unlock  func() error
	started time.Time
	// sess is set for a command of a Session (Session.Command).
	sess *sessionCmd
	// limits are a one-shot sandbox's cgroup; disk watches its
	// workspace, and diskHit is what made it kill the sandbox.
	limits  *sandboxLimits
	disk    *diskWatch
	diskHit atomic.Pointer[diskHit]
	diskEnd func() // takes the last reading once the sandbox is gone
	// self runs this program's own binary (Args follow argv[0]),
	// passed in as a descriptor like the Session supervisor.
	self bool
	// egress is a one-shot sandbox's proxy; egressDown is set when it
	// stopped before the sandbox (it wraps egress.ErrProxyDown).
	egress     *egressProxy
	egressDown error
}

// State is what Wait learned about a finished command.
type State struct {
	// ExitCode is the command's exit status (128+N for signal N), or -1
	// when the command never ran or was killed from outside.
	ExitCode int
	// Truncated reports that OutputLimit cut the output.
	Truncated bool
	// Duration is the wall-clock time from Start to the end of Wait.
	Duration time.Duration
	// Limit names the sandbox limit hit while the command ran, if any
	// (as LimitError.Limit): the out-of-memory killer struck ("memory"),
	// a fork was refused ("pids"), or the disk budget or reserve stopped
	// it ("disk", "disk_free"). In a Session the cgroup is the session's, so a
	// limit hit by a background job running meanwhile shows here too.
	// LimitMessage says what it means and what to do, for the model.
	Limit        string
	LimitMessage string
}

// Command returns a Cmd that runs argv under p. The context kills the
// whole sandbox when it is done.
func Command(ctx context.Context, p *Policy, argv ...string) *Cmd {
	return &Cmd{Policy: p, Args: argv, ctx: ctx}
}

// Run starts c and waits for it. Errors: an *UnavailableError (errors.Is
// ErrUnavailable) when isolation cannot be provided here; a *SetupError
// when bwrap failed before the command ran (errors.Is ErrNotFound for a
// missing command); an *ExitError for a non-zero exit; the context's
// error when it or Timeout killed the sandbox.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// Start checks that isolation is available, then starts the sandbox.
// It never runs anything on the host when a check fails.
func (c *Cmd) Start() error {
	if c.rc != nil {
		return errors.New("sandboxkit: Cmd already started")
	}
	if c.Policy == nil && c.sess == nil {
		return errors.New("sandboxkit: Cmd has no Policy")
	}
	if len(c.Args) == 0 {
		return errors.New("sandboxkit: no command to run")
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.sess != nil {
		return c.sess.start(ctx, c)
	}
	if !supervisor.MainCalled.Load() {
		return supervisor.ErrNoMain
	}
	if err := available(ctx, c.Policy); err != nil {
		return err
	}
	if err := checkReserve(c.Policy.Workspace, c.Policy.Limits); err != nil {
		return err
	}
	return c.launch(ctx)
}

// launch starts the sandbox without consulting the Doctor (whose own
// probes use it).
func (c *Cmd) launch(ctx context.Context) error {
	sp, bwrap, err := spawnerFor(c.Policy)
	if err != nil {
		return err
	}
	unlock, err := prepareWorkspace(c.Policy)
	if err != nil {
		return err
	}
	sl, err := startLimits(c.Policy)
	if err != nil {
		unlock()
		return err
	}
	px, err := startEgress(c.Policy)
	if err != nil {
		sl.close()
		unlock()
		return err
	}
	c.egress = px
	release := unlock
	unlock = func() error {
		c.egressDown = px.close()
		return errors.Join(sl.close(), release())
	}
	c.limits = sl
	p := *c.Policy
	p.Bwrap = bwrap
	p.Env = append(append([]string(nil), p.Env...), c.Env...)
	if c.Dir != "" {
		p.Dir = c.Dir
	}
	o, argv, reserved := buildOptions{status: true, argsFile: true}, c.Args, []*os.File(nil)
	if c.self {
		exe, err := os.Open("/proc/self/exe")
		if err != nil {
			unlock()
			return fmt.Errorf("sandboxkit: open this program's executable: %w", err)
		}
		defer exe.Close()
		o.reserved = 1
		argv = append([]string{"/proc/self/fd/" + strconv.Itoa(o.firstFile()-1)}, selfRlimits(&p, c.Args)...)
		reserved = []*os.File{exe}
	}
	if px != nil {
		if c.self {
			unlock()
			return errors.New("sandboxkit: a sandbox that runs this program cannot have Egress")
		}
		exe, err := os.Open("/proc/self/exe")
		if err != nil {
			unlock()
			return fmt.Errorf("sandboxkit: open this program's executable for the egress bridge: %w", err)
		}
		defer exe.Close()
		o.reserved, o.egressSocket = 1, px.socket()
		argv = supervisor.EgressLaunch("/proc/self/fd/"+strconv.Itoa(o.firstFile()-1), c.Args)
		reserved = []*os.File{exe}
	}
	l, err := p.build(argv, o)
	if err != nil {
		unlock()
		return err
	}
	l.Args = scopedLaunch(&p, l.Args)
	if !c.self { // else it sets its rlimits itself (selfRlimits)
		l.Args = rlimitLaunch(&p, l.Args)
	}
	if err := p.launching(ctx, launchRun, c.Args, p.Dir); err != nil {
		unlock()
		return err
	}
	dirs := diskTrees(&p)
	watch := len(dirs) > 0 && (p.Limits.Disk > 0 || p.Limits.keepsFree())
	var base int64 // the writable trees before the command wrote
	if watch {
		base = treesUsage(dirs, p.Limits.Disk)
	}
	c.begin(ctx)
	c.unlock = unlock
	if err := c.start(sp, l, reserved); err != nil {
		c.cancel()
		unlock()
		return err
	}
	sl.started()
	if watch {
		budget := p.Limits.Disk
		c.disk = watchDisk(dirs, p.Limits, base, func() bool { return true }, func(h diskHit) <-chan struct{} {
			c.diskHit.CompareAndSwap(nil, &h)
			c.cancel()
			return c.rc.Proc.Done
		})
		c.diskEnd = func() {
			// A command that wrote past the budget between two readings
			// and ended is not let off: its result is over the budget.
			if budget <= 0 || c.diskHit.Load() != nil {
				return
			}
			if used := treesUsage(dirs, budget); used > budget && used > base {
				c.diskHit.CompareAndSwap(nil, &diskHit{limitDisk, used})
			}
		}
	}
	return nil
}

// begin sets up what a one-shot sandbox and a Session's command share:
// the output cap, the context that cancellation and Timeout kill it
// with, and the start time.
func (c *Cmd) begin(ctx context.Context) {
	if c.OutputLimit > 0 {
		c.cap = &outputCap{limit: c.OutputLimit, left: c.OutputLimit}
	}
	if c.Timeout > 0 {
		c.ctx, c.cancel = context.WithTimeout(ctx, c.Timeout)
	} else {
		c.ctx, c.cancel = context.WithCancel(ctx)
	}
	c.started = time.Now()
}

func (c *Cmd) start(sp *supervisor.Spawner, l *launch, reserved []*os.File) error {
	stdout, stderr := orDiscard(c.Stdout), orDiscard(c.Stderr)
	if supervisor.SameWriter(c.Stdout, c.Stderr) {
		// Two pipes (bwrapStderr holds back stderr on its own), so
		// serialize the two copying goroutines instead.
		w := &lockedWriter{w: stdout}
		stdout, stderr = w, w
	}
	c.stderr = &bwrapStderr{w: c.cap.wrap(stderr)}

	sr, sw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer sw.Close()
	mem, err := supervisor.MemFiles(l.Files)
	if err != nil {
		sr.Close()
		return err
	}
	defer closeAll(mem)
	// fd 3 is the status pipe (buildOptions.status), then the reserved
	// descriptors, then the Files.
	extra := append(append([]*os.File{sw}, reserved...), mem...)
	var out io.Writer
	if c.Stdout != nil {
		out = c.cap.wrap(stdout)
	}
	rc := &supervisor.RemoteCmd{Join: c.limits.join}
	if err := rc.Start(c.ctx, sp.Client, l.Args, l.Env, "", c.Stdin, out, c.stderr, extra); err != nil {
		sr.Close()
		return fmt.Errorf("sandboxkit: start bwrap: %w", startErr(err))
	}
	sw.Close()
	c.status = readStatus(sr)
	c.rc = rc
	return nil
}

// Wait waits for the sandbox to exit and releases its workspace.
func (c *Cmd) Wait() error {
	if c.sess != nil {
		return c.sess.s.egress.down(c.sess.wait(c))
	}
	err := c.wait()
	if c.egressDown != nil {
		err = errors.Join(err, fmt.Errorf("sandboxkit: %w", c.egressDown))
	}
	return err
}

func (c *Cmd) wait() error {
	if c.rc == nil {
		return errors.New("sandboxkit: Cmd not started")
	}
	if c.State != nil {
		return errors.New("sandboxkit: Wait already called")
	}
	// Pipes close when bwrap and everything in its pid namespace are
	// gone; the delay only guards against a bug there.
	c.rc.Wait(5 * time.Second)
	c.disk.close()
	if c.diskEnd != nil {
		c.diskEnd()
	}
	p := c.rc.Proc
	// Whether the context killed the sandbox, asked before our own
	// cancel (which only releases the context's resources).
	killed := c.ctx.Err()
	c.cancel()
	st := c.status.result()
	bwrapSaid := c.stderr.finish(!st.ran)
	// Read before the group goes with unlock; a fresh group counts from 0.
	hit := c.limits.hit(cgroup.Events{})
	var used int64
	if h := c.diskHit.Load(); h != nil {
		hit, used = h.limit, h.n
	}
	var waitErr error
	if err := c.unlock(); err != nil {
		waitErr = err
	}
	lim := c.Policy.Limits
	c.State = &State{ExitCode: -1, Duration: time.Since(c.started), Truncated: c.cap.truncated(), Limit: hit, LimitMessage: lim.message(hit, used)}
	switch {
	case killed != nil:
		return lim.limitError(hit, used, fmt.Errorf("sandboxkit: sandbox killed: %w", killed))
	case p.Err != nil:
		return p.Err
	case !st.ran:
		return lim.limitError(hit, used, setupError(bwrapSaid, fmt.Errorf("bwrap exited with status %d", p.Code)))
	}
	c.State.ExitCode = st.exitCode
	if st.exitCode != 0 || hit == limitDisk {
		var exit error
		if st.exitCode != 0 {
			exit = &ExitError{Code: st.exitCode}
		}
		return lim.limitError(hit, used, exit)
	}
	if waitErr != nil {
		return waitErr
	}
	return c.rc.OutputErr()
}

// prepareWorkspace checks the workspace before anything is mounted and
// takes the upper dir's lock. The returned func releases it.
func prepareWorkspace(p *Policy) (func() error, error) {
	w := p.Workspace
	if w == nil {
		return func() error { return nil }, nil
	}
	dirs := []struct{ what, path string }{{"lower", w.Lower}, {"upper", w.Upper}, {"work", w.Work}}
	for _, l := range w.Layers {
		dirs = append(dirs, struct{ what, path string }{"layer", l})
	}
	for _, d := range dirs {
		fi, err := os.Stat(d.path)
		if err != nil {
			return nil, fmt.Errorf("sandboxkit: workspace %s dir: %w", d.what, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("sandboxkit: workspace %s dir %s is not a directory", d.what, d.path)
		}
	}
	if err := overlay.CheckOwners(w.Lower, p.UID, p.GID); err != nil {
		return nil, err
	}
	return overlay.Lock(w.Upper)
}

func setupError(stderr string, waitErr error) error {
	msg := strings.TrimSpace(stderr)
	if i := strings.LastIndex(msg, "bwrap: "); i >= 0 {
		msg = msg[i:]
	}
	if j := strings.IndexByte(msg, '\n'); j >= 0 {
		msg = msg[:j]
	}
	if msg == "" {
		msg = fmt.Sprintf("bwrap exited before starting the command (%v)", waitErr)
	}
	e := &SetupError{Message: msg}
	if strings.HasPrefix(msg, "bwrap: execvp ") {
		switch {
		case strings.HasSuffix(msg, "No such file or directory"):
			e.err = ErrNotFound
		case strings.HasSuffix(msg, "Permission denied"):
			e.err = ErrNotExecutable
		}
	}
	return e
}

// statusReader parses bwrap's --json-status-fd stream: a JSON object
// with "child-pid" once the sandbox exists, and one with "exit-code"
// only when the command itself ran and exited.
type statusReader struct {
	done     chan struct{}
	ran      bool
	exitCode int
}

func readStatus(r io.ReadCloser) *statusReader {
	s := &statusReader{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer r.Close()
		dec := json.NewDecoder(r)
		for {
			var m struct {
				ExitCode *int `json:"exit-code"`
			}
			if err := dec.Decode(&m); err != nil {
				io.Copy(io.Discard, r)
				return
			}
			if m.ExitCode != nil {
				s.ran, s.exitCode = true, *m.ExitCode
			}
		}
	}()
	return s
}

func (s *statusReader) result() *statusReader {
	<-s.done
	return s
}

// outputCap counts output across stdout and stderr.
type outputCap struct {
	limit int64
	mu    sync.Mutex
	left  int64
	hit   bool
}

func (o *outputCap) wrap(w io.Writer) io.Writer {
	if o == nil {
		return w
	}
	if w == nil {
		w = io.Discard
	}
	return &cappedWriter{cap: o, w: w}
}

func (o *outputCap) truncated() bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hit
}

type cappedWriter struct {
	cap *outputCap
	w   io.Writer
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	o := c.cap
	o.mu.Lock()
	n := int64(len(p))
	keep := min(n, o.left)
	o.left -= keep
	mark := keep < n && !o.hit
	if keep < n {
		o.hit = true
	}
	o.mu.Unlock()
	if keep > 0 {
		if _, err := c.w.Write(p[:keep]); err != nil {
			return 0, err
		}
	}
	if mark {
		fmt.Fprintf(c.w, "\n[sandboxkit: output truncated after %d bytes]\n", o.limit)
	}
	// Report everything written so the child never blocks on a full pipe.
	return len(p), nil
}

// bwrapStderr passes a one-shot sandbox's stderr on, except while all of
// it so far starts with "bwrap: ": bwrap's own message when it fails
// before the command runs. That is held back until Wait knows whether the
// command ran: if not, the message becomes the SetupError instead of
// being shown twice; if so, the command printed it and it is passed on.
type bwrapStderr struct {
	mu      sync.Mutex
	w       io.Writer
	held    []byte
	passing bool
}

const bwrapPrefix = "bwrap: "

func (b *bwrapStderr) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.passing {
		b.held = append(b.held, p...)
		n := min(len(b.held), len(bwrapPrefix))
		if len(b.held) <= 4096 && string(b.held[:n]) == bwrapPrefix[:n] {
			return len(p), nil
		}
		b.passing = true
		p, b.held = b.held, nil
	}
	if _, err := b.w.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// finish returns what was held back, and passes it on unless drop.
func (b *bwrapStderr) finish(drop bool) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	held := string(b.held)
	if !drop && len(b.held) > 0 {
		b.w.Write(b.held)
	}
	b.held, b.passing = nil, true
	return held
}

// lockedWriter serializes writes from the stdout and stderr copiers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
