package sandboxkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
	"github.com/codumentor/codumentor/sandboxkit/headtail"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
)

// defaultMaxJobs is SessionOptions.MaxJobs's default.
const defaultMaxJobs = 8

const (
	// jobOutputMax is how much of a background job's output is kept: the
	// last bytes of stdout and stderr together.
	jobOutputMax = 1 << 20
	// maxJobs bounds the jobs a Session remembers; the oldest finished
	// ones are forgotten first.
	maxJobs = 100
	// sessionWaitDelay is how long Wait, once the command has exited,
	// waits for its output pipes to close: a process that left the
	// command's process group may hold them open for ever.
	sessionWaitDelay = 2 * time.Second
	// sessionStartTimeout bounds the start of the sandbox beyond the
	// caller's context: a supervisor that has not said it serves by then
	// is stuck, not slow (a start takes well under a second; a loaded
	// machine makes that seconds).
	sessionStartTimeout = 5 * time.Minute
)

// SessionOptions tune a Session.
type SessionOptions struct {
	// IdleTimeout closes the session once it has been idle this long:
	// no foreground command running, none ended and no command started
	// since. Running background jobs do not keep it open, so a forgotten
	// server never pins a sandbox and its workspace. Zero means never.
	IdleTimeout time.Duration
	// MaxJobs caps the background jobs running at once (each holds its
	// output buffer and processes). Zero means 8.
	MaxJobs int
}

// Session is a long-lived sandbox (one per conversation): one bwrap whose
// pid 1 is sandboxkit's supervisor, this same binary re-executed (see
// Main). Commands start through it, so they share one overlay mount and
// cost no bwrap start-up. Foreground commands (Command) stream output and
// report exit codes like os/exec; background jobs (StartBackground) keep
// running across later commands until they exit, Kill, or the session
// ends.
//
// Every process of the session dies when it ends: Close, IdleTimeout, or
// the server's death or the spawner's (see Main; the kernel kills every
// pid namespace below the spawner's). A workspace upper dir is mounted by one sandbox at a time; a second
// StartSession or Run on it fails with overlay.ErrInUse. Commands receive
// only stdin, stdout and stderr: no other descriptor of the server or
// the supervisor.
//
// A Session is safe for concurrent use.
type Session struct {
	policy  *Policy
	idle    time.Duration
	maxJobs int

	cl      *supervisor.Client // to the supervisor
	sp      *supervisor.Spawner
	bwrap   *supervisor.RemoteCmd // started through the spawner
	errHead *headtail.Buffer
	unlock  func() error
	limits  *sandboxLimits // the session's cgroup
	disk    *diskWatch
	obs     *observer // seccomp violations (log mode)
	egress  *egressProxy

	done     chan struct{}
	err      error // why the session ended; set before done closes
	closeErr error // from releasing the workspace

	mu        sync.Mutex
	closing   bool
	nextJob   int
	jobs      map[int]*job
	active    int // foreground commands running
	starting  int // background jobs being started (hold a slot)
	fg        map[*sessionCmd]bool
	lastUse   time.Time
	idleTimer *time.Timer
}

// StartSession checks that p can be sandboxed here (returning available's
// *UnavailableError if not), takes the workspace's lock and starts the
// sandbox. ctx bounds only the start: the session lives until Close,
// IdleTimeout, or the death of this process. The program must have
// called Main.
func StartSession(ctx context.Context, p *Policy, o SessionOptions) (*Session, error) {
	if !supervisor.MainCalled.Load() {
		return nil, supervisor.ErrNoMain
	}
	if p == nil {
		return nil, errors.New("sandboxkit: StartSession: nil Policy")
	}
	if o.IdleTimeout < 0 {
		return nil, fmt.Errorf("sandboxkit: negative IdleTimeout %v", o.IdleTimeout)
	}
	if o.MaxJobs < 0 {
		return nil, fmt.Errorf("sandboxkit: negative MaxJobs %d", o.MaxJobs)
	}
	if o.MaxJobs == 0 {
		o.MaxJobs = defaultMaxJobs
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := available(ctx, p); err != nil {
		return nil, err
	}
	if err := checkReserve(p.Workspace, p.Limits); err != nil {
		return nil, err
	}
	pc := *p
	pc.Env = slices.Clone(p.Env)
	unlock, err := prepareWorkspace(&pc)
	if err != nil {
		return nil, err
	}
	sl, err := startLimits(&pc)
	if err != nil {
		unlock()
		return nil, err
	}
	s := &Session{
		policy:  &pc,
		idle:    o.IdleTimeout,
		maxJobs: o.MaxJobs,
		done:    make(chan struct{}),
		jobs:    map[int]*job{},
		fg:      map[*sessionCmd]bool{},
		limits:  sl,
		// Released at the end once launched: the group once the sandbox
		// is gone, then the workspace.
		unlock: func() error { return errors.Join(sl.close(), unlock()) },
	}
	if err := pc.launching(ctx, launchSession, nil, ""); err != nil {
		s.unlock()
		return nil, err
	}
	if s.egress, err = startEgress(&pc); err != nil {
		s.unlock()
		return nil, err
	}
	release := s.unlock
	s.unlock = func() error {
		s.egress.close()
		return release()
	}
	// Before launch: the session's end closes it.
	if dirs, budget := diskTrees(&pc), pc.Limits.Disk; len(dirs) > 0 && (budget > 0 || pc.Limits.keepsFree()) {
		s.disk = watchDisk(dirs, pc.Limits, treesUsage(dirs, budget), s.running, s.overDisk)
	}
	if err := s.launch(); err != nil {
		s.disk.close()
		s.unlock()
		return nil, err
	}

	timer := time.NewTimer(sessionStartTimeout)
	defer timer.Stop()
	select {
	case <-s.cl.Ready():
	case <-s.done:
		if errors.Is(s.err, supervisor.ErrSpawnerDied) {
			return nil, s.err
		}
		return nil, setupError(s.errHead.String(), s.bwrapExit())
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	case <-timer.C:
		s.Close()
		return nil, fmt.Errorf("sandboxkit: the session supervisor did not start within %v (stuck): %s", sessionStartTimeout, strings.TrimSpace(s.errHead.String()))
	}
	s.obs = newObserver(s.policy, s.cl)
	s.mu.Lock()
	s.lastUse = time.Now()
	if s.idle > 0 {
		s.idleTimer = time.AfterFunc(s.idle, s.idleCheck)
	}
	s.mu.Unlock()
	return s, nil
}

// launch starts bwrap, through the spawner, with the supervisor as pid 1.
func (s *Session) launch() error {
	sp, bwrap, err := spawnerFor(s.policy)
	if err != nil {
		return err
	}
	// bwrap executes the very binary that runs now, through an inherited
	// descriptor: nothing of the host is bound into the sandbox for it,
	// and an upgrade that replaced the file on disk cannot start a
	// supervisor that speaks another protocol.
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("sandboxkit: open this program's executable for the session supervisor: %w", err)
	}
	defer exe.Close()
	ctl, child, err := supervisor.Pair()
	if err != nil {
		return err
	}
	defer child.Close()

	// The two reserved descriptors: the control socket (3), then the
	// executable (4); the Policy's files follow.
	o := buildOptions{asPid1: true, reserved: 2, argsFile: true}
	first := o.firstFile() - o.reserved
	ctlFd, exeFd := strconv.Itoa(first), strconv.Itoa(first+1)
	p := *s.policy
	p.Bwrap = bwrap
	argv := []string{"/proc/self/fd/" + exeFd, supervisor.SupervisorFlag, ctlFd, exeFd}
	if observes(&p) {
		argv = append(argv, supervisor.ObserveFlag)
	}
	if s.egress != nil {
		argv = append(argv, supervisor.EgressBridgeFlag)
		o.egressSocket = s.egress.socket()
	}
	l, err := p.build(argv, o)
	if err != nil {
		ctl.Close()
		return err
	}
	l.Args = rlimitLaunch(&p, scopedLaunch(&p, l.Args))
	mem, err := supervisor.MemFiles(l.Files)
	if err != nil {
		ctl.Close()
		return err
	}
	defer closeAll(mem)

	// Only bwrap and the supervisor write here (commands get their own
	// descriptors): keep the head to say why a session failed.
	s.errHead = headtail.New(4096, 0)
	s.bwrap = &supervisor.RemoteCmd{Join: s.limits.join}
	// Not bound by a context: it lives until the session ends.
	err = s.bwrap.Start(context.Background(), sp.Client, l.Args, l.Env, "", nil, s.errHead, s.errHead, append([]*os.File{child, exe}, mem...))
	if err != nil {
		ctl.Close()
		return fmt.Errorf("sandboxkit: start bwrap: %w", startErr(err))
	}
	// Our copy of the supervisor's end must go now: its EOF is how the
	// host learns that the supervisor died.
	child.Close()
	s.limits.started()
	s.sp = sp
	s.cl = supervisor.NewClient(ctl, ErrSessionClosed)
	go func() {
		s.cl.Run(s.ended)
		s.disk.close()
		if s.unlock != nil {
			s.closeErr = s.unlock()
		}
		s.err = s.cl.Err()
		close(s.done)
	}()
	return nil
}

// Close kills every process of the session, waits until bwrap and the
// sandbox are gone and releases the workspace. It returns the error of
// releasing the workspace lock, if any; why a session ended by itself is
// in Err. Close may be called more than once.
func (s *Session) Close() error {
	s.shutdown(ErrSessionClosed)
	<-s.done
	return s.closeErr
}

// Done is closed when the session has ended and its processes are gone.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session runs. Afterwards it says why it ended,
// wrapping ErrSessionClosed: closed, idle for IdleTimeout, or the sandbox
// died (with what bwrap or the supervisor printed).
func (s *Session) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// shutdown starts ending the session: closing the control socket makes
// the supervisor exit, and the kernel kills the rest of the sandbox.
func (s *Session) shutdown(reason error) {
	s.mu.Lock()
	s.closing = true
	if s.idleTimer != nil {
		s.idleTimer.Stop()
	}
	s.mu.Unlock()
	s.cl.Shutdown(reason)
}

// ended runs once the control socket is closed or dead: it waits for the
// sandbox to be gone and says why it ended, if no one said.
func (s *Session) ended() error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	select {
	case <-s.bwrap.Proc.Done:
	case <-time.After(5 * time.Second):
		// The supervisor did not exit: killing bwrap kills it and the
		// pid namespace with it.
		s.sp.Client.Kill(s.bwrap.Proc.ID)
	}
	s.bwrap.Wait(5 * time.Second)
	if err := s.bwrap.Proc.Err; err != nil {
		return fmt.Errorf("%w: %w", ErrSessionClosed, err)
	}
	why := strings.TrimSpace(s.errHead.String())
	if why == "" {
		why = fmt.Sprint(s.bwrapExit())
	}
	return fmt.Errorf("%w: the sandbox exited unexpectedly: %s", ErrSessionClosed, why)
}

// bwrapExit describes how bwrap ended.
func (s *Session) bwrapExit() error {
	p := s.bwrap.Proc
	if p.Err != nil {
		return p.Err
	}
	return fmt.Errorf("bwrap exited with status %d", p.Code)
}

// commandEnv returns a command's whole environment: the Policy's, then
// env; and checks dir.
func (s *Session) commandEnv(env []string, dir string) ([]string, error) {
	if err := (&Policy{Env: env, Dir: dir}).validate(); err != nil {
		return nil, err
	}
	p := Policy{Env: append(slices.Clip(s.policy.Env), env...), Egress: s.policy.Egress}
	return p.env(), nil
}

// begin records activity for IdleTimeout; foreground commands hold the
// session open until end.
func (s *Session) begin(foreground bool) error {
	if err := s.cl.Closed(); err != nil {
		return err
	}
	s.mu.Lock()
	if foreground {
		s.active++
	}
	s.lastUse = time.Now()
	s.armIdleLocked()
	s.mu.Unlock()
	return nil
}

func (s *Session) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	s.lastUse = time.Now()
	s.armIdleLocked()
}

func (s *Session) armIdleLocked() {
	if s.idleTimer == nil || s.closing {
		return
	}
	if s.active > 0 {
		s.idleTimer.Stop()
	} else {
		s.idleTimer.Reset(s.idle)
	}
}

func (s *Session) idleCheck() {
	s.mu.Lock()
	left := s.idle - time.Since(s.lastUse)
	idle := s.active == 0 && !s.closing && left <= 0
	if s.active == 0 && !s.closing && left > 0 {
		s.idleTimer.Reset(left)
	}
	s.mu.Unlock()
	if idle {
		s.shutdown(fmt.Errorf("%w: idle for %v", ErrSessionClosed, s.idle))
	}
}

// running reports whether a command or a job runs: only then can the
// workspace grow.
func (s *Session) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active > 0 {
		return true
	}
	for _, j := range s.jobs {
		if j.info.Running {
			return true
		}
	}
	return false
}

// overDisk kills the running commands and jobs: the workspace crossed
// its disk budget, or its filesystem's reserve, while they ran, so one of
// them wrote it full. It returns a channel closed once all it killed
// have exited (the disk watch puts their last writes down to them), or
// nil if it killed none: a command being started counts as running (see
// begin) before it can be killed.
func (s *Session) overDisk(h diskHit) <-chan struct{} {
	var procs []*supervisor.Proc
	s.mu.Lock()
	for sc := range s.fg {
		if sc.disk.limit == "" {
			sc.disk = h
		}
		procs = append(procs, sc.rc.Proc)
	}
	for _, j := range s.jobs {
		if j.info.Running {
			if j.disk.limit == "" {
				j.disk = h
			}
			procs = append(procs, j.proc)
		}
	}
	s.mu.Unlock()
	if len(procs) == 0 {
		return nil
	}
	for _, p := range procs {
		s.cl.Kill(p.ID)
	}
	exited := make(chan struct{})
	go func() {
		// Done closes at the exit, or at the session's end.
		for _, p := range procs {
			<-p.Done
		}
		close(exited)
	}()
	return exited
}

// Command returns a Cmd that runs argv in the session, as a foreground
// command: set its fields, then Run (or Start and Wait). Env and Dir
// apply to this command only; Timeout and the context kill the command
// and its process group, not the session. When the command exits,
// whatever it left running in its process group is killed: use
// StartBackground for processes that must outlive it (one that left the
// group, e.g. with setsid, runs on until the session ends, and Wait stops
// waiting for its output 2 s after the command exited). Wait returns an
// error wrapping ErrSessionClosed when the session ended first. The Cmd's
// Policy is nil: the session's applies.
func (s *Session) Command(ctx context.Context, argv ...string) *Cmd {
	return &Cmd{Args: argv, ctx: ctx, sess: &sessionCmd{s: s}}
}

// sessionCmd is the part of a Cmd that runs in a Session.
type sessionCmd struct {
	s     *Session
	begun bool
	rc    *supervisor.RemoteCmd
	// before are the cgroup's counters at the start; disk, under
	// Session.mu, is set when the disk watch killed the command.
	before cgroup.Events
	disk   diskHit
}

// start runs after Cmd.Start's checks of Args and ctx.
func (sc *sessionCmd) start(ctx context.Context, c *Cmd) error {
	if sc.begun {
		return errors.New("sandboxkit: Cmd already started")
	}
	s := sc.s
	env, err := s.commandEnv(c.Env, c.Dir)
	if err != nil {
		return err
	}
	if err := s.begin(true); err != nil {
		return err
	}
	if err := s.policy.launching(ctx, launchInSession, c.Args, c.Dir); err != nil {
		s.end()
		return err
	}
	sc.begun = true
	sc.before = s.limits.events()
	c.begin(ctx)
	var stdout, stderr io.Writer
	if c.Stdout != nil {
		stdout = c.cap.wrap(c.Stdout)
	}
	switch {
	case supervisor.SameWriter(c.Stdout, c.Stderr):
		// One pipe keeps the order of interleaved output.
		stderr = stdout
	case c.Stderr != nil:
		stderr = c.cap.wrap(c.Stderr)
	}
	rc := &supervisor.RemoteCmd{}
	if err := rc.Start(c.ctx, s.cl, c.Args, env, c.Dir, c.Stdin, stdout, stderr, nil); err != nil {
		c.cancel()
		s.end()
		return startErr(err)
	}
	sc.rc = rc
	s.mu.Lock()
	s.fg[sc] = true
	s.mu.Unlock()
	return nil
}

func (sc *sessionCmd) wait(c *Cmd) error {
	if sc.rc == nil {
		return errors.New("sandboxkit: Cmd not started")
	}
	if c.State != nil {
		return errors.New("sandboxkit: Wait already called")
	}
	rc := sc.rc
	rc.Wait(sessionWaitDelay)
	c.cancel()
	s := sc.s
	s.mu.Lock()
	delete(s.fg, sc)
	dh := sc.disk
	s.mu.Unlock()
	hit, used := s.limits.hit(sc.before), dh.n
	if dh.limit != "" {
		hit = dh.limit
	}
	s.end()
	lim := s.policy.Limits
	c.State = &State{ExitCode: -1, Duration: time.Since(c.started), Truncated: c.cap.truncated(), Limit: hit, LimitMessage: lim.message(hit, used)}
	p := rc.Proc
	switch {
	case p.Err != nil:
		return p.Err
	case rc.KillErr != nil:
		return lim.limitError(hit, used, fmt.Errorf("sandboxkit: command killed: %w", rc.KillErr))
	}
	c.State.ExitCode = p.Code
	if p.Code != 0 {
		return lim.limitError(hit, used, &ExitError{Code: p.Code})
	}
	return rc.OutputErr()
}

// JobInfo describes a background job.
type JobInfo struct {
	// ID names the job in this session: 1, 2, 3, ...
	ID   int
	Args []string
	// Pid is the job's process id inside the sandbox.
	Pid     int
	Running bool
	// ExitCode is the exit status (128+N for signal N); -1 while running
	// or when the session ended first.
	ExitCode int
	Started  time.Time
	// Ended is zero while the job runs.
	Ended time.Time
	// Limit names the sandbox limit hit while the job ran, if any (see
	// State.Limit); LimitMessage says what it means and what to do.
	Limit        string
	LimitMessage string
}

type job struct {
	info   JobInfo // guarded by Session.mu
	out    *tailBuffer
	proc   *supervisor.Proc
	exited chan struct{}
	// drained is closed once the job's output pipe is read to its end.
	drained chan struct{}
	before  cgroup.Events
	disk    diskHit // guarded by Session.mu
}

// StartBackground starts argv in the session as a background job and
// returns at once. env adds "KEY=value" entries; dir is the working
// directory ("" means the Policy's). stdin is /dev/null; stdout and
// stderr together are kept, the last 1 MiB of it, for Output. The job
// runs until it exits, Kill, or the session ends; when it exits, what it
// left in its process group is killed. ctx bounds only the start.
// Background jobs do not count as activity for IdleTimeout.
func (s *Session) StartBackground(ctx context.Context, argv []string, env []string, dir string) (JobInfo, error) {
	return s.StartBackgroundTee(ctx, argv, env, dir, nil)
}

// StartBackgroundTee is StartBackground that also writes the job's output,
// as it comes, to tee (if not nil), for a caller that keeps more of it.
// tee's errors are ignored; a slow tee slows the job's output.
func (s *Session) StartBackgroundTee(ctx context.Context, argv []string, env []string, dir string, tee io.Writer) (JobInfo, error) {
	if len(argv) == 0 {
		return JobInfo{}, errors.New("sandboxkit: no command to run")
	}
	if err := ctx.Err(); err != nil {
		return JobInfo{}, err
	}
	fullEnv, err := s.commandEnv(env, dir)
	if err != nil {
		return JobInfo{}, err
	}
	if err := s.begin(false); err != nil {
		return JobInfo{}, err
	}
	if err := s.jobSlot(); err != nil {
		return JobInfo{}, err
	}
	defer func() {
		s.mu.Lock()
		s.starting--
		s.mu.Unlock()
	}()
	if err := s.policy.launching(ctx, launchInSession, argv, dir); err != nil {
		return JobInfo{}, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return JobInfo{}, err
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return JobInfo{}, err
	}
	before := s.limits.events()
	p, err := s.cl.StartProc(ctx, argv, fullEnv, dir, []*os.File{devnull, w, w}, nil)
	w.Close()
	if err != nil {
		r.Close()
		return JobInfo{}, startErr(err)
	}
	j := &job{out: newTailBuffer(jobOutputMax), proc: p, exited: make(chan struct{}), drained: make(chan struct{}), before: before}
	var out io.Writer = j.out
	if tee != nil {
		out = io.MultiWriter(j.out, errorless{tee})
	}
	go func() {
		// Ends when the last writer is gone, at the latest with the session.
		io.Copy(out, r)
		r.Close()
		close(j.drained)
	}()
	s.mu.Lock()
	s.nextJob++
	j.info = JobInfo{ID: s.nextJob, Args: slices.Clone(argv), Pid: p.Pid, Running: true, ExitCode: -1, Started: time.Now()}
	s.jobs[j.info.ID] = j
	s.forgetJobsLocked()
	info := j.info
	s.mu.Unlock()
	go func() {
		<-p.Done
		hit := s.limits.hit(j.before)
		s.mu.Lock()
		j.info.Running, j.info.Ended = false, time.Now()
		if p.Err == nil {
			j.info.ExitCode = p.Code
		}
		if j.disk.limit != "" {
			hit = j.disk.limit
		}
		if hit != "" {
			j.info.Limit, j.info.LimitMessage = hit, s.policy.Limits.message(hit, j.disk.n)
		}
		s.mu.Unlock()
		close(j.exited)
	}()
	info.Args = slices.Clone(info.Args)
	return info, nil
}

// jobSlot reserves a place for one more running job, or refuses it.
func (s *Session) jobSlot() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.starting
	for _, j := range s.jobs {
		if j.info.Running {
			n++
		}
	}
	if n >= s.maxJobs {
		return fmt.Errorf("%w: %d of %d; wait for one to end or kill one", ErrTooManyJobs, n, s.maxJobs)
	}
	s.starting++
	return nil
}

// forgetJobsLocked drops the oldest finished jobs beyond maxJobs.
func (s *Session) forgetJobsLocked() {
	for len(s.jobs) > maxJobs {
		oldest := 0
		for id, j := range s.jobs {
			if !j.info.Running && (oldest == 0 || id < oldest) {
				oldest = id
			}
		}
		if oldest == 0 {
			return
		}
		delete(s.jobs, oldest)
	}
}

// Jobs lists the session's background jobs, oldest first. Finished jobs
// stay listed (the oldest are forgotten beyond 100).
func (s *Session) Jobs() []JobInfo {
	s.mu.Lock()
	out := make([]JobInfo, 0, len(s.jobs))
	for _, j := range s.jobs {
		out = append(out, j.info)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b JobInfo) int { return a.ID - b.ID })
	for i := range out {
		out[i].Args = slices.Clone(out[i].Args)
	}
	return out
}

func (s *Session) job(id int) (*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.jobs[id]; j != nil {
		return j, nil
	}
	return nil, fmt.Errorf("%w: %d", ErrNoJob, id)
}

// Output returns the last 1 MiB of job id's stdout and stderr, and
// whether earlier output was dropped. It works after the job and the
// session have ended too.
func (s *Session) Output(id int) (data []byte, truncated bool, err error) {
	j, err := s.job(id)
	if err != nil {
		return nil, false, err
	}
	data, truncated = j.out.snapshot()
	return data, truncated, nil
}

// Kill kills job id and its process group, and returns once its exit is
// known. Killing a job that has already ended does nothing.
func (s *Session) Kill(id int) error {
	j, err := s.job(id)
	if err != nil {
		return err
	}
	select {
	case <-j.exited:
		return nil
	default:
	}
	if err := s.cl.Kill(j.proc.ID); err != nil {
		if s.cl.Closed() == nil {
			return fmt.Errorf("sandboxkit: kill job %d: %w", id, err)
		}
		// It dies with the session.
	}
	<-j.exited
	return nil
}

// errorless is a Writer whose errors are ignored.
type errorless struct{ w io.Writer }

func (e errorless) Write(p []byte) (int, error) {
	e.w.Write(p)
	return len(p), nil
}

// tailBuffer keeps the first jobHeadMax and the last max bytes of a
// background job's output.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   *headtail.Buffer
	// grew is closed (and replaced) at each write, for WaitJob.
	grew chan struct{}
}

func newTailBuffer(max int) *tailBuffer {
	return &tailBuffer{max: max, b: headtail.New(jobHeadMax, max)}
}

// jobHeadMax is how much of the start of a background job's output is
// kept besides its tail.
const jobHeadMax = 64 << 10

// grown returns a channel closed at the next write.
func (t *tailBuffer) grown() (<-chan struct{}, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.grew == nil {
		t.grew = make(chan struct{})
	}
	return t.grew, t.b.Len()
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.grew != nil && len(p) > 0 {
		close(t.grew)
		t.grew = nil
	}
	return t.b.Write(p)
}

// parts returns the first jobHeadMax bytes, the last max (which overlap
// the first while the job printed little) and the total.
func (t *tailBuffer) parts() (head, tail []byte, total int64) {
	head, tail, total = t.b.Parts()
	if int64(len(head)+len(tail)) == total {
		// All of it is kept: its end may lie in the head.
		all := append(head[:len(head):len(head)], tail...)
		tail = all[max(0, len(all)-t.max):]
	}
	return head, tail, total
}

func (t *tailBuffer) snapshot() ([]byte, bool) {
	_, tail, total := t.parts()
	return tail, total > int64(t.max)
}

// JobOutput is what a background job printed (stdout and stderr
// together): its first bytes and its last, which overlap while it printed
// little, and its total.
type JobOutput struct {
	Head, Tail []byte
	// Dropped is how many bytes between Head and Tail are not kept (0:
	// Head and Tail overlap or meet, and together hold all of it).
	Dropped int64
	Total   int64
}

func (t *tailBuffer) output() JobOutput {
	head, tail, total := t.parts()
	o := JobOutput{Head: head, Tail: tail, Total: total}
	o.Dropped = max(0, total-int64(len(o.Head)+len(o.Tail)))
	return o
}

// JobOutput returns the first 64 KiB and the last 1 MiB of job id's
// stdout and stderr. It works after the job and the session have ended
// too.
func (s *Session) JobOutput(id int) (JobOutput, error) {
	j, err := s.job(id)
	if err != nil {
		return JobOutput{}, err
	}
	return j.out.output(), nil
}

// WaitJob waits until job id has ended or has printed more than seen
// bytes in all (JobOutput.Total), or ctx is done; it returns ctx's error
// only in the last case.
func (s *Session) WaitJob(ctx context.Context, id int, seen int64) error {
	j, err := s.job(id)
	if err != nil {
		return err
	}
	for {
		grew, total := j.out.grown()
		select {
		case <-j.exited:
			// What it printed last is read to the end (its process
			// group is killed at its exit, so the pipe closes).
			select {
			case <-j.drained:
			case <-ctx.Done():
			}
			return nil
		default:
		}
		if total > seen {
			return nil
		}
		select {
		case <-j.exited:
			continue
		case <-grew:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
