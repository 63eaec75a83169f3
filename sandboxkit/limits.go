package sandboxkit

import (
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
	"golang.org/x/sys/unix"
)

// Limits bound what one sandbox (a Run, or a whole Session) may consume,
// so that one user's fork bomb, memory hog or disk filler cannot take the
// server or other users down. A zero field sets no limit of its kind.
//
// Processes, memory and CPU are enforced by a cgroup of the sandbox's own
// under a subtree delegated to the service user (package cgroup). Without
// one, the sandbox runs with the rlimits and tmpfs sizes only ("rlimits
// only" in the Doctor), unless Require refuses it.
type Limits struct {
	// Pids caps processes and threads together (cgroup pids.max): a fork
	// bomb stops there instead of exhausting the host's pid table.
	Pids int64
	// Memory caps memory in bytes, tmpfs and page cache included, with
	// no swap beyond it (cgroup memory): an allocation beyond it is
	// OOM-killed inside the sandbox, not in the server.
	Memory int64
	// CPU caps CPU time in cores' worth (cgroup CPU quota): spinning
	// sandboxes leave the rest of the machine to the server.
	CPU float64
	// TmpSize and HomeSize cap the tmpfs at /tmp and HOME in bytes (bwrap
	// --size; TmpSize also caps Policy.Tmpfs mounts): writes beyond fail
	// with ENOSPC. Without them a tmpfs may grow to half the host's RAM.
	TmpSize, HomeSize int64
	// FileSize caps the size of one written file in bytes (RLIMIT_FSIZE):
	// beyond it a write fails with EFBIG (the process gets SIGXFSZ).
	FileSize int64
	// OpenFiles caps each process's open descriptors (RLIMIT_NOFILE).
	// At least 64 when set.
	OpenFiles int64
	// AddressSpace caps each process's virtual memory in bytes
	// (RLIMIT_AS): an allocation beyond it fails inside the process (a
	// Go program dies with "out of memory") before the cgroup's Memory
	// is reached. Mappings count, not use: runtimes that reserve large
	// ranges (the race detector's, the JVM's) cannot start under a small
	// one. Meant for one-shot parsers.
	AddressSpace int64
	// CPUTime caps each process's CPU time (RLIMIT_CPU, whole seconds):
	// SIGXCPU at the limit, SIGKILL a second later. It bounds work, where
	// Cmd.Timeout bounds waiting.
	CPUTime time.Duration
	// Disk caps the blocks the sandbox's writable host trees occupy, in
	// bytes: the workspace's upper layer (and overlayfs's work dir) and
	// the directories bound ReadWrite. The command running when it is
	// crossed is killed, and a one-shot command that ends above it
	// fails (LimitError{Limit: "disk"}). Sparse files count what they
	// occupy, not their apparent size.
	Disk int64
	// DiskReserve and DiskReservePercent set the free space to keep on
	// the filesystem that holds the workspace's upper layer (what an
	// unprivileged user may still write: statfs's f_bavail), whatever
	// Disk says: DiskReserve bytes or DiskReservePercent of the
	// filesystem's size, the smaller of those set. A command that takes
	// free space below it is killed (LimitError{Limit: "disk_free"}),
	// and no sandbox with a workspace there starts while it is below
	// (ErrDiskReserve). It keeps one conversation from filling the disk
	// that the others, and the caller's own files, live on.
	DiskReserve        int64
	DiskReservePercent float64

	// Cgroup is the delegated subtree (cgroup.Options.Path); empty means
	// this process's own cgroup on v2, CgroupParent/USER on v1.
	Cgroup string
	// CgroupParent is the directory under each cgroup v1 controller that
	// holds one subtree per service user (cgroup.Options.Parent), for an
	// empty Cgroup; with neither, a v1 host has no subtree.
	CgroupParent string
	// Require refuses to start a sandbox whose Pids, Memory or CPU cannot
	// be enforced, with an *UnavailableError (errors.Is ErrUnavailable
	// and ErrLimitsUnavailable), instead of running it with rlimits only.
	Require bool
}

// Core dumps are always off (RLIMIT_CORE 0): a dump lands in the
// workspace or, with a piped core_pattern, starts a helper on the host.

// DefaultLimits are the limits Settings' constructors apply unless
// Settings.Limits says otherwise.
func DefaultLimits() Limits {
	return Limits{
		Pids:      512,
		Memory:    2 << 30,
		CPU:       1,
		TmpSize:   512 << 20,
		HomeSize:  512 << 20,
		FileSize:  4 << 30,
		OpenFiles: 4096,
		Disk:      5 << 30,
		// 5 % of the filesystem, at most 2 GiB.
		DiskReserve:        2 << 30,
		DiskReservePercent: 5,
	}
}

// The limits a command can hit, as State.Limit, JobInfo.Limit and
// LimitError.Limit name them.
const (
	// limitMemory: the out-of-memory killer killed a process of the
	// sandbox at Limits.Memory.
	limitMemory = "memory"
	// limitPids: Limits.Pids refused a fork.
	limitPids = "pids"
	// limitDisk: the workspace crossed Limits.Disk and the command was
	// killed.
	limitDisk = "disk"
	// limitDiskFree: free space on the workspace's filesystem fell below
	// Limits.DiskReserve while the command wrote, and it was killed.
	limitDiskFree = "disk_free"
)

// diskFree returns the space an unprivileged user may still write on the
// filesystem that holds path, and the filesystem's size, in bytes.
func diskFree(path string) (free, size int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("sandboxkit: free space: %w", err)
	}
	return int64(st.Bavail) * st.Frsize, int64(st.Blocks) * st.Frsize, nil
}

// DiskReserveOf is the free space l keeps on a filesystem of size bytes
// (0: none).
func (l Limits) DiskReserveOf(size int64) int64 {
	r := l.DiskReserve
	if l.DiskReservePercent > 0 {
		p := int64(float64(size) * l.DiskReservePercent / 100)
		if r == 0 || p < r {
			r = p
		}
	}
	return r
}

func (l Limits) keepsFree() bool { return l.DiskReserve > 0 || l.DiskReservePercent > 0 }

// checkReserve refuses a start while w's filesystem is below l's reserve.
func checkReserve(w *Workspace, l Limits) error {
	if w == nil || !l.keepsFree() {
		return nil
	}
	free, size, err := diskFree(w.Upper)
	if err != nil {
		return err
	}
	if reserve := l.DiskReserveOf(size); free < reserve {
		return fmt.Errorf("%w (%s free, %s kept free); nothing was run: delete files to free space", ErrDiskReserve, sizeString(free), sizeString(reserve))
	}
	return nil
}

// LimitError reports a command that failed while one of its sandbox's
// limits was hit. Err is what the command's end would have been
// otherwise (an *ExitError, or the context's error), so errors.As still
// finds the *ExitError.
type LimitError struct {
	// Limit names the limit: "memory" (the out-of-memory killer struck at
	// Limits.Memory), "pids" (Limits.Pids refused a fork), "disk" (the
	// writable trees crossed Limits.Disk) or "disk_free" (free space fell
	// below the reserve while the command wrote).
	Limit string
	// Message says which limit, its value, and what to do; it is meant
	// for the person or the model that ran the command.
	Message string
	Err     error
}

func (e *LimitError) Error() string { return e.Message }
func (e *LimitError) Unwrap() error { return e.Err }

// Validate reports a limit that is negative or too small for a sandbox to start.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"Pids", l.Pids}, {"Memory", l.Memory}, {"TmpSize", l.TmpSize}, {"HomeSize", l.HomeSize}, {"FileSize", l.FileSize}, {"OpenFiles", l.OpenFiles}, {"Disk", l.Disk}, {"DiskReserve", l.DiskReserve}, {"DiskReservePercent", int64(l.DiskReservePercent)}, {"AddressSpace", l.AddressSpace}, {"CPUTime", int64(l.CPUTime)}} {
		if f.v < 0 {
			return fmt.Errorf("sandboxkit: negative limit %s %d", f.name, f.v)
		}
	}
	if l.DiskReservePercent < 0 || l.DiskReservePercent > 100 || math.IsNaN(l.DiskReservePercent) {
		return fmt.Errorf("sandboxkit: DiskReservePercent %v is not a percentage from 0 to 100", l.DiskReservePercent)
	}
	if l.CPU < 0 || math.IsNaN(l.CPU) || math.IsInf(l.CPU, 0) || (l.CPU > 0 && l.CPU*100000 < 1000) {
		return fmt.Errorf("sandboxkit: CPU limit %v must be at least 0.01 cores (0 means none)", l.CPU)
	}
	if l.OpenFiles > 0 && l.OpenFiles < 64 {
		return fmt.Errorf("sandboxkit: OpenFiles limit %d is below 64: the sandbox itself needs some", l.OpenFiles)
	}
	if l.Memory > 0 && l.Memory < 16<<20 {
		return fmt.Errorf("sandboxkit: Memory limit %d is below 16 MiB: the sandbox cannot start", l.Memory)
	}
	if l.AddressSpace > 0 && l.AddressSpace < 64<<20 {
		return fmt.Errorf("sandboxkit: AddressSpace limit %d is below 64 MiB: bwrap and a program's runtime cannot start", l.AddressSpace)
	}
	if l.Pids > 0 && l.Pids < 8 {
		return fmt.Errorf("sandboxkit: Pids limit %d is below 8: the sandbox cannot start", l.Pids)
	}
	return nil
}

func (l Limits) needsCgroup() bool { return l.Pids > 0 || l.Memory > 0 || l.CPU > 0 }

func (l Limits) cgroup() cgroup.Limits {
	return cgroup.Limits{Pids: l.Pids, Memory: l.Memory, CPU: l.CPU}
}

// cgroupTrees caches the opened subtree per configured path and parent for the life
// of the process (its groups' sequence and one-time preparation live in
// it). A failure is not cached: an operator may delegate one meanwhile.
var cgroupTrees struct {
	sync.Mutex
	m map[cgroup.Options]*cgroup.Tree
}

func cgroupTree(path, parent string) (*cgroup.Tree, error) {
	cgroupTrees.Lock()
	defer cgroupTrees.Unlock()
	key := cgroup.Options{Path: path, Parent: parent}
	if t := cgroupTrees.m[key]; t != nil {
		return t, nil
	}
	t, err := cgroup.Open(key)
	if err != nil {
		return nil, err
	}
	if cgroupTrees.m == nil {
		cgroupTrees.m = map[cgroup.Options]*cgroup.Tree{}
	}
	cgroupTrees.m[key] = t
	return t, nil
}

// limitsCheck is the Doctor's "limits" check for l. Without a delegated
// cgroup it passes with a warning ("rlimits only"), or fails when l
// requires cgroup limits.
func limitsCheck(l Limits) Check {
	const name = "limits"
	if !l.needsCgroup() {
		return Check{Name: name, OK: true, Detail: "no process, memory or CPU limits configured"}
	}
	t, err := cgroupTree(l.Cgroup, l.CgroupParent)
	if err != nil {
		c := Check{Name: name, Warning: true, OK: !l.Require, Detail: "rlimits only: processes, memory and CPU are not bounded per sandbox (" + err.Error() + ")", Remedy: cgroup.Remedy()}
		if l.Require {
			c.Detail = "sandbox.require_limits is set and " + c.Detail
		}
		return c
	}
	c := Check{Name: name, OK: true, Detail: fmt.Sprintf("%s: each sandbox in its own group (pids %d, memory %s, cpu %g)", t, l.Pids, sizeString(l.Memory), l.CPU)}
	if l.Memory > 0 && !t.SwapLimited() {
		c.Warning = true
		c.Detail += "; swap is not bounded: the kernel does not account swap in cgroups, so a sandbox may swap beyond its memory"
		c.Remedy = "enable swap accounting (kernel parameter swapaccount=1, or a kernel with it), or run without swap"
	}
	return c
}

// limitsErr is the fail-closed error of a Policy that requires cgroup
// limits this machine cannot enforce, else nil.
func limitsErr(l Limits) error {
	if !l.Require || !l.needsCgroup() {
		return nil
	}
	if _, err := cgroupTree(l.Cgroup, l.CgroupParent); err != nil {
		return &UnavailableError{Check: limitsCheck(l), err: fmt.Errorf("%w: %w", ErrLimitsUnavailable, err)}
	}
	return nil
}

// sandboxLimits are one sandbox's cgroup and disk watch.
type sandboxLimits struct {
	lim   Limits
	group *cgroup.Group // nil: rlimits only
	join  *cgroup.Join  // until the sandbox started
}

// startLimits creates p's cgroup, when it asks for one and the machine
// delegates one. Without a delegated subtree it returns rlimits only
// (Available has refused a Policy that requires more).
func startLimits(p *Policy) (*sandboxLimits, error) {
	sl := &sandboxLimits{lim: p.Limits}
	if !p.Limits.needsCgroup() {
		return sl, nil
	}
	t, err := cgroupTree(p.Limits.Cgroup, p.Limits.CgroupParent)
	if err != nil {
		if p.Limits.Require {
			return nil, limitsErr(p.Limits)
		}
		return sl, nil
	}
	g, err := t.New(p.Limits.cgroup())
	if err != nil {
		return nil, fmt.Errorf("sandboxkit: the sandbox's cgroup: %w", err)
	}
	j, err := g.Join()
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("sandboxkit: the sandbox's cgroup: %w", err)
	}
	sl.group, sl.join = g, j
	return sl, nil
}

// started drops the descriptors that moved the sandbox into its group.
func (sl *sandboxLimits) started() {
	if sl.join != nil {
		sl.join.Close()
		sl.join = nil
	}
}

func (sl *sandboxLimits) events() cgroup.Events {
	if sl == nil || sl.group == nil {
		return cgroup.Events{}
	}
	return sl.group.Events()
}

// hit names the cgroup limit hit between two readings of the counters.
func (sl *sandboxLimits) hit(before cgroup.Events) string {
	after := sl.events()
	switch {
	case after.OOMKills > before.OOMKills:
		return limitMemory
	case after.PidsMax > before.PidsMax:
		return limitPids
	}
	return ""
}

// close removes the group once the sandbox is gone.
func (sl *sandboxLimits) close() error {
	if sl == nil {
		return nil
	}
	sl.started()
	if sl.group == nil {
		return nil
	}
	return sl.group.Close()
}

// diskHit is why the disk watch killed a command: the budget (n: the
// workspace's usage) or the reserve (n: the free space left).
type diskHit struct {
	limit string
	n     int64
}

// message describes limit l for the model and the person; n is the
// disk watch's reading for limitDisk and limitDiskFree.
func (l Limits) message(hit string, used int64) string {
	switch hit {
	case limitMemory:
		return fmt.Sprintf("the sandbox's memory limit (%s, no swap) was reached and the out-of-memory killer killed a process; use less memory (smaller inputs, fewer parallel jobs)", sizeString(l.Memory))
	case limitPids:
		return fmt.Sprintf("the sandbox's process limit (%d processes and threads) was reached and a fork failed; run fewer processes at once", l.Pids)
	case limitDisk:
		return fmt.Sprintf("the command was stopped: the workspace's disk budget (%s) is used up (%s used); delete files in the workspace to free space", sizeString(l.Disk), sizeString(used))
	case limitDiskFree:
		return fmt.Sprintf("the command was stopped (disk_free): the server's disk is nearly full (%s free, less than the reserve that must stay free); delete files in the workspace to free space", sizeString(used))
	}
	return ""
}

// limitError wraps err, the end of a command, with the limit it hit.
func (l Limits) limitError(hit string, used int64, err error) error {
	if hit == "" {
		return err
	}
	return &LimitError{Limit: hit, Message: "sandboxkit: " + l.message(hit, used), Err: err}
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// diskWatch measures a workspace's upper layer while commands run, and
// calls over when the usage crosses the budget and is still growing: a
// command started after the budget was reached may delete files (rm
// shrinks the layer) without being killed, one that writes more is.
// Likewise below the reserve of free space on the layer's filesystem
// (a statfs at every tick, cheap beside the walk, which is paced by its
// own cost): a command is killed there when the layer grew, so that
// another writer of the filesystem does not get it killed.
type diskWatch struct {
	stop chan struct{}
	done chan struct{}
}

// A fast writer (a checkout from the page cache writes about 1 MiB a
// millisecond) gets diskPollMin of writing past the budget before it is
// stopped; the walk itself is paced by its cost, so a short tick costs
// a timer and a statfs while commands run.
const (
	diskPollMin = 20 * time.Millisecond
	diskPollMax = 5 * time.Second
)

// diskDyingMax bounds how long growth after a stop is put down to the
// stopped commands: a SIGKILL ends them in far less, and a command
// started meanwhile writes uncharged only that long. A variable for the
// tests.
var diskDyingMax = time.Second

// watchDisk starts watching the trees dirs (diskTrees). base is their
// usage before the first command started (treesUsage): the first reading
// is compared with it, so a command that crosses the budget at once
// (fallocate) is stopped too. A reading is also taken when the commands
// stop running, so the next command is compared with what they left.
// With a free-space reserve (Limits.DiskReserve), the filesystem of
// dirs[0] is watched too.
//
// over stops the running commands and returns a channel closed once
// they have exited, or nil if it stopped nothing; a growth that stopped
// nothing is measured again from the same reading. The stopped commands
// write on until they die (bytes between the reading and the kill), so
// until they have exited, growth is theirs and stops no one else (a
// command started just after them, an rm say); then one reading is the
// new baseline. A command's start does not move it: a writer that
// outlives the commands around it is measured from the reading before
// however often they start.
func watchDisk(dirs []string, l Limits, base int64, active func() bool, over func(diskHit) <-chan struct{}) *diskWatch {
	budget := l.Disk
	d := &diskWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		last, wasActive := base, false
		var nextWalk time.Time
		// dying is the stopped commands until they have exited (or
		// dyingEnd passed: then growth is charged to whatever runs).
		var dying <-chan struct{}
		var dyingEnd time.Time
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-dying:
				// What they wrote until they died is in this reading.
				last, dying = treesUsage(dirs, budget), nil
				continue
			case <-t.C:
			}
			if dying != nil && !time.Now().Before(dyingEnd) {
				dying = nil
			}
			if now := active(); dying == nil && (now || wasActive) {
				// Below the reserve, the walk says whether these
				// trees grew (others share the filesystem), at
				// once; an rm that frees space is not stopped.
				free, low := int64(0), false
				if l.keepsFree() {
					f, size, err := diskFree(dirs[0])
					free, low = f, err == nil && f < l.DiskReserveOf(size)
				}
				if low || (budget > 0 && !time.Now().Before(nextWalk)) || !now {
					start := time.Now()
					used := treesUsage(dirs, budget)
					// The walk is the cost: walk at most a tenth of the time.
					nextWalk = time.Now().Add(min(max(diskPollMin, 10*time.Since(start)), diskPollMax) - diskPollMin)
					var hit diskHit
					switch {
					case now && budget > 0 && used > budget && used > last:
						hit = diskHit{limitDisk, used}
					case now && low && used > last:
						hit = diskHit{limitDiskFree, free}
					}
					if hit.limit == "" {
						last = used
					} else if exited := over(hit); exited != nil {
						last, dying, dyingEnd = used, exited, time.Now().Add(diskDyingMax)
					}
					// Else the writer, not yet known as running, is
					// still owed a stop: last stays.
				}
				wasActive = now
			}
			t.Reset(diskPollMin)
		}
	}()
	return d
}

func (d *diskWatch) close() {
	if d != nil {
		close(d.stop)
		<-d.done
	}
}

// diskTrees are the host trees p's sandbox writes, which Limits.Disk
// bounds: the workspace's upper layer and overlayfs's work dir, and the
// ReadWrite binds (a bind that is not a directory counts nothing).
func diskTrees(p *Policy) []string {
	var dirs []string
	if w := p.Workspace; w != nil {
		dirs = append(dirs, w.Upper, w.Work)
	}
	for _, b := range p.ReadWrite {
		dirs = append(dirs, b.Src)
	}
	return dirs
}

// treesUsage is the blocks the trees dirs occupy. A tree deeper than the
// walk goes counts as the whole budget more: what it holds is not known,
// so the command that makes one is stopped as crossing the budget, and
// so is, while it exists, any command that writes elsewhere (writes
// below that depth are not seen).
func treesUsage(dirs []string, budget int64) int64 {
	var n int64
	deep := false
	for _, d := range dirs {
		u, du := diskUsage(d)
		n, deep = n+u, deep || du
	}
	if deep {
		return n + budget
	}
	return n
}

// diskUsage sums the blocks the tree at dir occupies, and says whether
// it holds directories deeper than diskMaxDepth, which it does not walk.
// The sandbox runs concurrently and may swap a directory for a symlink
// at any moment, so the walk never resolves a path: each directory is
// opened from its parent's descriptor with O_NOFOLLOW, and a symlink,
// an entry that vanished or one that cannot be opened is counted as
// itself only.
func diskUsage(dir string) (n int64, deep bool) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0, false
	}
	w := diskWalk{n: st.Blocks * 512}
	w.dir(fd, nil, 0)
	return w.n, w.deep
}

const (
	// diskAnchorDepth is how many levels below an open directory the
	// walk descends by name before it keeps one open: a walk holds a
	// descriptor per diskAnchorDepth levels (and two more), and counts
	// what lies deeper than PATH_MAX.
	diskAnchorDepth = 32
	// diskMaxDepth bounds the walk's depth, and so its time, stack and
	// descriptors; no project's tree comes near it.
	diskMaxDepth = 1024
)

type diskWalk struct {
	n    int64
	deep bool
}

// dir adds the blocks of the entries of the directory reached from
// anchor through the directories rel, depth levels below the top, and
// of their subtrees.
func (w *diskWalk) dir(anchor int, rel []string, depth int) {
	if depth >= diskMaxDepth {
		w.deep = true
		return
	}
	fd, err := unix.Openat(anchor, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	for _, name := range rel {
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return
		}
		fd = next
	}
	f := os.NewFile(uintptr(fd), "")
	names, _ := f.Readdirnames(-1)
	var dirs []string
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		w.n += st.Blocks * 512
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			dirs = append(dirs, name)
		}
	}
	if len(rel) < diskAnchorDepth {
		f.Close()
		for _, d := range dirs {
			w.dir(anchor, append(rel[:len(rel):len(rel)], d), depth+1)
		}
		return
	}
	// Deep enough: this directory anchors its subtree.
	defer f.Close()
	for _, d := range dirs {
		w.dir(fd, []string{d}, depth+1)
	}
}
