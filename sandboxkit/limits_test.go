package sandboxkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
	"golang.org/x/sys/unix"
)

func TestBuildTmpfsSizes(t *testing.T) {
	p := Policy{UID: 1000, GID: 1000, HostView: true, Tmpfs: []string{"/home"}, Limits: Limits{TmpSize: 1 << 20, HomeSize: 2 << 20}}
	l, err := p.build([]string{"true"}, buildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(l.Args, " ")
	for _, want := range []string{
		"--dev /dev --size 1048576 --tmpfs /tmp ",
		"--size 1048576 --tmpfs /home --size 2097152 --tmpfs " + homeDir + " ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("argv lacks %q:\n%s", want, got)
		}
	}
	// No size, no --size: the zero Policy's argv is unchanged.
	l, _ = (&Policy{}).build([]string{"true"}, buildOptions{})
	if slices.Contains(l.Args, "--size") {
		t.Errorf("zero Limits added --size: %q", l.Args)
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		l    Limits
		want string
	}{
		{"negative pids", Limits{Pids: -1}, "negative limit Pids"},
		{"tiny nofile", Limits{OpenFiles: 10}, "below 64"},
		{"tiny cpu", Limits{CPU: 0.001}, "0.01 cores"},
		{"tiny memory", Limits{Memory: 1 << 20}, "16 MiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := (&Policy{Limits: c.l}).build([]string{"true"}, buildOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// requireCgroups returns the delegated tree, skipping (failing under
// CI) without one: scripts/install-prereqs delegates it to the test user.
func requireCgroups(t testing.TB) *cgroup.Tree {
	t.Helper()
	requireSandbox(t)
	tr, err := cgroupTree("", sandboxtest.CgroupParent(t))
	if err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
	return tr
}

// enforcePolicy is the workspace profile under seccomp enforce with l.
func enforcePolicy(t *testing.T, l Limits) *Policy {
	t.Helper()
	if l.Cgroup == "" && l.CgroupParent == "" {
		l.CgroupParent = sandboxtest.CgroupParent(t)
	}
	w := sessionPolicy(t).Workspace
	p, err := Settings{Seccomp: seccomp.Enforce, Limits: &l}.Workspace("workspace", w)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// groups lists the sandbox groups in the tree.
func groups(t *testing.T, tr *cgroup.Tree) []string {
	ents, err := os.ReadDir(tr.Dirs()[0])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "sbx-"+strconv.Itoa(os.Getpid())+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// countOwnProcs counts the processes descended from this test process:
// the spawner, bwrap and everything in the sandboxes. That is the growth
// a bomb causes, without the rest of a shared machine (other test
// packages run beside this one and start processes of their own).
func countOwnProcs(t *testing.T) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(b[i+1:])); len(f) >= 2 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	self := os.Getpid()
	own := map[int]bool{self: true}
	var isOwn func(pid int, depth int) bool
	isOwn = func(pid, depth int) bool {
		if v, ok := own[pid]; ok {
			return v
		}
		pp, ok := parent[pid]
		v := ok && pp > 1 && depth < len(parent) && isOwn(pp, depth+1)
		own[pid] = v
		return v
	}
	n := 0
	for pid := range parent {
		if isOwn(pid, 0) {
			n++
		}
	}
	return n
}

// TestLimitsForkBomb: a fork bomb stops at the sandbox's pid limit, the
// host's process count stays below the limit + 50, the tool learns which
// limit it was, and another sandbox's command completes meanwhile.
func TestLimitsForkBomb(t *testing.T) {
	tr := requireCgroups(t)
	l := DefaultLimits()
	bomb := startSession(t, enforcePolicy(t, l), SessionOptions{})
	other := startSession(t, enforcePolicy(t, l), SessionOptions{})
	base := countOwnProcs(t)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	peak := 0
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			peak = max(peak, countOwnProcs(t)-base)
		}
	})
	// The sleep keeps the command, and so its process group, alive.
	c := bomb.Command(t.Context(), "bash", "-c", ":(){ :|:& };:; sleep 10")
	c.Timeout = 4 * time.Second
	var out bytes.Buffer
	c.Stderr = &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	// A second user's command completes while the bomb runs.
	start := time.Now()
	got, _, err := inSession(t, other, "echo alive")
	if err != nil || got != "alive\n" {
		t.Fatalf("other session during the bomb: %q %v", got, err)
	}
	t.Logf("other session's command took %v during the bomb", time.Since(start))
	err = c.Wait()
	close(stop)
	wg.Wait()

	var le *LimitError
	if !errors.As(err, &le) || le.Limit != limitPids || c.State.Limit != limitPids {
		t.Fatalf("bomb ended with %v (state %+v), want a pids LimitError", err, c.State)
	}
	if !strings.Contains(le.Error(), "process limit (512 processes") {
		t.Errorf("message: %q", le.Error())
	}
	if peak < int(l.Pids)/2 {
		// The bomb fills its limit: a count that misses it sees no sandbox.
		t.Errorf("the test's processes grew by only %d during the bomb: the count does not see the sandbox", peak)
	}
	if peak >= int(l.Pids)+50 {
		t.Errorf("the test's processes grew by %d during the bomb, want < %d", peak, l.Pids+50)
	}
	t.Logf("the test's processes (sandboxes included) grew by at most %d during the bomb (limit %d)", peak, l.Pids)
	// The session survives and is usable; its group is the same.
	if got, _, err := inSession(t, bomb, "echo after"); err != nil || got != "after\n" {
		t.Fatalf("bomb session after the bomb: %q %v", got, err)
	}
	if n := len(groups(t, tr)); n != 2 {
		t.Errorf("%d sandbox groups for 2 sessions", n)
	}
	bomb.Close()
	other.Close()
	if g := groups(t, tr); len(g) != 0 {
		t.Errorf("groups left after Close: %v", g)
	}
}

// TestLimitsMemory: allocating 4 GiB is killed inside the sandbox by the
// OOM killer of its cgroup, and Wait says so. (512 MiB rather than the
// default 2 GiB: the same path, in a fraction of the time.)
func TestLimitsMemory(t *testing.T) {
	requireCgroups(t)
	l := DefaultLimits()
	l.Memory = 512 << 20
	p := enforcePolicy(t, l)
	var out bytes.Buffer
	c := Command(t.Context(), p, "python3", "-c", "b = b'x' * (4 << 30); print('allocated')")
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	var le *LimitError
	var ee *ExitError
	if !errors.As(err, &le) || le.Limit != limitMemory || !errors.As(err, &ee) || ee.Code != 137 {
		t.Fatalf("4 GiB allocation: %v (%q), want a memory LimitError over exit 137", err, out.String())
	}
	if !strings.Contains(le.Error(), "memory limit (512 MiB, no swap)") || strings.Contains(out.String(), "allocated") {
		t.Fatalf("message %q, output %q", le.Error(), out.String())
	}
}

// TestLimitsTmpfs: /tmp is 512 MiB; writing 1 GiB there fails with
// ENOSPC, and HOME likewise.
func TestLimitsTmpfs(t *testing.T) {
	requireSandbox(t)
	p := enforcePolicy(t, DefaultLimits())
	for _, dir := range []string{"/tmp", homeDir} {
		var out bytes.Buffer
		c := Command(t.Context(), p, "sh", "-c", "head -c 1073741824 /dev/zero > "+dir+"/f; echo rc=$?; echo size=$(stat -c %s "+dir+"/f)")
		// Two pipes: head's error may come after the echoes.
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			t.Fatalf("%s: %v %s", dir, err, out.String())
		}
		_, after, _ := strings.Cut(out.String(), "size=")
		digits, _, _ := strings.Cut(after, "\n")
		size, _ := strconv.ParseInt(digits, 10, 64)
		if !strings.Contains(out.String(), "No space left on device") || !strings.Contains(out.String(), "rc=1") || size > 512<<20 || size < 500<<20 {
			t.Fatalf("%s: %q (size %d), want ENOSPC at 512 MiB", dir, out.String(), size)
		}
	}
}

// TestLimitsDiskBudget: yes > big in the workspace stops at the disk
// budget, in a Session and in a one-shot Run; the model is told why, and
// a later rm is not stopped.
func TestLimitsDiskBudget(t *testing.T) {
	requireSandbox(t)
	l := DefaultLimits()
	l.Disk = 64 << 20
	p := enforcePolicy(t, l)
	check := func(what string, err error, st *State) {
		t.Helper()
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != limitDisk || st.Limit != limitDisk {
			t.Fatalf("%s: %v (state %+v), want a disk LimitError", what, err, st)
		}
		if !strings.Contains(le.Error(), "disk budget (64 MiB) is used up") {
			t.Errorf("%s: message %q", what, le.Error())
		}
		used, _ := diskUsage(p.Workspace.Upper)
		// Stopped near the budget: yes alone would fill the disk.
		if used < l.Disk || used > l.Disk+768<<20 {
			t.Errorf("%s: upper layer holds %d bytes, want just over %d", what, used, l.Disk)
		}
		t.Logf("%s: stopped at %d MiB for a %d MiB budget", what, used>>20, l.Disk>>20)
	}

	s := startSession(t, p, SessionOptions{})
	_, c, err := inSession(t, s, "yes > big")
	check("session", err, c.State)
	// Deleting is not writing: it runs to the end.
	if out, _, err := inSession(t, s, "rm big && echo freed"); err != nil || out != "freed\n" {
		t.Fatalf("rm after the budget: %q %v", out, err)
	}
	if out, _, err := inSession(t, s, "truncate -s 3G sparse && sleep 0.5 && echo sparse-ok"); err != nil || out != "sparse-ok\n" {
		t.Fatalf("sparse file: %q %v", out, err)
	}
	s.Close()

	c = Command(t.Context(), p, "sh", "-c", "yes > big2")
	check("run", c.Run(), c.State)
}

// TestLimitsDiskBackgroundWriter: a background job that fills the
// workspace is stopped at the disk budget though foreground commands
// start and end around it faster than the disk watch reads.
func TestLimitsDiskBackgroundWriter(t *testing.T) {
	requireSandbox(t)
	l := DefaultLimits()
	l.Disk = 64 << 20
	p := enforcePolicy(t, l)
	s := startSession(t, p, SessionOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// Several loops, to start commands as often as a session can. Some are
	// stopped with the writer (they ran when it grew).
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				s.Command(ctx, "true").Run()
			}
		})
	}
	info, err := s.StartBackground(t.Context(), []string{"sh", "-c", "yes > bg"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), time.Minute)
	defer wcancel()
	if err := s.WaitJob(wctx, info.ID, 0); err != nil {
		used, _ := diskUsage(p.Workspace.Upper)
		t.Fatalf("the background writer was not stopped (%d MiB written): %v", used>>20, err)
	}
	cancel()
	wg.Wait()
	j := s.Jobs()[0]
	used, _ := diskUsage(p.Workspace.Upper)
	if j.Limit != limitDisk || used > l.Disk+768<<20 {
		t.Fatalf("job %+v, upper layer %d bytes; want stopped at the disk budget (%d)", j, used, l.Disk)
	}
	t.Logf("stopped at %d MiB for a %d MiB budget", used>>20, l.Disk>>20)
}

// TestLimitsDiskFastFill: a command that crosses the disk budget at
// once (fallocate takes no time) and then stops writing is stopped too,
// in a Session and in a one-shot Run; a sparse file of 3 GiB is not
// (blocks count, not apparent size).
func TestLimitsDiskFastFill(t *testing.T) {
	requireSandbox(t)
	l := DefaultLimits()
	l.Disk = 64 << 20
	p := enforcePolicy(t, l)
	s := startSession(t, p, SessionOptions{})
	// The session's first command: no reading of the workspace yet.
	const fill = "fallocate -l 200M big && sleep 3 && echo survived"
	start := time.Now()
	out, c, err := inSession(t, s, fill)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != limitDisk || strings.Contains(out, "survived") {
		t.Fatalf("session: %q %v (state %+v), want a disk LimitError", out, err, c.State)
	}
	t.Logf("session: stopped after %v", time.Since(start))
	if out, _, err := inSession(t, s, "rm big && echo freed"); err != nil || out != "freed\n" {
		t.Fatalf("rm after the budget: %q %v", out, err)
	}
	s.Close()

	var buf bytes.Buffer
	r := Command(t.Context(), p, "sh", "-c", fill)
	r.Stdout, r.Stderr = &buf, &buf
	if err := r.Run(); !errors.As(err, &le) || le.Limit != limitDisk || strings.Contains(buf.String(), "survived") {
		t.Fatalf("run: %q %v (state %+v), want a disk LimitError", buf.String(), err, r.State)
	}
}

// TestWatchDiskOwesAStop: a growth past the budget that stopped nothing
// (a Session command counts as running before it can be killed) is acted
// on at the next reading, though the tree has not grown since.
func TestWatchDiskOwesAStop(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte{1}, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	var calls int
	stopped := make(chan diskHit, 1)
	w := watchDisk([]string{dir}, Limits{Disk: 1 << 20}, 0, func() bool { return true }, func(h diskHit) <-chan struct{} {
		calls++
		if calls == 1 {
			return nil // the writer is not yet known
		}
		select {
		case stopped <- h:
		default:
		}
		return make(chan struct{})
	})
	defer w.close()
	select {
	case h := <-stopped:
		if h.limit != limitDisk || h.n < 4<<20 {
			t.Errorf("hit %+v, want %s with at least 4 MiB", h, limitDisk)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the overrun that stopped nothing was not acted on again")
	}
}

// tickingWatch starts watchDisk on a directory holding 2 MiB, with a
// budget of 1 MiB and commands always running. Each reading offers a
// value on the returned ticks (dropped unless the test waits for it);
// over sends its hit on hits and returns what next returns.
func tickingWatch(t *testing.T, next func() <-chan struct{}) (big string, ticks <-chan struct{}, hits <-chan diskHit) {
	t.Helper()
	dir := t.TempDir()
	big = filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte{1}, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	tc, hc := make(chan struct{}), make(chan diskHit, 16)
	active := func() bool {
		select {
		case tc <- struct{}{}:
		default:
		}
		return true
	}
	w := watchDisk([]string{dir}, Limits{Disk: 1 << 20}, 0, active, func(h diskHit) <-chan struct{} {
		hc <- h
		return next()
	})
	t.Cleanup(w.close)
	return big, tc, hc
}

// setDiskDyingMax sets diskDyingMax for t, before its watch starts and
// until it has stopped (cleanups run last first).
func setDiskDyingMax(t *testing.T, d time.Duration) {
	old := diskDyingMax
	diskDyingMax = d
	t.Cleanup(func() { diskDyingMax = old })
}

// grow appends n bytes to path.
func grow(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(bytes.Repeat([]byte{1}, n))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// growUntilHit appends to path at each reading until the watch stops
// someone: a writer over the budget must be stopped.
func growUntilHit(t *testing.T, path string, ticks <-chan struct{}, hits <-chan diskHit) diskHit {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		grow(t, path, 64<<10)
		select {
		case h := <-hits:
			return h
		case <-ticks:
		case <-timeout:
			t.Fatal("a writer over the budget was not stopped")
		}
	}
}

// TestWatchDiskDyingWrites: what the stopped commands write until they
// have exited (the bytes between the reading and the kill) stops no one
// else, such as an rm started at once; after their exit a writer over
// the budget is stopped again.
func TestWatchDiskDyingWrites(t *testing.T) {
	// Only the exit ends their grace here.
	setDiskDyingMax(t, time.Hour)
	exited := make(chan struct{})
	big, ticks, hits := tickingWatch(t, func() <-chan struct{} { return exited })
	if h := <-hits; h.limit != limitDisk {
		t.Fatalf("first hit %+v, want %s", h, limitDisk)
	}
	// The stopped command's last writes, seen by later readings.
	grow(t, big, 256<<10)
	for range 5 {
		<-ticks
	}
	select {
	case h := <-hits:
		t.Fatalf("growth before the stopped commands exited stopped someone: %+v", h)
	default:
	}
	close(exited)
	if h := growUntilHit(t, big, ticks, hits); h.n < 2<<20+256<<10 {
		t.Errorf("hit %+v, want at least %d bytes", h, 2<<20+256<<10)
	}
}

// TestWatchDiskDyingBounded: a stopped command that does not exit does
// not shield a writer for longer than diskDyingMax.
func TestWatchDiskDyingBounded(t *testing.T) {
	setDiskDyingMax(t, 100*time.Millisecond)
	big, ticks, hits := tickingWatch(t, func() <-chan struct{} { return make(chan struct{}) })
	<-hits
	growUntilHit(t, big, ticks, hits)
}

// TestLimitsDiskReadWrite: the disk budget covers a directory bound
// read-write (here the git profile's /out): a command that keeps writing
// there is stopped, and one that crosses the budget at once and exits
// before the first reading fails all the same; one within it runs.
func TestLimitsDiskReadWrite(t *testing.T) {
	requireSandbox(t)
	l := DefaultLimits()
	l.Disk = 64 << 20
	for _, tc := range []struct {
		name, cmd string
		limit     string
	}{
		{"keeps writing", "yes > /out/big", limitDisk},
		{"at once, then exits", "fallocate -l 200M /out/big", limitDisk},
		{"within the budget", "fallocate -l 16M /out/small", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := mirrorPolicy(Settings{Seccomp: seccomp.Enforce, Limits: &l}, t.TempDir(), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			c := Command(t.Context(), p, "sh", "-c", tc.cmd)
			err = c.Run()
			var le *LimitError
			if got := errors.As(err, &le); got != (tc.limit != "") || got && le.Limit != tc.limit || c.State.Limit != tc.limit {
				t.Fatalf("%s: %v (state %+v), want limit %q", tc.cmd, err, c.State, tc.limit)
			}
			if tc.limit == "" && err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLimitsRlimits: the rlimits hold inside, hard, and no core dumps.
func TestLimitsRlimits(t *testing.T) {
	requireSandbox(t)
	l := DefaultLimits()
	l.OpenFiles, l.FileSize = 200, 1<<20
	p := enforcePolicy(t, l)
	var out bytes.Buffer
	c := Command(t.Context(), p, "bash", "-c", "echo $(ulimit -Sn) $(ulimit -Hn) $(ulimit -Hf) $(ulimit -Hc) $(cat /proc/self/cgroup); ulimit -Hn 300 2>/dev/null || echo cannot-raise; head -c 2000000 /dev/zero > f; echo rc=$?")
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("%v %s", err, out.String())
	}
	got := out.String()
	// ulimit -f counts 1024-byte blocks; the sandbox's cgroup namespace
	// shows its own group as the root. (stdout and stderr are two pipes:
	// bash's "File size limit exceeded" may come first.)
	if !strings.Contains(got, "200 200 1024 0 ") || !strings.Contains(got, "cannot-raise") || !strings.Contains(got, "File size limit exceeded") {
		t.Fatalf("inside: %q", got)
	}
	parent := sandboxtest.CgroupParent(t)
	for line := range strings.SplitSeq(got, " ") {
		if (parent != "" && strings.Contains(line, parent)) || strings.Contains(line, "sbx-") {
			t.Fatalf("the sandbox sees its cgroup path: %q", got)
		}
	}
}

// TestLimitsCPU: spinning processes run in their sandbox's CPU group,
// under its quota, and are throttled there. (That the quota keeps the
// server responsive is measured by scripts/bench, not by a timed test.)
func TestLimitsCPU(t *testing.T) {
	tr := requireCgroups(t)
	if tr.Version() != cgroup.V1 {
		t.Skip("reads the v1 cpu layout")
	}
	l := DefaultLimits()
	// 5 ms of every 100 ms: two busy loops exceed it even on a loaded
	// machine, so the group is throttled in every period.
	l.CPU = 0.05
	s := startSession(t, enforcePolicy(t, l), SessionOptions{})
	for range 2 {
		if _, err := s.StartBackground(t.Context(), []string{"sh", "-c", "while :; do :; done"}, nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	dir := s.limits.group.Dirs()[2]
	quota, _ := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	// The supervisor, bwrap and its child, the two jobs.
	if strings.TrimSpace(string(quota)) != "5000" || len(strings.Fields(string(procs))) < 4 {
		t.Fatalf("quota %q, processes %q", quota, procs)
	}
	var stat []byte
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		stat, _ = os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if throttled(stat) == 0 {
			return fmt.Errorf("two busy loops were never throttled at 0.05 cores:\n%s", stat)
		}
		return nil
	})
	t.Logf("cpu.stat:\n%s", stat)
}

// throttled reads nr_throttled from a cpu.stat.
func throttled(stat []byte) int {
	for line := range strings.Lines(string(stat)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "nr_throttled "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// TestLimitsRequire: without a delegated cgroup, the Doctor says "rlimits
// only" and sandboxes still start; with Require they refuse, before
// anything runs, with an errors.Is-able error.
func TestLimitsRequire(t *testing.T) {
	requireSandbox(t)
	l := DefaultLimits()
	l.Cgroup = "no-such-parent/no-such-user"
	rep := Doctor(t.Context(), DoctorOptions{Limits: &l})
	lc := rep.Checks[len(rep.Checks)-1]
	if lc.Name != "limits" || !lc.OK || !lc.Warning || !strings.HasPrefix(lc.Detail, "rlimits only") || lc.Remedy != cgroup.Remedy() || rep.Err() != nil {
		t.Fatalf("doctor without delegation: %+v, %v", lc, rep.Err())
	}
	p := enforcePolicy(t, l)
	if out, err := exec1(t, p, "echo ran"); err != nil || out != "ran\n" {
		t.Fatalf("rlimits only: %q %v", out, err)
	}

	l.Require = true
	rep = Doctor(t.Context(), DoctorOptions{Limits: &l})
	if err := rep.Err(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrLimitsUnavailable) {
		t.Fatalf("doctor with require_limits: %v", err)
	}
	p = enforcePolicy(t, l)
	marker := filepath.Join(p.Workspace.Upper, "ran")
	_, err := exec1(t, p, "touch ran")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrLimitsUnavailable) || !errors.Is(err, cgroup.ErrNotDelegated) {
		t.Fatalf("Run with Require: %v", err)
	}
	if _, err := StartSession(t.Context(), p, SessionOptions{}); !errors.Is(err, ErrLimitsUnavailable) {
		t.Fatalf("StartSession with Require: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran")
	}
}

// TestLimitsDoctorDelegated: with the delegated tree the limits check
// passes and names it; it warns exactly when swap is not accounted.
func TestLimitsDoctorDelegated(t *testing.T) {
	tr := requireCgroups(t)
	l := DefaultLimits()
	l.CgroupParent = sandboxtest.CgroupParent(t)
	lc := limitsCheck(l)
	if !lc.OK || !strings.HasPrefix(lc.Detail, tr.String()) || lc.Warning != !tr.SwapLimited() {
		t.Fatalf("limits check with %v (swap limited %v): %+v", tr, tr.SwapLimited(), lc)
	}
	t.Logf("%+v", lc)
}

func exec1(t *testing.T, p *Policy, script string) (string, error) {
	var out bytes.Buffer
	c := Command(t.Context(), p, "sh", "-c", script)
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}

// TestSessionMaxJobs: background jobs beyond MaxJobs are refused until
// one ends.
func TestSessionMaxJobs(t *testing.T) {
	requireSandbox(t)
	s := startSession(t, sessionPolicy(t), SessionOptions{MaxJobs: 2})
	var ids []int
	for range 2 {
		j, err := s.StartBackground(t.Context(), []string{"sleep", "60"}, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	if _, err := s.StartBackground(t.Context(), []string{"true"}, nil, ""); !errors.Is(err, ErrTooManyJobs) {
		t.Fatalf("third job: %v, want ErrTooManyJobs", err)
	}
	if err := s.Kill(ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartBackground(context.Background(), []string{"true"}, nil, ""); err != nil {
		t.Fatalf("after a kill: %v", err)
	}
}

// TestDiskUsageHostile: the disk budget's walk counts what lies below
// PATH_MAX, and never follows a directory that the sandbox swaps for a
// symlink while it walks (it then measured the host tree it points to).
func TestDiskUsageHostile(t *testing.T) {
	dir := t.TempDir()
	// 20 levels of 250-byte names: the file's path is over 5,000 bytes.
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("d", 250)
	for range 20 {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	ffd, err := unix.Openat(fd, "deep", unix.O_WRONLY|unix.O_CREAT, 0o644)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(ffd), "deep")
	if _, err := f.Write(bytes.Repeat([]byte("x"), 4<<20)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n, deep := diskUsage(dir); n < 4<<20 || deep {
		t.Errorf("a 4 MiB file below PATH_MAX: %d bytes counted (too deep %v)", n, deep)
	}

	// Deeper than the walk goes (its depth bounds the walk's time and
	// stack): the tree counts as the whole budget.
	chain := t.TempDir()
	if fd, err = unix.Open(chain, unix.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
		t.Fatal(err)
	}
	for range diskMaxDepth + 10 {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
	if _, deep := diskUsage(chain); !deep {
		t.Errorf("a chain of %d directories was walked to its end", diskMaxDepth+10)
	}
	if used := treesUsage([]string{chain, t.TempDir()}, 64<<20); used <= 64<<20 {
		t.Errorf("a workspace too deep to measure used %d of a 64 MiB budget, want more", used)
	}

	// A directory and a symlink to a big tree swap places all the time.
	swap := t.TempDir()
	target, err := filepath.Abs(filepath.Dir(os.Args[0]))
	if err != nil {
		t.Fatal(err)
	}
	big, _ := diskUsage(target)
	if err := os.Mkdir(filepath.Join(swap, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(swap, "s")); err != nil {
		t.Fatal(err)
	}
	stop := sandboxtest.Exchange(t, filepath.Join(swap, "d"), filepath.Join(swap, "s"))
	followed := 0
	for range 3000 {
		if n, _ := diskUsage(swap); n >= big/2 {
			followed++
		}
	}
	stop()
	if followed > 0 {
		t.Errorf("%d of 3000 walks followed the symlink into %s (%d bytes)", followed, target, big)
	}
}

func TestDiskReserveOf(t *testing.T) {
	for _, c := range []struct {
		l    Limits
		size int64
		want int64
	}{
		{Limits{}, 100 << 30, 0},
		{DefaultLimits(), 100 << 30, 2 << 30}, // 5 % is 5 GiB: the cap
		{DefaultLimits(), 10 << 30, 512 << 20},
		{Limits{DiskReserve: 1 << 20}, 100 << 30, 1 << 20},
		{Limits{DiskReservePercent: 10}, 1000, 100},
	} {
		if got := c.l.DiskReserveOf(c.size); got != c.want {
			t.Errorf("%+v of %d: %d, want %d", c.l, c.size, got, c.want)
		}
	}
	for _, p := range []float64{-1, 101} {
		if err := (Limits{DiskReservePercent: p}).Validate(); err == nil {
			t.Errorf("DiskReservePercent %v valid", p)
		}
	}
}
