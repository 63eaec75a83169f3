package sandboxkit

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// Check is one pre-flight check of the Doctor.
type Check struct {
	// Name is stable, for programs: "bwrap", "bwrap-version",
	// "bwrap-not-setuid", "userns", "proc", "overlay", "loopback",
	// "seccomp", "seccomp-observe" (a warning when log mode cannot
	// report per sandbox), "landlock" (a warning without the abstract socket
	// scope: see diag.AbstractUnixScoped), "limits" (with
	// DoctorOptions.Limits); and "main" when the program did not call
	// Main, without which no sandbox can start.
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Remedy says what to do when the check fails, or warns.
	Remedy string `json:"remedy,omitempty"`
	// Warning marks a check that passed with less protection than it
	// could have ("limits": rlimits only; "landlock": no abstract socket
	// scope); Detail says what is exposed and Remedy how to close it.
	Warning bool `json:"warning,omitempty"`
}

// Report is the Doctor's verdict for one bwrap on one filesystem.
type Report struct {
	Bwrap   string  `json:"bwrap"`
	Version string  `json:"version"`
	Checks  []Check `json:"checks"`
}

// Err returns nil when every check passed (warnings included), else an
// *UnavailableError (errors.Is ErrUnavailable) for the first failed
// check.
func (r *Report) Err() error { return r.errFor(true) }

// errFor is Err, leaving out the seccomp check for a sandbox that loads
// no filter.
func (r *Report) errFor(filtered bool) error {
	for _, c := range r.Checks {
		if !c.OK && (filtered || c.Name != "seccomp") {
			e := &UnavailableError{Check: c}
			if c.Name == "limits" {
				e.err = ErrLimitsUnavailable
			}
			return e
		}
	}
	return nil
}

// DoctorOptions says what the Doctor examines.
type DoctorOptions struct {
	// Bwrap is the bubblewrap binary; empty means "bwrap" on PATH.
	Bwrap string
	// ProbeDir is a directory on the filesystem where overlay upper dirs
	// will live; the overlay check mounts one there. Empty means
	// os.TempDir().
	ProbeDir string
	// Limits, when set, adds the "limits" check: whether a delegated
	// cgroup enforces them, "rlimits only" (a warning) if not, a failure
	// if they Require it. Not cached: delegation may be set up meanwhile.
	Limits *Limits
	// InstallRemedy, if set, replaces the advice to install bubblewrap
	// (checks "bwrap", "bwrap-version", "bwrap-not-setuid"), say with
	// the caller's own installer; CgroupRemedy replaces the advice to
	// delegate a cgroup subtree ("limits": cgroup.Remedy), say naming the
	// caller's unit file or setup command.
	InstallRemedy, CgroupRemedy string
}

// doctorCache holds one Report per (bwrap, probe filesystem) for the life
// of the process: the checks start a few sandboxes, and their outcome
// does not change while the server runs.
var doctorCache struct {
	sync.Mutex
	m map[string]*Report
}

// Doctor runs the pre-flight checks, or returns the cached Report.
func Doctor(ctx context.Context, o DoctorOptions) *Report {
	r := doctor(ctx, o)
	if o.Limits == nil && o.InstallRemedy == "" && o.CgroupRemedy == "" {
		return r
	}
	c := *r
	c.Checks = slices.Clone(r.Checks)
	// Like every check, it runs only when those before it passed.
	if o.Limits != nil && !slices.ContainsFunc(r.Checks, func(c Check) bool { return !c.OK }) {
		c.Checks = append(c.Checks, limitsCheck(*o.Limits))
	}
	// The cached report keeps the default remedies: each caller its own.
	for i := range c.Checks {
		k := &c.Checks[i]
		if o.InstallRemedy != "" {
			k.Remedy = strings.Replace(k.Remedy, installRemedy, o.InstallRemedy, 1)
		}
		if o.CgroupRemedy != "" && k.Name == "limits" {
			k.Remedy = strings.Replace(k.Remedy, cgroup.Remedy(), o.CgroupRemedy, 1)
		}
	}
	return &c
}

func doctor(ctx context.Context, o DoctorOptions) *Report {
	name := o.Bwrap
	if name == "" {
		name = "bwrap"
	}
	path, err := resolveBwrap(name)
	if err != nil {
		// Not cached: finding bwrap is cheap, and it may be installed
		// (or PATH changed) while the process runs.
		return &Report{Checks: []Check{{Name: "bwrap", Detail: fmt.Sprintf("%s not found: %v", name, err), Remedy: installRemedy + ", or configure its path"}}}
	}
	if !supervisor.MainCalled.Load() {
		// Not cached either: it says nothing about the machine.
		return &Report{Bwrap: path, Checks: []Check{{Name: "bwrap", OK: true, Detail: path}, {Name: "main", Detail: "the probes cannot start sandboxes: " + supervisor.ErrNoMain.Error(), Remedy: "call sandboxkit.Main() first in main (and in TestMain)"}}}
	}
	key := doctorKey(path, o.ProbeDir)
	doctorCache.Lock()
	defer doctorCache.Unlock()
	if r, ok := doctorCache.m[key]; ok {
		return r
	}
	r := diagnose(ctx, path, o.ProbeDir)
	if ctx.Err() != nil {
		// A cancelled run says nothing about the machine.
		return r
	}
	if doctorCache.m == nil {
		doctorCache.m = map[string]*Report{}
	}
	doctorCache.m[key] = r
	return r
}

// available returns nil when p can be sandboxed here, else an
// *UnavailableError. It is what Run and Session call before starting.
// The seccomp check counts only for a Policy with a filter; the limits
// only when the Policy's Limits.Require them.
func available(ctx context.Context, p *Policy) error {
	o := DoctorOptions{Bwrap: p.Bwrap}
	if p.Workspace != nil {
		o.ProbeDir = filepath.Dir(p.Workspace.Upper)
	}
	if err := Doctor(ctx, o).errFor(p.Seccomp != nil); err != nil {
		return err
	}
	return limitsErr(p.Limits)
}

func doctorKey(bwrap, dir string) string {
	if dir == "" {
		dir = os.TempDir()
	}
	// Overlay support is a property of the filesystem, not the path.
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err == nil {
		dir = "dev:" + strconv.FormatUint(st.Dev, 10)
	}
	return bwrap + "\x00" + dir
}

// resolveBwrap returns the absolute path of bwrap (name empty: "bwrap"
// on PATH).
func resolveBwrap(name string) (string, error) {
	if name == "" {
		name = "bwrap"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(path)
}

const installRemedy = "install bubblewrap " + minBwrapVersion + " or newer"

// diagnose runs the checks for the bwrap at path (already found).
func diagnose(ctx context.Context, path, probeDir string) *Report {
	r := &Report{Bwrap: path}
	add := func(c Check) bool {
		r.Checks = append(r.Checks, c)
		return c.OK
	}
	add(Check{Name: "bwrap", OK: true, Detail: path})

	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		add(Check{Name: "bwrap-version", Detail: fmt.Sprintf("%s --version failed: %v", path, err), Remedy: installRemedy})
		return r
	}
	ver := strings.TrimPrefix(strings.TrimSpace(string(out)), "bubblewrap ")
	r.Version = ver
	if !versionAtLeast(ver, minBwrapVersion) {
		add(Check{Name: "bwrap-version", Detail: fmt.Sprintf("%s is version %s, older than %s", path, ver, minBwrapVersion), Remedy: installRemedy})
		return r
	}
	add(Check{Name: "bwrap-version", OK: true, Detail: ver})

	fi, err := os.Stat(path)
	switch {
	case err != nil:
		add(Check{Name: "bwrap-not-setuid", Detail: err.Error(), Remedy: installRemedy})
		return r
	case fi.Mode()&os.ModeSetuid != 0:
		// A setuid bwrap runs its setup as root; sandboxkit relies on
		// unprivileged user namespaces and wants no root code path.
		add(Check{Name: "bwrap-not-setuid", Detail: path + " is setuid root", Remedy: "chmod u-s " + path + " (sandboxkit uses unprivileged user namespaces)"})
		return r
	default:
		add(Check{Name: "bwrap-not-setuid", OK: true, Detail: fi.Mode().String()})
	}

	probe := func(p *Policy, argv ...string) (string, error) {
		p.Bwrap = path
		p.UID, p.GID = os.Getuid(), os.Getgid()
		var buf bytes.Buffer
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		c := Command(ctx, p, argv...)
		c.Stdout, c.Stderr = &buf, &buf
		if err := c.launch(ctx); err != nil {
			return "", err
		}
		err := c.Wait()
		return strings.TrimSpace(buf.String()), err
	}

	if out, err := probe(&Policy{}, "true"); err != nil {
		add(Check{Name: "userns", Detail: fmt.Sprintf("bwrap cannot create a user namespace: %v %s", err, out), Remedy: usernsRemedy(os.DirFS("/proc/sys"))})
		return r
	}
	add(Check{Name: "userns", OK: true, Detail: "unprivileged user namespaces work"})

	if out, err := probe(&Policy{}, "test", "-r", "/proc/self/status"); err != nil {
		add(Check{Name: "proc", Detail: fmt.Sprintf("a fresh /proc cannot be mounted: %v %s", err, out), Remedy: "the host mounts /proc with restrictions (hidepid or a masked /proc inside a container); run on a host, or in a container started with an unmasked /proc"})
		return r
	}
	add(Check{Name: "proc", OK: true, Detail: "/proc mounts in the pid namespace"})

	if !add(overlayCheck(probeDir, probe)) {
		return r
	}

	// Connecting to a closed port on 127.0.0.1 is refused when loopback
	// is up, unreachable when it is not.
	lo, err := probe(&Policy{}, "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9")
	if err != nil && !strings.Contains(lo, "Connection refused") {
		lo = fmt.Sprintf("%s (%v)", lo, err)
	}
	switch {
	case strings.Contains(lo, "Connection refused"):
		add(Check{Name: "loopback", OK: true, Detail: "loopback is up in a new network namespace"})
	default:
		add(Check{Name: "loopback", Detail: "loopback did not come up in a new network namespace: " + lo, Remedy: "bwrap needs to configure lo in the new network namespace; check that the kernel has network namespaces (CONFIG_NET_NS)"})
	}
	add(seccompCheck(probe))
	add(observeCheck(ctx, path))
	add(landlockCheck())
	return r
}

// seccompCheck verifies this architecture's filters against their
// manifest and has the kernel load the enforce one in a real sandbox.
func seccompCheck(probe func(*Policy, ...string) (string, error)) Check {
	var digests []string
	var enforce []byte
	for _, m := range []seccomp.Mode{seccomp.Enforce, seccomp.Log} {
		f, err := seccomp.Load(m)
		if err != nil {
			return Check{Name: "seccomp", Detail: err.Error(), Remedy: seccompRemedy}
		}
		if m == seccomp.Enforce {
			enforce = f.Program
		}
		digests = append(digests, fmt.Sprintf("%s sha256:%s", m, f.Digest[:16]))
	}
	if out, err := probe(&Policy{Seccomp: enforce}, "true"); err != nil {
		return Check{Name: "seccomp", Detail: fmt.Sprintf("the %s enforce filter did not load: %v %s", runtime.GOARCH, err, out),
			Remedy: "the kernel needs CONFIG_SECCOMP_FILTER; " + seccompRemedy}
	}
	return Check{Name: "seccomp", OK: true, Detail: fmt.Sprintf("%s filters verified and loaded (%s)", runtime.GOARCH, strings.Join(digests, ", "))}
}

func overlayCheck(dir string, probe func(*Policy, ...string) (string, error)) Check {
	const name = "overlay"
	if dir == "" {
		dir = os.TempDir()
	}
	base, err := os.MkdirTemp(dir, ".sandboxkit-doctor-")
	if err != nil {
		return Check{Name: name, Detail: fmt.Sprintf("cannot create a probe dir in %s: %v", dir, err), Remedy: "make the workspace base dir writable by the server's user"}
	}
	defer overlay.RemoveAll(base)
	w := &Workspace{Lower: filepath.Join(base, "lower"), Upper: filepath.Join(base, "upper"), Work: filepath.Join(base, "work")}
	for _, d := range []string{w.Lower, w.Upper, w.Work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return Check{Name: name, Detail: err.Error(), Remedy: "make the workspace base dir writable by the server's user"}
		}
	}
	if err := os.WriteFile(filepath.Join(w.Lower, "lower"), []byte("lower\n"), 0o600); err != nil {
		return Check{Name: name, Detail: err.Error()}
	}
	out, err := probe(&Policy{Workspace: w}, "sh", "-c", "cat lower >/dev/null && echo upper > probe")
	if err != nil {
		return Check{Name: name, Detail: fmt.Sprintf("overlay mount on %s failed: %v %s", dir, err, out),
			Remedy: "put the workspace base dir on a filesystem that supports overlayfs upper dirs in a user namespace (ext4, xfs, btrfs, tmpfs; not overlayfs, NFS or FUSE), on Linux 5.11 or newer"}
	}
	got, err := os.ReadFile(filepath.Join(w.Upper, "probe"))
	if err != nil || string(got) != "upper\n" {
		return Check{Name: name, Detail: fmt.Sprintf("a write in the overlay did not land in the upper dir on %s", dir), Remedy: "report this: the kernel's overlayfs did not behave as expected"}
	}
	if _, err := os.Stat(filepath.Join(w.Lower, "probe")); err == nil {
		return Check{Name: name, Detail: "a write in the overlay reached the lower dir", Remedy: "report this: the kernel's overlayfs did not behave as expected"}
	}
	return Check{Name: name, OK: true, Detail: "copy-on-write overlay works on " + dir}
}

// usernsRemedy names what keeps user namespaces from working, read from
// the sysctls in procSys (/proc/sys).
func usernsRemedy(procSys fs.FS) string {
	is := func(name, value string) bool {
		b, err := fs.ReadFile(procSys, name)
		return err == nil && strings.TrimSpace(string(b)) == value
	}
	switch {
	case is("kernel/apparmor_restrict_unprivileged_userns", "1"):
		return "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): install an AppArmor profile that allows bwrap to create them (Ubuntu's bwrap-userns-restrict profile, /etc/apparmor.d/bwrap-userns-restrict, then apparmor_parser -r it), or set the sysctl to 0"
	case is("user/max_user_namespaces", "0"):
		return "user namespaces are disabled (user.max_user_namespaces=0): sysctl -w user.max_user_namespaces=15000"
	case is("kernel/unprivileged_userns_clone", "0"):
		return "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0): sysctl -w kernel.unprivileged_userns_clone=1"
	}
	return "enable unprivileged user namespaces for the server's user (inside a container, start it with a seccomp profile that allows unshare/clone of user namespaces)"
}

// landlockCheck is the Doctor's report on the abstract-socket scope. A
// kernel without it is a warning, not a failure: sandboxes run, and those
// that share the network reach the host's abstract sockets.
func landlockCheck() Check { return landlockCheckFor(supervisor.ABI()) }

// landlockCheckFor is landlockCheck on a kernel whose Landlock ABI is abi.
func landlockCheckFor(abi int) Check {
	const name = "landlock"
	if abi >= supervisor.ScopeABI {
		return Check{Name: name, OK: true, Detail: fmt.Sprintf("Landlock ABI %d: sandboxes that share the host network are scoped away from its abstract UNIX sockets", abi)}
	}
	have := "no Landlock"
	if abi > 0 {
		have = fmt.Sprintf("Landlock ABI %d", abi)
	}
	return Check{Name: name, OK: true, Warning: true,
		Detail: fmt.Sprintf("%s (the abstract UNIX socket scope needs ABI %d, Linux 6.12): sandboxes that share the host network can connect to the host's abstract UNIX sockets", have, supervisor.ScopeABI),
		Remedy: "run Linux 6.12 or newer with Landlock enabled (CONFIG_SECURITY_LANDLOCK, \"landlock\" in the lsm= boot list), or keep the network unshared"}
}

// versionAtLeast compares dotted numeric versions.
func versionAtLeast(v, min string) bool {
	a, b := strings.Split(v, "."), strings.Split(min, ".")
	for i := 0; i < len(b); i++ {
		var x, y int
		if i < len(a) {
			x, _ = strconv.Atoi(strings.TrimFunc(a[i], func(r rune) bool { return r < '0' || r > '9' }))
		}
		y, _ = strconv.Atoi(b[i])
		if x != y {
			return x > y
		}
	}
	return true
}
