package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
	"gopkg.in/yaml.v3"
)

// Limits is sandbox.limits: what one conversation's sandbox may consume.
// Sizes are bytes or "512MiB", "2GiB"; 0 means no limit of that kind.
type Limits struct {
	// Processes caps processes and threads (cgroup pids; default 512).
	Processes int64 `yaml:"processes"`
	// Memory caps memory, tmpfs included, no swap beyond (default 2GiB).
	Memory Size `yaml:"memory"`
	// CPU caps CPU time in cores' worth (default 1).
	CPU float64 `yaml:"cpu"`
	// TmpSize and HomeSize cap the /tmp and $HOME tmpfs (default 512MiB).
	TmpSize  Size `yaml:"tmp_size"`
	HomeSize Size `yaml:"home_size"`
	// FileSize caps one written file (RLIMIT_FSIZE; default 4GiB).
	FileSize Size `yaml:"file_size"`
	// OpenFiles caps each process's descriptors (RLIMIT_NOFILE; 4096).
	OpenFiles int64 `yaml:"open_files"`
	// Disk is a conversation's budget for its workspace changes (5GiB).
	Disk Size `yaml:"disk"`
	// DiskReserve and DiskReservePercent are the free space kept on the
	// filesystem of the workspaces: the smaller of DiskReserve (2GiB) and
	// DiskReservePercent of its size (5). A command that takes free space
	// below it is stopped, and no sandbox starts until files are deleted.
	DiskReserve        Size    `yaml:"disk_reserve"`
	DiskReservePercent float64 `yaml:"disk_reserve_percent"`
	// BackgroundJobs caps a conversation's running background jobs (8).
	BackgroundJobs int `yaml:"background_jobs"`
	// Cgroup is the delegated cgroup subtree; empty finds it (the
	// service's own cgroup on v2, CgroupParent/USER on v1).
	Cgroup string `yaml:"cgroup"`
}

// CgroupParent is the directory under each cgroup v1 controller that
// holds one delegated subtree per service user (codumentorctl
// setup-cgroups makes CONTROLLER/codumentor/USER).
const CgroupParent = "codumentor"

// InstallRemedy is the Doctor's advice to install bubblewrap, in
// Codumentor's words (sandboxkit.DoctorOptions.InstallRemedy).
const InstallRemedy = "install bubblewrap " + diag.MinBwrapVersion + " or newer (scripts/install-prereqs builds it from Debian's source)"

// CgroupRemedy is the advice to delegate a cgroup subtree to the service
// user, in Codumentor's words (sandboxkit.DoctorOptions.CgroupRemedy).
func CgroupRemedy() string {
	name := "USER"
	if u, err := user.LookupId(strconv.Itoa(os.Geteuid())); err == nil {
		name = u.Username
	}
	return "delegate a cgroup subtree to the service user: on cgroup v2 with systemd, run the server from scripts/codumentor.service (Delegate=yes); otherwise, as root, run codumentorctl setup-cgroups --user " + name + " (scripts/install-prereqs does it for the test user); then restart the server"
}

// DefaultSandboxLimits are sandboxkit's default limits in this
// deployment's delegated cgroup subtree (CgroupParent).
func DefaultSandboxLimits() sandboxkit.Limits {
	l := sandboxkit.DefaultLimits()
	l.CgroupParent = CgroupParent
	return l
}

// DoctorOptions are the sandbox Doctor's options for this configuration,
// with probeDir the workspace layers' directory.
func (s Sandbox) DoctorOptions(probeDir string) sandboxkit.DoctorOptions {
	return sandboxkit.DoctorOptions{Bwrap: s.Bwrap, ProbeDir: probeDir, Limits: new(s.SandboxLimits()), InstallRemedy: InstallRemedy, CgroupRemedy: CgroupRemedy()}
}

// DefaultLimits are sandboxkit's defaults.
func DefaultLimits() Limits {
	d := sandboxkit.DefaultLimits()
	return Limits{
		Processes: d.Pids, Memory: Size(d.Memory), CPU: d.CPU, TmpSize: Size(d.TmpSize), HomeSize: Size(d.HomeSize),
		FileSize: Size(d.FileSize), OpenFiles: d.OpenFiles, Disk: Size(d.Disk), DiskReserve: Size(d.DiskReserve), DiskReservePercent: d.DiskReservePercent,
		BackgroundJobs: 8, // sandboxkit.SessionOptions.MaxJobs's own default
	}
}

// Settings returns sandbox.* as the settings every sandbox of the server
// shares: bubblewrap, seccomp mode, limits and egress caps. The caller
// adds the Launching hook (the audit log).
func (s Sandbox) Settings() sandboxkit.Settings {
	return sandboxkit.Settings{Bwrap: s.Bwrap, Seccomp: s.Seccomp, Limits: new(s.SandboxLimits()), EgressCaps: s.Egress.Caps()}
}

// SandboxLimits returns sandbox.limits and require_limits as sandboxkit takes them.
func (s Sandbox) SandboxLimits() sandboxkit.Limits {
	l := s.Limits
	return sandboxkit.Limits{
		Pids: l.Processes, Memory: int64(l.Memory), CPU: l.CPU, TmpSize: int64(l.TmpSize), HomeSize: int64(l.HomeSize),
		FileSize: int64(l.FileSize), OpenFiles: l.OpenFiles, Disk: int64(l.Disk), DiskReserve: int64(l.DiskReserve), DiskReservePercent: l.DiskReservePercent,
		Cgroup: l.Cgroup, CgroupParent: CgroupParent, Require: s.RequireLimits,
	}
}

func (l Limits) validate() []error {
	var errs []error
	for _, f := range []struct {
		key string
		v   int64
	}{{"processes", l.Processes}, {"memory", int64(l.Memory)}, {"tmp_size", int64(l.TmpSize)}, {"home_size", int64(l.HomeSize)},
		{"file_size", int64(l.FileSize)}, {"open_files", l.OpenFiles}, {"disk", int64(l.Disk)}, {"disk_reserve", int64(l.DiskReserve)}, {"background_jobs", int64(l.BackgroundJobs)}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("sandbox.limits.%s must not be negative (0 means no limit)", f.key))
		}
	}
	if l.CPU < 0 || math.IsNaN(l.CPU) || math.IsInf(l.CPU, 0) {
		errs = append(errs, errors.New("sandbox.limits.cpu must be a number of cores, 0 for no limit"))
	}
	if l.DiskReservePercent < 0 || l.DiskReservePercent > 100 || math.IsNaN(l.DiskReservePercent) {
		errs = append(errs, errors.New("sandbox.limits.disk_reserve_percent must be a percentage from 0 to 100 (0: no percentage)"))
	}
	if len(errs) == 0 {
		if err := (Sandbox{Limits: l}).SandboxLimits().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("sandbox.limits: %w", err))
		}
	}
	return errs
}

// Size is a byte count written as 1048576, "512MiB", "2GiB" or "1.5GB".
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   float64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}}

// ParseSize reads a size like "512MiB".
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range sizeUnits {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsNaN(f) || f*mult > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is not a size like 512MiB or 2GiB", s)
	}
	return Size(f * mult), nil
}

// UnmarshalYAML reads a number of bytes or a size string.
func (z *Size) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := ParseSize(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*z = v
	return nil
}

// MarshalYAML writes the size in the largest binary unit that is exact.
func (z Size) MarshalYAML() (any, error) {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if z != 0 && int64(z)%u.m == 0 {
			return strconv.FormatInt(int64(z)/u.m, 10) + u.s, nil
		}
	}
	return strconv.FormatInt(int64(z), 10), nil
}
