package cgroup

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The kernel's cgroupfs is replaced by plain files here: these tests pin
// the layout (which files, which values, in which order). The v1 path is
// exercised for real by sandboxkit's limits tests; v2 has no host here.

func TestLimitFiles(t *testing.T) {
	l := Limits{Pids: 512, Memory: 2 << 30, CPU: 1.5}
	v1 := []limitWrite{
		{dir: 0, file: "pids.max", value: "512"},
		{dir: 1, file: "memory.limit_in_bytes", value: "2147483648"},
		{dir: 1, file: "memory.memsw.limit_in_bytes", value: "2147483648", optional: true},
		{dir: 2, file: "cpu.cfs_period_us", value: "100000"},
		{dir: 2, file: "cpu.cfs_quota_us", value: "150000"},
	}
	v2 := []limitWrite{
		{file: "pids.max", value: "512"},
		{file: "memory.max", value: "2147483648"},
		{file: "memory.swap.max", value: "0", optional: true},
		{file: "cpu.max", value: "150000 100000"},
	}
	if got := limitFiles(V1, l); !reflect.DeepEqual(got, v1) {
		t.Errorf("v1:\n got %+v\nwant %+v", got, v1)
	}
	if got := limitFiles(V2, l); !reflect.DeepEqual(got, v2) {
		t.Errorf("v2:\n got %+v\nwant %+v", got, v2)
	}
	if got := limitFiles(V2, Limits{}); len(got) != 0 {
		t.Errorf("no limits: %+v", got)
	}
}

func touch(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// v2Files are the files of a v2 cgroup that the code reads or writes.
func v2Files(procs string) map[string]string {
	return map[string]string{
		"cgroup.controllers": "cpuset cpu io memory pids\n", "cgroup.subtree_control": "", "cgroup.procs": procs,
		"pids.max": "", "memory.max": "", "memory.swap.max": "", "cpu.max": "", "memory.events": "", "pids.events": "",
	}
}

func TestV2Layout(t *testing.T) {
	mount := t.TempDir()
	touch(t, mount, map[string]string{"cgroup.controllers": "cpu memory pids\n"})
	svc := filepath.Join(mount, "system.slice", "app.service")
	// The server's own process and one of its children are in the
	// service's cgroup, as systemd starts them. PIDs of different
	// lengths: a shorter last write must not leave a longer one's tail.
	touch(t, svc, v2Files("123456\n789\n"))

	tr, err := Open(Options{Mount: mount, SelfCgroup: "0::/system.slice/app.service\n"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Version() != V2 || tr.Dirs()[0] != svc {
		t.Fatalf("tree %v %v", tr.Version(), tr.Dirs())
	}
	// The server leaf exists as the kernel would create its files.
	touch(t, filepath.Join(svc, ServerLeaf), map[string]string{"cgroup.procs": ""})
	// New cannot mkdir files into a plain dir: prepare alone, then a
	// group made by hand.
	if err := tr.prepare(); err != nil {
		t.Fatal(err)
	}
	// Plain files append nothing: the last write is what is there.
	if got := read(t, filepath.Join(svc, ServerLeaf, "cgroup.procs")); got != "789" {
		t.Errorf("server leaf cgroup.procs: last write %q", got)
	}
	if got := read(t, filepath.Join(svc, "cgroup.subtree_control")); got != "+pids +memory +cpu" {
		t.Errorf("subtree_control: %q", got)
	}

	g := &Group{t: tr, name: "sbx-1-1", dirs: []string{filepath.Join(svc, "sbx-1-1")}}
	touch(t, g.dirs[0], v2Files(""))
	for _, w := range limitFiles(V2, Limits{Pids: 64, Memory: 64 << 20, CPU: 1}) {
		if err := writeFile(filepath.Join(g.dirs[0], w.file), w.value); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(t, filepath.Join(g.dirs[0], "cpu.max")); got != "100000 100000" {
		t.Errorf("cpu.max %q", got)
	}
	touch(t, g.dirs[0], map[string]string{"memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\n", "pids.events": "max 7\n"})
	if e := g.Events(); e != (Events{OOMKills: 2, PidsMax: 7}) {
		t.Errorf("events %+v", e)
	}
	j, err := g.Join()
	if err != nil {
		t.Fatal(err)
	}
	if fs := j.Files(); j.Version != V2 || len(fs) != 1 || fs[0].Name() != g.dirs[0] {
		t.Errorf("join %+v", fs)
	}
	j.Close()

	// Not delegated: the root cgroup, a missing controller, a dir that is
	// not ours.
	for name, o := range map[string]Options{
		"root":    {Mount: mount, SelfCgroup: "0::/\n"},
		"missing": {Mount: mount, Path: "system.slice/other.service"},
	} {
		if _, err := Open(o); !errors.Is(err, ErrNotDelegated) {
			t.Errorf("%s: %v, want ErrNotDelegated", name, err)
		}
	}
	noPids := filepath.Join(mount, "nopids")
	touch(t, noPids, map[string]string{"cgroup.controllers": "cpu memory\n", "cgroup.procs": "", "cgroup.subtree_control": ""})
	if _, err := Open(Options{Mount: mount, Path: "nopids"}); !errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), "pids controller") {
		t.Errorf("no pids controller: %v", err)
	}
	// access(2) ignores modes for root: the not-writable case needs a user.
	if os.Geteuid() != 0 {
		os.Chmod(filepath.Join(noPids, "cgroup.procs"), 0o444)
		if _, err := Open(Options{Mount: mount, Path: "nopids"}); !errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), "not writable") {
			t.Errorf("read-only cgroup.procs: %v", err)
		}
	}
}

func TestV1Layout(t *testing.T) {
	mount := t.TempDir()
	for _, c := range Controllers {
		touch(t, filepath.Join(mount, c, "svc", "alice"), map[string]string{"tasks": "", "cgroup.procs": ""})
	}
	tr, err := Open(Options{Mount: mount, Path: "svc/alice"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(mount, "pids/svc/alice"), filepath.Join(mount, "memory/svc/alice"), filepath.Join(mount, "cpu/svc/alice")}
	if tr.Version() != V1 || !reflect.DeepEqual(tr.Dirs(), want) {
		t.Fatalf("tree %v %v", tr.Version(), tr.Dirs())
	}
	g := &Group{t: tr, name: "sbx-1-1"}
	for _, d := range tr.Dirs() {
		g.dirs = append(g.dirs, filepath.Join(d, g.name))
		touch(t, g.dirs[len(g.dirs)-1], map[string]string{"tasks": "", "cgroup.procs": ""})
	}
	touch(t, g.dirs[1], map[string]string{"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"})
	touch(t, g.dirs[0], map[string]string{"pids.events": "max 9\n"})
	if e := g.Events(); e != (Events{OOMKills: 3, PidsMax: 9}) {
		t.Errorf("events %+v", e)
	}
	j, err := g.Join()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range j.Files() {
		names = append(names, f.Name())
	}
	wantJoin := []string{g.dirs[0] + "/tasks", g.dirs[1] + "/tasks", g.dirs[2] + "/tasks", want[0] + "/tasks", want[1] + "/tasks", want[2] + "/tasks"}
	if !reflect.DeepEqual(names, wantJoin) {
		t.Errorf("join files %v, want enter then leave %v", names, wantJoin)
	}
	j.Close()
	// Add writes the pid to each controller's group; MemoryPeak reads
	// the memory controller's.
	touch(t, g.dirs[1], map[string]string{"memory.max_usage_in_bytes": "12345\n"})
	if err := g.Add(42); err != nil {
		t.Fatal(err)
	}
	for _, d := range g.dirs {
		if b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); string(b) != "42" {
			t.Errorf("%s/cgroup.procs = %q after Add(42)", d, b)
		}
	}
	if p := g.MemoryPeak(); p != 12345 {
		t.Errorf("MemoryPeak = %d", p)
	}

	if _, err := Open(Options{Mount: mount, Path: "svc/bob"}); !errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("bob: %v", err)
	}
	if _, err := Open(Options{Mount: mount, Path: "../x"}); err == nil {
		t.Error("an escaping path was accepted")
	}
}

// TestDelegateLayout: what setup-cgroups creates and hands over, on
// plain files (the real v1 run is scripts/install-prereqs' and the
// manual check's): v1 one directory per controller, v2 one with the
// controllers enabled on the way down; a second run changes nothing.
func TestDelegateLayout(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	t.Run("v1", func(t *testing.T) {
		mount := t.TempDir()
		for _, c := range Controllers {
			// The kernel creates a group's files on mkdir; here they
			// are made beforehand.
			touch(t, filepath.Join(mount, c, "svc", "alice"), map[string]string{"tasks": "", "cgroup.procs": ""})
		}
		for range 2 {
			dirs, err := Delegate(mount, "svc", "alice", uid, gid)
			want := []string{filepath.Join(mount, "pids/svc/alice"), filepath.Join(mount, "memory/svc/alice"), filepath.Join(mount, "cpu/svc/alice")}
			if err != nil || !reflect.DeepEqual(dirs, want) {
				t.Fatalf("Delegate: %v %v, want %v", dirs, err, want)
			}
		}
		if _, err := Open(Options{Mount: mount, Path: "svc/alice"}); err != nil {
			t.Errorf("Open after Delegate: %v", err)
		}
		os.RemoveAll(filepath.Join(mount, "cpu"))
		if _, err := Delegate(mount, "svc", "alice", uid, gid); err == nil || !strings.Contains(err.Error(), "cpu controller is not mounted") {
			t.Errorf("no cpu controller: %v", err)
		}
	})
	t.Run("v2", func(t *testing.T) {
		mount := t.TempDir()
		touch(t, mount, map[string]string{"cgroup.controllers": "cpu io memory pids\n", "cgroup.subtree_control": "memory\n"})
		touch(t, filepath.Join(mount, "svc"), map[string]string{"cgroup.subtree_control": ""})
		touch(t, filepath.Join(mount, "svc", "alice"), map[string]string{"cgroup.procs": "", "cgroup.subtree_control": "", "cgroup.threads": "", "cgroup.controllers": "cpu memory pids\n"})
		dirs, err := Delegate(mount, "svc", "alice", uid, gid)
		if want := []string{filepath.Join(mount, "svc/alice")}; err != nil || !reflect.DeepEqual(dirs, want) {
			t.Fatalf("Delegate: %v %v, want %v", dirs, err, want)
		}
		// memory was on already: only the others are written.
		if got := read(t, filepath.Join(mount, "cgroup.subtree_control")); got != "+pids +cpu" {
			t.Errorf("root subtree_control: %q", got)
		}
		if got := read(t, filepath.Join(mount, "svc", "cgroup.subtree_control")); got != "+pids +memory +cpu" {
			t.Errorf("svc subtree_control: %q", got)
		}
		if _, err := Open(Options{Mount: mount, Path: "svc/alice"}); err != nil {
			t.Errorf("Open after Delegate: %v", err)
		}
	})
	for _, bad := range []string{"", "..", "a/b", "/etc"} {
		if _, err := Delegate(t.TempDir(), "svc", bad, uid, gid); err == nil {
			t.Errorf("user name %q accepted", bad)
		}
		if _, err := Delegate(t.TempDir(), bad, "alice", uid, gid); err == nil {
			t.Errorf("parent name %q accepted", bad)
		}
	}
}

// On v1 the caller names the subtree: Parent/USER for this process's
// user, or a Path; with neither there is none (no default of ours).
func TestV1Parent(t *testing.T) {
	mount := t.TempDir()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Controllers {
		touch(t, filepath.Join(mount, c, "svc", u.Username), map[string]string{"tasks": "", "cgroup.procs": ""})
	}
	tr, err := Open(Options{Mount: mount, Parent: "svc"})
	if err != nil || tr.Dirs()[0] != filepath.Join(mount, "pids", "svc", u.Username) {
		t.Fatalf("Open with Parent: %v %v", tr, err)
	}
	if _, err := Open(Options{Mount: mount}); !errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), "no cgroup v1 subtree is configured") {
		t.Errorf("Open with neither Path nor Parent: %v", err)
	}
	if _, err := Open(Options{Mount: mount, Parent: "other"}); !errors.Is(err, ErrNotDelegated) {
		t.Errorf("Open with a parent that holds nothing: %v", err)
	}
}

// TestSwapLimited: memory's "no swap beyond it" needs the kernel's swap
// accounting (v1 memsw files, v2 memory.swap.max); without it the tree
// says so, for the doctor.
func TestSwapLimited(t *testing.T) {
	mount := t.TempDir()
	for _, c := range Controllers {
		touch(t, filepath.Join(mount, c, "svc", "alice"), map[string]string{"tasks": "", "cgroup.procs": ""})
	}
	v1 := Options{Mount: mount, Path: "svc/alice"}
	if tr, err := Open(v1); err != nil || tr.SwapLimited() {
		t.Errorf("v1 without memsw: %v %v, want not limited", tr, err)
	}
	touch(t, filepath.Join(mount, "memory", "svc", "alice"), map[string]string{"memory.memsw.limit_in_bytes": ""})
	if tr, err := Open(v1); err != nil || !tr.SwapLimited() {
		t.Errorf("v1 with memsw: %v %v, want limited", tr, err)
	}

	mount = t.TempDir()
	touch(t, mount, map[string]string{"cgroup.controllers": "cpu memory pids\n"})
	svc := filepath.Join(mount, "svc")
	files := v2Files("")
	delete(files, "memory.swap.max")
	touch(t, svc, files)
	v2 := Options{Mount: mount, Path: "svc"}
	if tr, err := Open(v2); err != nil || tr.SwapLimited() {
		t.Errorf("v2 without memory.swap.max: %v %v, want not limited", tr, err)
	}
	touch(t, svc, map[string]string{"memory.swap.max": "max\n"})
	if tr, err := Open(v2); err != nil || !tr.SwapLimited() {
		t.Errorf("v2 with memory.swap.max: %v %v, want limited", tr, err)
	}
}
