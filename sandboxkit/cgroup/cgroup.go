// Package cgroup puts each sandbox in a control group of its own, under a
// subtree of the cgroup hierarchy delegated to the service's user, and
// bounds its processes, memory and CPU there.
//
// Why cgroups: RLIMIT_NPROC counts every thread of the user (the server's
// too), and rlimits on memory (RLIMIT_AS) count address space, not memory.
// A cgroup counts exactly one sandbox: a fork bomb stops at its pids.max,
// an allocation beyond memory.max is OOM-killed inside the group, and a
// spinning process gets its CPU quota, not the host.
//
// Two layouts are served. cgroup v2 (the unified hierarchy, systemd's
// Delegate=yes): the service's own cgroup is the subtree; the server moves
// itself into a "server" leaf and enables the controllers for the sandbox
// groups beside it. cgroup v1 (hosts without systemd): one directory per
// controller (pids, memory, cpu), /sys/fs/cgroup/CONTROLLER/PARENT/USER
// (Options.Parent), created and chowned by root (Delegate).
//
// Nothing here is visible inside the sandbox: bwrap gives it a cgroup
// namespace, and /sys is not mounted.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/randid"

	"golang.org/x/sys/unix"
)

// ErrNotDelegated means no cgroup subtree is delegated to this user:
// sandboxes then run with rlimits only. The error wrapping it says what
// is missing and how to fix it.
var ErrNotDelegated = errors.New("no cgroup subtree delegated to this user")

// Version is the cgroup hierarchy's version.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

// Controllers are the cgroup controllers a sandbox group uses.
var Controllers = []string{"pids", "memory", "cpu"}

// DefaultMount is where the cgroup hierarchy is mounted.
const DefaultMount = "/sys/fs/cgroup"

// cpuPeriod is the CFS period the CPU quota is a share of, in µs.
const cpuPeriod = 100000

// Limits bound one group. A zero field sets no limit.
type Limits struct {
	// Pids caps processes and threads together (pids.max).
	Pids int64
	// Memory caps memory in bytes, page cache and tmpfs included, with no
	// swap beyond it (memory.max and memory.swap.max 0; v1 memsw).
	Memory int64
	// CPU caps CPU time in cores' worth (cpu.max; v1 CFS quota).
	CPU float64
}

// Options say where to look for the subtree.
type Options struct {
	// Mount is the cgroup mount point; empty means /sys/fs/cgroup.
	Mount string
	// Path is the delegated subtree. v1: relative to each controller's
	// directory, default Parent/USER (USER the effective user's name).
	// v2: relative to Mount, default this process's own cgroup (the
	// service's, under systemd Delegate=yes).
	Path string
	// Parent is the directory under each v1 controller that holds one
	// subtree per service user, as Delegate makes them. With neither Path
	// nor Parent, a v1 host has no subtree.
	Parent string
	// SelfCgroup is the content of /proc/self/cgroup; empty reads it.
	SelfCgroup string
}

// Tree is a delegated subtree: sandbox groups are created in it.
type Tree struct {
	version Version
	// dirs are the subtree's directories: one per controller (v1, in
	// the order of Controllers), or one (v2).
	dirs []string

	prepOnce sync.Once
	prepErr  error
	seq      struct {
		sync.Mutex
		n int
	}
}

// Version is the hierarchy's version.
func (t *Tree) Version() Version { return t.version }

// Dirs are the subtree's directories (v1: pids, memory, cpu).
func (t *Tree) Dirs() []string { return slices.Clone(t.dirs) }

// SwapLimited reports whether the kernel accounts swap in this tree, so
// that Limits.Memory holds with no swap beyond it. Without swap
// accounting (v1 memsw files, v2 memory.swap.max; boot parameter
// swapaccount=1 on older kernels) a group may swap past its memory.
func (t *Tree) SwapLimited() bool {
	file := filepath.Join(t.dirs[0], "memory.swap.max")
	if t.version == V1 {
		file = filepath.Join(t.dirs[1], "memory.memsw.limit_in_bytes")
	}
	_, err := os.Stat(file)
	return err == nil
}

// String describes the tree for the doctor.
func (t *Tree) String() string {
	if t.version == V1 {
		return fmt.Sprintf("cgroup v1 subtree %s (pids, memory, cpu)", t.dirs[0])
	}
	return fmt.Sprintf("cgroup v2 subtree %s", t.dirs[0])
}

// Open finds the subtree delegated to this process's user. It changes
// nothing; the first New prepares the tree. The error wraps
// ErrNotDelegated when there is none, and names the remedy.
func Open(o Options) (*Tree, error) {
	mount := o.Mount
	if mount == "" {
		mount = DefaultMount
	}
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err == nil {
		return openV2(mount, o)
	}
	return openV1(mount, o)
}

// Remedy is what an operator does when Open fails with ErrNotDelegated.
// A program that ships its own unit file or setup command says so
// instead.
func Remedy() string {
	return "delegate a cgroup subtree to the service user: on cgroup v2 with systemd, run the service with Delegate=yes in its unit; otherwise, as root, create it under each controller and give it to the user (cgroup.Delegate); then restart the service"
}

func notDelegated(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrNotDelegated, fmt.Sprintf(format, a...))
}

func writable(path string) error {
	if err := unix.Access(path, unix.W_OK); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return notDelegated("%s does not exist", path)
		}
		return notDelegated("%s is not writable by uid %d: %v", path, os.Geteuid(), err)
	}
	return nil
}

func openV1(mount string, o Options) (*Tree, error) {
	rel := o.Path
	if rel == "" {
		if o.Parent == "" {
			return nil, notDelegated("no cgroup v1 subtree is configured (Options.Path or Parent)")
		}
		u, err := user.LookupId(strconv.Itoa(os.Geteuid()))
		if err != nil {
			return nil, notDelegated("cannot name uid %d: %v", os.Geteuid(), err)
		}
		rel = o.Parent + "/" + u.Username
	}
	if !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("cgroup: subtree %q must be a relative path inside each controller", rel)
	}
	t := &Tree{version: V1}
	for _, c := range Controllers {
		dir := filepath.Join(mount, c, rel)
		if _, err := os.Stat(filepath.Join(mount, c)); err != nil {
			return nil, notDelegated("the cgroup v1 %s controller is not mounted at %s", c, filepath.Join(mount, c))
		}
		for _, p := range []string{dir, filepath.Join(dir, "tasks"), filepath.Join(dir, "cgroup.procs")} {
			if err := writable(p); err != nil {
				return nil, err
			}
		}
		t.dirs = append(t.dirs, dir)
	}
	return t, nil
}

func openV2(mount string, o Options) (*Tree, error) {
	rel := o.Path
	if rel == "" {
		self := o.SelfCgroup
		if self == "" {
			b, err := os.ReadFile("/proc/self/cgroup")
			if err != nil {
				return nil, notDelegated("cannot read /proc/self/cgroup: %v", err)
			}
			self = string(b)
		}
		for line := range strings.Lines(self) {
			if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
				rel = p
			}
		}
		if rel == "" || rel == "/" {
			return nil, notDelegated("this process runs in the root cgroup, which is not delegated")
		}
	}
	rel = strings.TrimPrefix(rel, "/")
	if !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("cgroup: subtree %q must be a path inside %s", rel, mount)
	}
	dir := filepath.Join(mount, rel)
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.subtree_control")} {
		if err := writable(p); err != nil {
			return nil, err
		}
	}
	have, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, notDelegated("%v", err)
	}
	for _, c := range Controllers {
		if !slices.Contains(strings.Fields(string(have)), c) {
			return nil, notDelegated("the %s controller is not available in %s (cgroup.controllers: %q)", c, dir, strings.TrimSpace(string(have)))
		}
	}
	return &Tree{version: V2, dirs: []string{dir}}, nil
}

// ServerLeaf is the v2 leaf the server's processes move to: a cgroup
// with processes cannot enable controllers for its children.
const ServerLeaf = "server"

// prepare readies the tree once: v2 moves every process of the subtree's
// root into the server leaf and enables the controllers for the
// children; both trees remove groups left by processes that died.
func (t *Tree) prepare() error {
	t.prepOnce.Do(func() {
		if t.version == V2 {
			t.prepErr = t.prepareV2()
		}
		t.sweep()
	})
	return t.prepErr
}

func (t *Tree) prepareV2() error {
	dir := t.dirs[0]
	leaf := filepath.Join(dir, ServerLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroup: create %s: %w", leaf, err)
	}
	// Processes may appear while we move them (our own threads' forks).
	for range 10 {
		pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			// A process that exited meanwhile is ESRCH: nothing to move.
			if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(pid)); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("cgroup: move pid %d into %s: %w", pid, leaf, err)
			}
		}
	}
	return enableControllers(dir)
}

// groupPrefix names sandbox groups: sbx-PID-N, PID the creating process.
const groupPrefix = "sbx-"

// sweep removes groups whose creator died: an empty group of a live
// process may be about to receive its sandbox.
func (t *Tree) sweep() {
	ents, err := os.ReadDir(t.dirs[0])
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), groupPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		g := &Group{t: t, name: e.Name()}
		for _, d := range t.dirs {
			g.dirs = append(g.dirs, filepath.Join(d, e.Name()))
		}
		g.Close()
	}
}

// Group is one sandbox's cgroup.
type Group struct {
	t      *Tree
	name   string
	dirs   []string // in the order of the tree's
	closed atomic.Bool
}

// New creates a group with limits l. The caller moves the sandbox into it
// (see Join) and closes it once the sandbox is gone.
func (t *Tree) New(l Limits) (*Group, error) {
	if err := t.prepare(); err != nil {
		return nil, err
	}
	t.seq.Lock()
	t.seq.n++
	name := randid.New(fmt.Sprintf("%s%d-%d", groupPrefix, os.Getpid(), t.seq.n))
	t.seq.Unlock()
	g := &Group{t: t, name: name}
	for _, d := range t.dirs {
		dir := filepath.Join(d, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			g.Close()
			return nil, fmt.Errorf("cgroup: create %s: %w", dir, err)
		}
		g.dirs = append(g.dirs, dir)
	}
	for _, w := range limitFiles(t.version, l) {
		path := filepath.Join(g.dirs[w.dir], w.file)
		if err := writeFile(path, w.value); err != nil {
			if w.optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			g.Close()
			return nil, fmt.Errorf("cgroup: set %s to %s: %w", path, w.value, err)
		}
	}
	return g, nil
}

// limitWrite is one file write that sets a limit.
type limitWrite struct {
	dir      int // index into the group's dirs
	file     string
	value    string
	optional bool // absent when the kernel lacks the feature (swap accounting)
}

// limitFiles are the writes that set l, in order: a pure function of the
// layout, unit-tested.
func limitFiles(v Version, l Limits) []limitWrite {
	var w []limitWrite
	quota := strconv.FormatInt(int64(l.CPU*cpuPeriod), 10)
	period := strconv.Itoa(cpuPeriod)
	if v == V1 {
		if l.Pids > 0 {
			w = append(w, limitWrite{dir: 0, file: "pids.max", value: strconv.FormatInt(l.Pids, 10)})
		}
		if l.Memory > 0 {
			m := strconv.FormatInt(l.Memory, 10)
			// memsw (memory + swap) must not be below the memory limit:
			// set memory first. Equal means no swap beyond memory.
			w = append(w, limitWrite{dir: 1, file: "memory.limit_in_bytes", value: m},
				limitWrite{dir: 1, file: "memory.memsw.limit_in_bytes", value: m, optional: true})
		}
		if l.CPU > 0 {
			w = append(w, limitWrite{dir: 2, file: "cpu.cfs_period_us", value: period},
				limitWrite{dir: 2, file: "cpu.cfs_quota_us", value: quota})
		}
		return w
	}
	if l.Pids > 0 {
		w = append(w, limitWrite{file: "pids.max", value: strconv.FormatInt(l.Pids, 10)})
	}
	if l.Memory > 0 {
		w = append(w, limitWrite{file: "memory.max", value: strconv.FormatInt(l.Memory, 10)},
			limitWrite{file: "memory.swap.max", value: "0", optional: true})
	}
	if l.CPU > 0 {
		w = append(w, limitWrite{file: "cpu.max", value: quota + " " + period})
	}
	return w
}

// Name is the group's directory name.
func (g *Group) Name() string { return g.name }

// Dirs are the group's directories (v1: pids, memory, cpu).
func (g *Group) Dirs() []string { return slices.Clone(g.dirs) }

// Join is what a process needs to start a child inside the group.
// v1: Enter are the groups' tasks files and Leave the tree's, opened for
// writing: writing "0" to a tasks file moves the writing thread, so the
// thread that forks enters, forks, and leaves. v2: Dir is the group's
// directory, for clone3's CLONE_INTO_CGROUP. The caller closes them.
type Join struct {
	Version      Version
	Enter, Leave []*os.File
	Dir          *os.File
}

// Files are the descriptors of j, in the order the receiver expects:
// Enter then Leave (v1), or Dir (v2).
func (j *Join) Files() []*os.File {
	if j.Version == V2 {
		return []*os.File{j.Dir}
	}
	return append(slices.Clone(j.Enter), j.Leave...)
}

// Close closes j's descriptors.
func (j *Join) Close() {
	for _, f := range j.Files() {
		if f != nil {
			f.Close()
		}
	}
}

// Join opens what moves a new process into g.
func (g *Group) Join() (*Join, error) {
	j := &Join{Version: g.t.version}
	if j.Version == V2 {
		f, err := os.OpenFile(g.dirs[0], os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		j.Dir = f
		return j, nil
	}
	for i, d := range g.dirs {
		in, err := os.OpenFile(filepath.Join(d, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			j.Close()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		j.Enter = append(j.Enter, in)
		out, err := os.OpenFile(filepath.Join(g.t.dirs[i], "tasks"), os.O_WRONLY, 0)
		if err != nil {
			j.Close()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		j.Leave = append(j.Leave, out)
	}
	return j, nil
}

// Events count what the group's limits refused.
type Events struct {
	// OOMKills is how many processes the OOM killer killed in the group.
	OOMKills uint64
	// PidsMax is how many forks pids.max refused.
	PidsMax uint64
}

// Events reads the group's counters; unreadable counters read as zero.
func (g *Group) Events() Events {
	var e Events
	if g.t.version == V1 {
		e.OOMKills = readKey(filepath.Join(g.dirs[1], "memory.oom_control"), "oom_kill")
		e.PidsMax = readKey(filepath.Join(g.dirs[0], "pids.events"), "max")
		return e
	}
	e.OOMKills = readKey(filepath.Join(g.dirs[0], "memory.events"), "oom_kill")
	e.PidsMax = readKey(filepath.Join(g.dirs[0], "pids.events"), "max")
	return e
}

// Pids are the processes in the group, as host pids.
func (g *Group) Pids() ([]int, error) { return readPids(filepath.Join(g.dirs[0], "cgroup.procs")) }

// Add moves the running process pid (all its threads) into g, for a
// program whose start this process does not control (Join is for one it
// forks). What pid forks afterwards is in g; what it forked before is not,
// and what it allocated before stays charged where it was.
func (g *Group) Add(pid int) error {
	for _, d := range g.dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup: move pid %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

// MemoryPeak is the most memory the group used at once, in bytes (v1
// memory.max_usage_in_bytes, v2 memory.peak: Linux 5.19); 0 when it
// cannot be read.
func (g *Group) MemoryPeak() int64 {
	path := filepath.Join(g.dirs[0], "memory.peak")
	if g.t.version == V1 {
		path = filepath.Join(g.dirs[1], "memory.max_usage_in_bytes")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// closeWait bounds how long Close waits for the group to empty.
const closeWait = 5 * time.Second

// Close kills what is left in the group and removes it. The sandbox's
// pid namespace normally took everything with it already.
func (g *Group) Close() error {
	if len(g.dirs) == 0 || g.closed.Swap(true) {
		return nil
	}
	deadline := time.Now().Add(closeWait)
	killed := false
	for {
		pids, err := g.Pids()
		if err != nil || len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %s still has %d processes after %v", g.dirs[0], len(pids), closeWait)
		}
		if g.t.version == V2 && !killed {
			// cgroup.kill (Linux 5.14) kills racing forks too.
			if writeFile(filepath.Join(g.dirs[0], "cgroup.kill"), "1") == nil {
				killed = true
			}
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var errs []error
	for _, d := range slices.Backward(g.dirs) {
		for {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			// The last exiting process may still hold the group a moment.
			if errors.Is(err, unix.EBUSY) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", d, err))
			break
		}
	}
	return errors.Join(errs...)
}

func writeFile(path, value string) error {
	// O_TRUNC as a shell's ">" does: cgroupfs ignores it, a plain file
	// (tests, a stale copy) then holds the last write, not a mix.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// readKey reads "key N" from a flat-keyed cgroup file.
func readKey(path, key string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
