package sandboxkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// sessionPolicy returns a workspace policy over a fresh lower tree.
func sessionPolicy(t testing.TB) *Policy {
	t.Helper()
	base := t.TempDir()
	// Runs before TempDir's own cleanup: overlayfs leaves a mode-000 dir.
	t.Cleanup(func() { overlay.RemoveAll(base) })
	w := &Workspace{Lower: filepath.Join(base, "lower"), Upper: filepath.Join(base, "upper"), Work: filepath.Join(base, "work")}
	for _, d := range []string{w.Lower, w.Upper, w.Work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{"keep.txt": "keep\n", "edit.txt": "edit\n", "gone.txt": "gone\n"} {
		if err := os.WriteFile(filepath.Join(w.Lower, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return &Policy{Workspace: w, UID: os.Getuid(), GID: os.Getgid()}
}

func startSession(t testing.TB, p *Policy, o SessionOptions) *Session {
	t.Helper()
	s, err := StartSession(t.Context(), p, o)
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// inSession runs script in s and returns its combined output.
func inSession(t testing.TB, s *Session, script string) (string, *Cmd, error) {
	t.Helper()
	var out bytes.Buffer
	c := s.Command(t.Context(), "sh", "-c", script)
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), c, err
}

func TestSessionForeground(t *testing.T) {
	requireSandbox(t)
	s := startSession(t, sessionPolicy(t), SessionOptions{})

	t.Run("output and exit 0", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		c := s.Command(t.Context(), "sh", "-c", "echo out; echo err >&2; pwd")
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		if stdout.String() != "out\n/workspace\n" || stderr.String() != "err\n" || c.State.ExitCode != 0 {
			t.Errorf("stdout %q stderr %q exit %d", stdout.String(), stderr.String(), c.State.ExitCode)
		}
	})
	t.Run("exit 3", func(t *testing.T) {
		_, c, err := inSession(t, s, "exit 3")
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != 3 || c.State.ExitCode != 3 {
			t.Errorf("err %v, state %+v; want exit 3", err, c.State)
		}
	})
	t.Run("signal", func(t *testing.T) {
		_, c, err := inSession(t, s, "kill -TERM $$")
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != 128+15 || c.State.ExitCode != 143 {
			t.Errorf("err %v, state %+v; want 143", err, c.State)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		var out bytes.Buffer
		c := s.Command(t.Context(), "tr", "a-z", "A-Z")
		c.Stdin, c.Stdout = strings.NewReader("hello sandbox\n"), &out
		if err := c.Run(); err != nil || out.String() != "HELLO SANDBOX\n" {
			t.Errorf("got %q, %v", out.String(), err)
		}
	})
	t.Run("env and dir", func(t *testing.T) {
		var out bytes.Buffer
		c := s.Command(t.Context(), "sh", "-c", `echo "$FOO $HOME"; pwd`)
		c.Env, c.Dir, c.Stdout = []string{"FOO=bar"}, "/tmp", &out
		if err := c.Run(); err != nil || out.String() != "bar "+homeDir+"\n/tmp\n" {
			t.Errorf("got %q, %v", out.String(), err)
		}
	})
	t.Run("output limit", func(t *testing.T) {
		var out bytes.Buffer
		c := s.Command(t.Context(), "sh", "-c", "yes | head -c 100000; yes no | head -c 100000 >&2")
		c.Stdout, c.Stderr, c.OutputLimit = &out, &out, 10
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		if !c.State.Truncated || !strings.HasPrefix(out.String(), "y\ny\ny\ny\ny\n\n[sandboxkit: output truncated") || out.Len() > 200 {
			t.Errorf("truncated %v, output %q", c.State.Truncated, out.String())
		}
	})
	t.Run("not found", func(t *testing.T) {
		err := s.Command(t.Context(), "no-such-command-here").Run()
		var se *SetupError
		if !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || !strings.Contains(err.Error(), "no-such-command-here") {
			t.Errorf("err %v; want a *SetupError wrapping ErrNotFound", err)
		}
		err = s.Command(t.Context(), "./missing").Run()
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("err %v; want ErrNotFound", err)
		}
	})
	t.Run("not executable", func(t *testing.T) {
		err := s.Command(t.Context(), "./keep.txt").Run() // mode 0600
		var se *SetupError
		if !errors.Is(err, ErrNotExecutable) || !errors.As(err, &se) || errors.Is(err, ErrNotFound) {
			t.Errorf("err %v; want a *SetupError wrapping ErrNotExecutable", err)
		}
	})
	t.Run("bad dir", func(t *testing.T) {
		c := s.Command(t.Context(), "true")
		c.Dir = "/no/such/dir"
		if err := c.Run(); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "/no/such/dir") {
			t.Errorf("err %v; want a working-directory error", err)
		}
		c = s.Command(t.Context(), "true")
		c.Dir = "relative"
		if err := c.Run(); err == nil || !strings.Contains(err.Error(), "absolute") {
			t.Errorf("err %v; want an absolute-path error", err)
		}
	})
	t.Run("timeout kills the command, not the session", func(t *testing.T) {
		start := time.Now()
		c := s.Command(t.Context(), "sh", "-c", "sleep 30 & sleep 30")
		c.Timeout = 200 * time.Millisecond
		err := c.Run()
		if !errors.Is(err, context.DeadlineExceeded) || c.State.ExitCode != -1 {
			t.Errorf("err %v, state %+v; want DeadlineExceeded, -1", err, c.State)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("timeout took %v", d)
		}
		// Both sleeps were in the command's process group.
		noSleepLeft(t, s)
	})
	t.Run("context cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		c := s.Command(ctx, "sleep", "30")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(100*time.Millisecond, cancel)
		if err := c.Wait(); !errors.Is(err, context.Canceled) {
			t.Errorf("err %v; want context.Canceled", err)
		}
	})
	t.Run("leftovers of the process group die with the command", func(t *testing.T) {
		start := time.Now()
		out, _, err := inSession(t, s, "sleep 30 & echo bg")
		if err != nil || out != "bg\n" || time.Since(start) > 5*time.Second {
			t.Errorf("got %q, %v after %v", out, err, time.Since(start))
		}
		noSleepLeft(t, s)
	})
	t.Run("a process that left the group does not hang Wait", func(t *testing.T) {
		start := time.Now()
		out, _, err := inSession(t, s, "setsid sleep 30 & sleep 0.3; echo fg")
		if d := time.Since(start); err != nil || out != "fg\n" || d < sessionWaitDelay || d > sessionWaitDelay+3*time.Second {
			t.Errorf("got %q, %v after %v", out, err, d)
		}
		// It runs on until the session ends.
		if out, _, _ := inSession(t, s, "pkill -x sleep && echo killed"); out != "killed\n" {
			t.Errorf("the escaped sleep: %q", out)
		}
	})
	t.Run("large command line", func(t *testing.T) {
		// Larger than a control record: travels in a memfd.
		var out bytes.Buffer
		c := s.Command(t.Context(), "sh", "-c", `printf %s "$BIG" | wc -c`)
		c.Env, c.Stdout = []string{"BIG=" + strings.Repeat("x", 100000)}, &out
		if err := c.Run(); err != nil || strings.TrimSpace(out.String()) != "100000" {
			t.Errorf("got %q, %v", out.String(), err)
		}
	})
	t.Run("run twice", func(t *testing.T) {
		c := s.Command(t.Context(), "true")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err == nil {
			t.Error("second Start succeeded")
		}
	})
}

// TestSessionIsolation checks what a command of a session can reach: only
// descriptors 0, 1 and 2, not the supervisor, and signals to pid 1 do not
// end the session.
func TestSessionIsolation(t *testing.T) {
	requireSandbox(t)
	s := startSession(t, sessionPolicy(t), SessionOptions{})
	for _, argv := range [][]string{{"ls", "/proc/self/fd"}, {"sh", "-c", "ls /proc/self/fd"}} {
		var out bytes.Buffer
		c := s.Command(t.Context(), argv...)
		c.Stdout = &out
		// A host descriptor as stdin still arrives as fd 0 only.
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		c.Stdin = f
		err = c.Run()
		f.Close()
		// fd 3 is ls's own handle on the directory it lists.
		if err != nil || out.String() != "0\n1\n2\n3\n" {
			t.Errorf("%q: descriptors %q, %v; want 0 1 2 and the listing's own", argv, out.String(), err)
		}
	}
	j, err := s.StartBackground(t.Context(), []string{"ls", "/proc/self/fd"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if out := waitOutput(t, s, j.ID, "3\n"); out != "0\n1\n2\n3\n" {
		t.Errorf("background job descriptors %q", out)
	}

	out, _, err := inSession(t, s, "ls /proc/1/fd 2>&1; cat /proc/1/environ 2>&1; echo; cat /proc/1/comm")
	if err != nil || !strings.Contains(out, "Permission denied") || strings.Contains(out, "PATH=") || !strings.HasSuffix(out, "sandboxkit\n") {
		t.Errorf("the supervisor is reachable: %q %v", out, err)
	}
	for _, sig := range []string{"TERM", "INT", "HUP", "QUIT", "SEGV", "USR1", "STOP"} {
		inSession(t, s, "kill -"+sig+" 1")
	}
	if out, _, err := inSession(t, s, "echo alive"); err != nil || out != "alive\n" {
		t.Errorf("after signals to pid 1: %q %v", out, err)
	}
	if err := s.Err(); err != nil {
		t.Errorf("session ended: %v", err)
	}
	// Commands get default signal dispositions, not the supervisor's.
	if out, _, err := inSession(t, s, "grep -E '^Sig(Ign|Blk)' /proc/self/status"); err != nil || !strings.Contains(out, "SigBlk:\t0000000000000000") || !strings.Contains(out, "SigIgn:\t0000000000000000") {
		t.Errorf("command signal state %q %v", out, err)
	}
}

func TestSessionWorkspace(t *testing.T) {
	requireSandbox(t)
	p := sessionPolicy(t)
	before := sandboxtest.Take(t, p.Workspace.Lower)
	s := startSession(t, p, SessionOptions{})
	if out, _, err := inSession(t, s, "echo new > new.txt && echo more >> edit.txt && rm gone.txt && cat keep.txt edit.txt"); err != nil || out != "keep\nedit\nmore\n" {
		t.Fatalf("got %q, %v", out, err)
	}
	// A later command sees the same mount.
	if out, _, err := inSession(t, s, "cat new.txt; ls"); err != nil || out != "new\nedit.txt\nkeep.txt\nnew.txt\n" {
		t.Errorf("second command sees %q, %v", out, err)
	}
	if b, err := os.ReadFile(filepath.Join(p.Workspace.Upper, "new.txt")); err != nil || string(b) != "new\n" {
		t.Errorf("upper new.txt: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(p.Workspace.Upper, "edit.txt")); err != nil || string(b) != "edit\nmore\n" {
		t.Errorf("upper edit.txt: %q %v", b, err)
	}
	before.Unchanged(t, p.Workspace.Lower)
}

// waitOutput polls job id's output until it contains want.
func waitOutput(t *testing.T, s *Session, id int, want string) string {
	t.Helper()
	var got string
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		out, _, err := s.Output(id)
		if err != nil {
			t.Fatal(err)
		}
		if got = string(out); !strings.Contains(got, want) {
			return fmt.Errorf("job %d output %q has no %q", id, out, want)
		}
		return nil
	})
	return got
}

// waitEnded polls until job id is no longer running.
func waitEnded(t *testing.T, s *Session, id int) {
	t.Helper()
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		for _, j := range s.Jobs() {
			if j.ID == id && !j.Running {
				return nil
			}
		}
		return fmt.Errorf("job %d still running", id)
	})
}

func TestSessionBackground(t *testing.T) {
	requireSandbox(t)
	s := startSession(t, sessionPolicy(t), SessionOptions{})
	j, err := s.StartBackground(t.Context(), []string{"sh", "-c", "echo started; echo $JOBVAR; pwd; while :; do sleep 0.1; done"}, []string{"JOBVAR=jv"}, "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != 1 || !j.Running || j.Pid <= 1 || j.ExitCode != -1 {
		t.Errorf("job %+v", j)
	}
	if out := waitOutput(t, s, j.ID, "/tmp\n"); out != "started\njv\n/tmp\n" {
		t.Errorf("output %q", out)
	}
	// Still running at the next foreground commands.
	for range 3 {
		script := fmt.Sprintf("kill -0 %d && tr '\\0' ' ' < /proc/%d/cmdline", j.Pid, j.Pid)
		if out, _, err := inSession(t, s, script); err != nil || !strings.HasPrefix(out, "sh -c echo started") {
			t.Fatalf("job not running: %q %v", out, err)
		}
	}
	jobs := s.Jobs()
	if len(jobs) != 1 || !jobs[0].Running || jobs[0].Args[0] != "sh" {
		t.Errorf("Jobs %+v", jobs)
	}

	short, err := s.StartBackground(t.Context(), []string{"sh", "-c", "echo done; exit 7"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, s, short.ID, "done")
	waitEnded(t, s, short.ID)
	if err := s.Kill(short.ID); err != nil { // already over: a no-op
		t.Fatal(err)
	}
	if jobs := s.Jobs(); len(jobs) != 2 || jobs[1].Running || jobs[1].ExitCode != 7 || jobs[1].Ended.IsZero() {
		t.Errorf("finished job %+v", jobs[1])
	}

	if err := s.Kill(j.ID); err != nil {
		t.Fatal(err)
	}
	jobs = s.Jobs()
	if jobs[0].Running || jobs[0].ExitCode != 128+9 {
		t.Errorf("killed job %+v", jobs[0])
	}
	if out, _, err := inSession(t, s, fmt.Sprintf("kill -0 %d 2>/dev/null || echo gone", j.Pid)); err != nil || out != "gone\n" {
		t.Errorf("after Kill: %q %v", out, err)
	}
	noSleepLeft(t, s)
	if out, trunc, err := s.Output(j.ID); err != nil || trunc || !strings.HasPrefix(string(out), "started\n") {
		t.Errorf("Output after Kill: %q %v %v", out, trunc, err)
	}
	if _, _, err := s.Output(99); !errors.Is(err, ErrNoJob) {
		t.Errorf("Output(99): %v", err)
	}
	if err := s.Kill(99); !errors.Is(err, ErrNoJob) {
		t.Errorf("Kill(99): %v", err)
	}
	if _, err := s.StartBackground(t.Context(), []string{"no-such-daemon"}, nil, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing background command: %v", err)
	}
}

// noSleepLeft waits until no sleep runs in the session. What a command
// left in its process group is killed as the command ends and reaped by
// pid 1 a moment later: a zombie is dead, and a survivor would outlive
// the wait by far.
func noSleepLeft(t *testing.T, s *Session) {
	t.Helper()
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		out, _, _ := inSession(t, s, "ps -eo stat=,comm= | grep -v '^Z' | grep -c ' sleep$' || true")
		if strings.TrimSpace(out) != "0" {
			return fmt.Errorf("a sleep survived its command: %q", out)
		}
		return nil
	})
}

func TestSessionBackgroundOutputCap(t *testing.T) {
	requireSandbox(t)
	s := startSession(t, sessionPolicy(t), SessionOptions{})
	j, err := s.StartBackground(t.Context(), []string{"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a; echo; echo END"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	out := waitOutput(t, s, j.ID, "END\n")
	_, trunc, _ := s.Output(j.ID)
	if len(out) != jobOutputMax || !trunc || !strings.HasSuffix(out, "aaaa\nEND\n") {
		t.Errorf("kept %d bytes, truncated %v, tail %q", len(out), trunc, out[max(0, len(out)-10):])
	}
}

// TestSessionWaitJob: WaitJob returns at its context's end while a job
// prints nothing, at its first output, and once it has ended with all of
// its output read; JobOutput then has the head and the real end of it.
func TestSessionWaitJob(t *testing.T) {
	requireSandbox(t)
	s := startSession(t, sessionPolicy(t), SessionOptions{})
	j, err := s.StartBackground(t.Context(), []string{"sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo HEAD; head -c 3000000 /dev/zero | tr '\\0' a; echo; echo END"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	err = s.WaitJob(ctx, j.ID, 0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitJob of a silent job: %v, want its context's deadline", err)
	}
	if err := s.Command(t.Context(), "touch", "/tmp/go").Run(); err != nil {
		t.Fatal(err)
	}
	for seen := int64(0); ; {
		if err := s.WaitJob(t.Context(), j.ID, seen); err != nil {
			t.Fatal(err)
		}
		o, err := s.JobOutput(j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if o.Total <= seen && slices.ContainsFunc(s.Jobs(), func(i JobInfo) bool { return i.ID == j.ID && i.Running }) {
			t.Fatalf("WaitJob returned with no new output (%d bytes) while the job runs", o.Total)
		}
		seen = o.Total
		if !slices.ContainsFunc(s.Jobs(), func(i JobInfo) bool { return i.ID == j.ID && !i.Running }) {
			continue
		}
		if err := s.WaitJob(t.Context(), j.ID, seen); err != nil {
			t.Fatal(err)
		}
		o, _ = s.JobOutput(j.ID)
		const total = 5 + 3000000 + 1 + 4
		if o.Total != total || !strings.HasPrefix(string(o.Head), "HEAD\naaa") || len(o.Head) != jobHeadMax || !strings.HasSuffix(string(o.Tail), "aaa\nEND\n") || o.Dropped != total-jobHeadMax-jobOutputMax {
			t.Errorf("output: total %d, head %d bytes %.10q, tail …%q, dropped %d", o.Total, len(o.Head), o.Head, o.Tail[max(0, len(o.Tail)-10):], o.Dropped)
		}
		return
	}
}

func TestTailBuffer(t *testing.T) {
	b := newTailBuffer(4)
	for _, s := range []string{"ab", "cd", "efghij", "k", "l", "m"} {
		b.Write([]byte(s))
	}
	if got, trunc := b.snapshot(); string(got) != "jklm" || !trunc {
		t.Errorf("got %q %v", got, trunc)
	}
	small := newTailBuffer(10)
	small.Write([]byte("abc"))
	if got, trunc := small.snapshot(); string(got) != "abc" || trunc {
		t.Errorf("got %q %v", got, trunc)
	}
}

func TestSessionConcurrent(t *testing.T) {
	requireSandbox(t)
	s := startSession(t, sessionPolicy(t), SessionOptions{})
	const n = 8
	var wg sync.WaitGroup
	outs := make([]string, n)
	errs := make([]error, n)
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			var out bytes.Buffer
			c := s.Command(t.Context(), "sh", "-c", "sleep 0.5; echo $N")
			c.Env, c.Stdout = []string{"N=" + strconv.Itoa(i)}, &out
			errs[i] = c.Run()
			outs[i] = out.String()
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || outs[i] != strconv.Itoa(i)+"\n" {
			t.Errorf("command %d: %q %v", i, outs[i], errs[i])
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("%d concurrent 0.5 s commands took %v", n, d)
	}
}

// Many sessions start at once under the log-mode filter, whose listener
// the supervisor stacks before the host can serve it: a supervisor
// thread under it that starts a thread (a cgo runtime does, with clone3)
// would wait for ever, and with it the ready message that hands the
// listener over. Rounds of 32 starts made that happen about every other
// run; the limit is for stuck starts, not slow ones.
func TestSessionStartsConcurrently(t *testing.T) {
	requireSandbox(t)
	f, err := seccomp.Load(seccomp.Log)
	if err != nil {
		t.Fatal(err)
	}
	const rounds, n = 3, 32
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				p := sessionPolicy(t)
				p.Seccomp = f.Program
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				s, err := StartSession(ctx, p, SessionOptions{})
				if err != nil {
					t.Errorf("round %d, session %d: %v", round, i, err)
					return
				}
				defer s.Close()
				if err := s.Observing(); err != nil {
					t.Errorf("round %d, session %d: %v", round, i, err)
				}
				var out bytes.Buffer
				c := s.Command(t.Context(), "sh", "-c", "echo $N")
				c.Env, c.Stdout = []string{"N=" + strconv.Itoa(i)}, &out
				if err := c.Run(); err != nil || out.String() != strconv.Itoa(i)+"\n" {
					t.Errorf("round %d, session %d: %q %v", round, i, out.String(), err)
				}
			})
		}
		wg.Wait()
	}
}

// The observing filter is on the supervisor's serving thread alone (its
// commands inherit it): the threads the Go runtime creates threads from
// are not under it.
func TestSessionListenerOnOneThread(t *testing.T) {
	requireSandbox(t)
	f, err := seccomp.Load(seccomp.Log)
	if err != nil {
		t.Fatal(err)
	}
	p := sessionPolicy(t)
	p.Seccomp = f.Program
	s := startSession(t, p, SessionOptions{})
	if err := s.Observing(); err != nil {
		t.Fatal(err)
	}
	out, _, err := inSession(t, s, "grep -h Seccomp_filters /proc/1/task/*/status; grep Seccomp_filters /proc/self/status")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var counts []int
	for line := range strings.Lines(out) {
		n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Seccomp_filters:")))
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		counts = append(counts, n)
	}
	if len(counts) < 3 {
		t.Fatalf("supervisor threads and the command: %v", counts)
	}
	command, threads := counts[len(counts)-1], counts[:len(counts)-1]
	under := 0
	for _, n := range threads {
		if n == command {
			under++
		} else if n != command-1 {
			t.Errorf("a supervisor thread has %d filters, the command %d", n, command)
		}
	}
	if under != 1 {
		t.Errorf("%d of %d supervisor threads under the command's filters (%v); want 1, the one that starts commands", under, len(threads), counts)
	}
}

func TestSessionUpperLock(t *testing.T) {
	requireSandbox(t)
	p := sessionPolicy(t)
	s := startSession(t, p, SessionOptions{})
	if _, err := StartSession(t.Context(), p, SessionOptions{}); !errors.Is(err, overlay.ErrInUse) {
		t.Fatalf("second session on one upper dir: %v; want overlay.ErrInUse", err)
	}
	if err := Command(t.Context(), p, "true").Run(); !errors.Is(err, overlay.ErrInUse) {
		t.Fatalf("Run on a session's upper dir: %v; want overlay.ErrInUse", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := startSession(t, p, SessionOptions{})
	if out, _, err := inSession(t, s2, "echo ok"); err != nil || out != "ok\n" {
		t.Errorf("after Close: %q %v", out, err)
	}
}

func TestSessionClose(t *testing.T) {
	requireSandbox(t)
	s := startSession(t, sessionPolicy(t), SessionOptions{})
	j, err := s.StartBackground(t.Context(), []string{"sh", "-c", "echo started; while :; do sleep 0.1; done"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, s, j.ID, "started")
	pid1, ns := sessionNS(t, s)
	procs := procsInNS(ns)
	jobHost := 0
	for host, inside := range procs {
		if inside == j.Pid {
			jobHost = host
		}
	}
	if procs[pid1] != 1 || jobHost == 0 {
		t.Fatalf("processes of the session %v: want pid 1 (%d) and the job (%d inside)", procs, pid1, j.Pid)
	}
	// A foreground command running while Close is called ends with
	// ErrSessionClosed.
	running := s.Command(t.Context(), "sleep", "30")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	bwrapPid, err := bwrapHostPid(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := running.Wait(); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("command running at Close: %v", err)
	}
	for _, pid := range []int{bwrapPid, pid1, jobHost} {
		if alive(pid) {
			t.Errorf("pid %d is still alive after Close", pid)
		}
	}
	if left := procsInNS(ns); len(left) > 0 {
		t.Errorf("processes left in the session's pid namespace: %v", left)
	}
	if !errors.Is(s.Err(), ErrSessionClosed) {
		t.Errorf("Err() = %v", s.Err())
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.Command(t.Context(), "true").Run(); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Command after Close: %v", err)
	}
	if _, err := s.StartBackground(t.Context(), []string{"true"}, nil, ""); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("StartBackground after Close: %v", err)
	}
	if jobs := s.Jobs(); len(jobs) != 1 || jobs[0].Running {
		t.Errorf("Jobs after Close: %+v", jobs)
	}
	if out, _, err := s.Output(j.ID); err != nil || !strings.HasPrefix(string(out), "started") {
		t.Errorf("Output after Close: %q %v", out, err)
	}
}

// TestSessionSupervisorDies kills pid 1 from the host: the session ends
// by itself, says so, and releases the workspace.
func TestSessionSupervisorDies(t *testing.T) {
	requireSandbox(t)
	p := sessionPolicy(t)
	s := startSession(t, p, SessionOptions{})
	running := s.Command(t.Context(), "sleep", "30")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	pid1, _ := sessionNS(t, s)
	syscall.Kill(pid1, syscall.SIGKILL)
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not notice that its supervisor died")
	}
	if err := s.Err(); !errors.Is(err, ErrSessionClosed) || !strings.Contains(err.Error(), "exited unexpectedly") {
		t.Errorf("Err() = %v", err)
	}
	if err := running.Wait(); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("the running command: %v", err)
	}
	if err := s.Command(t.Context(), "true").Run(); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Command after the supervisor died: %v", err)
	}
	startSession(t, p, SessionOptions{})
}

func TestSessionIdle(t *testing.T) {
	requireSandbox(t)
	p := sessionPolicy(t)
	s := startSession(t, p, SessionOptions{IdleTimeout: 500 * time.Millisecond})
	// A running foreground command keeps the session; a background one
	// does not.
	if _, err := s.StartBackground(t.Context(), []string{"sleep", "30"}, nil, ""); err != nil {
		t.Fatal(err)
	}
	if out, _, err := inSession(t, s, "sleep 1; echo survived"); err != nil || out != "survived\n" {
		t.Fatalf("command longer than IdleTimeout: %q %v", out, err)
	}
	start := time.Now()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the idle session did not close")
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("closed %v after the last command; IdleTimeout is 500ms", d)
	}
	if err := s.Err(); !errors.Is(err, ErrSessionClosed) || !strings.Contains(err.Error(), "idle") {
		t.Errorf("Err() = %v", err)
	}
	if err := s.Command(t.Context(), "true").Run(); !errors.Is(err, ErrSessionClosed) || !strings.Contains(err.Error(), "idle") {
		t.Errorf("Command after idle close: %v", err)
	}
	// The workspace lock went with it.
	startSession(t, p, SessionOptions{})
}

// TestSessionSetupFails: bwrap refuses the Policy; StartSession says
// why, and the workspace is free again.
func TestSessionSetupFails(t *testing.T) {
	requireSandbox(t)
	p := sessionPolicy(t)
	bad := *p
	bad.ReadOnly = []Bind{{Src: "/nonexistent-source", Dst: "/x"}}
	_, err := StartSession(t.Context(), &bad, SessionOptions{})
	var se *SetupError
	if !errors.As(err, &se) || !strings.Contains(se.Message, "/nonexistent-source") {
		t.Fatalf("err %v; want a *SetupError naming the missing source", err)
	}
	startSession(t, p, SessionOptions{})
}

func TestSessionNeedsMain(t *testing.T) {
	supervisor.MainCalled.Store(false)
	defer supervisor.MainCalled.Store(true)
	_, err := StartSession(t.Context(), &Policy{}, SessionOptions{})
	if err == nil || !strings.Contains(err.Error(), "sandboxkit.Main()") {
		t.Errorf("err %v; want a hint to call Main", err)
	}
}

func TestSessionUnavailable(t *testing.T) {
	_, err := StartSession(t.Context(), &Policy{Bwrap: "/nonexistent/bwrap"}, SessionOptions{})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("err %v; want ErrUnavailable", err)
	}
}

// TestSessionDiesWithHost kills a process that holds a session (this test
// binary, re-executed) and checks that every process of the sandbox dies.
func TestSessionDiesWithHost(t *testing.T) {
	requireSandbox(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), testChildEnv+"=session")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var pid1, jobHost int
	var ns string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "SESSION %d %d %s", &pid1, &jobHost, &ns); err == nil {
			break
		}
	}
	if ns == "" {
		t.Fatal("the helper did not report its session")
	}
	if procs := procsInNS(ns); procs[pid1] != 1 || procs[jobHost] == 0 {
		t.Fatalf("session processes %v; want %d and %d", procs, pid1, jobHost)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if p := procsInNS(ns); len(p) > 0 {
			return fmt.Errorf("processes of the sandbox outlived their host: %v", p)
		}
		return nil
	})
}

// sessionChild is the child of TestSessionDiesWithHost (see TestMain): it
// starts a session with a background job, reports them, and waits to be
// killed.
func sessionChild() error {
	s, err := StartSession(context.Background(), &Policy{UID: os.Getuid(), GID: os.Getgid()}, SessionOptions{})
	if err != nil {
		return err
	}
	j, err := s.StartBackground(context.Background(), []string{"sh", "-c", "while :; do sleep 0.1; done"}, nil, "")
	if err != nil {
		return err
	}
	pid1, ns, err := findSessionNS(s)
	if err != nil {
		return err
	}
	for host, inside := range procsInNS(ns) {
		if inside == j.Pid {
			fmt.Printf("SESSION %d %d %s\n", pid1, host, ns)
		}
	}
	select {}
}

// sessionNS returns the host pid of s's pid 1 (bwrap's child) and its pid
// namespace.
func sessionNS(t testing.TB, s *Session) (int, string) {
	t.Helper()
	pid, ns, err := findSessionNS(s)
	if err != nil {
		t.Fatal(err)
	}
	return pid, ns
}

func findSessionNS(s *Session) (int, string, error) {
	bwrapPid, err := bwrapHostPid(s)
	if err != nil {
		return 0, "", err
	}
	for _, p := range hostProcs() {
		if p.ppid == bwrapPid {
			return p.pid, p.pidns, nil
		}
	}
	return 0, "", fmt.Errorf("no child of bwrap (pid %d)", bwrapPid)
}

// bwrapHostPid returns the host pid of s's bwrap. The spawner knows it by
// its pid in the spawner's namespace: the second NSpid field of a child
// of the spawner.
func bwrapHostPid(s *Session) (int, error) {
	return spawnedHostPid(s.sp.Pid, s.bwrap.Proc.Pid)
}

func spawnedHostPid(spawner, pid int) (int, error) {
	for _, p := range hostProcs() {
		if p.ppid == spawner && len(p.nspid) > 1 && p.nspid[1] == pid {
			return p.pid, nil
		}
	}
	return 0, fmt.Errorf("no child of the spawner (pid %d) is pid %d in its namespace", spawner, pid)
}

// procsInNS maps the host pid of every live process in pid namespace ns
// to its pid inside.
func procsInNS(ns string) map[int]int {
	out := map[int]int{}
	for _, p := range hostProcs() {
		if p.pidns == ns && p.live && len(p.nspid) > 0 {
			out[p.pid] = p.nspid[len(p.nspid)-1]
		}
	}
	return out
}
