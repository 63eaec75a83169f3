package sandboxkit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// Settings are what every sandbox of a program shares. Build them once
// and pass them whole to whatever starts sandboxes: the Policies made
// from them (NewPolicy, Workspace, HostView) all carry every setting, so
// none is lost on the way.
type Settings struct {
	// Bwrap is the bubblewrap binary; empty means "bwrap" on PATH.
	Bwrap string
	// Seccomp is the filter mode; empty means seccomp.Log. A filter that
	// cannot be loaded makes the constructors fail with ErrUnavailable,
	// never return a Policy without it.
	Seccomp seccomp.Mode
	// Limits bound each sandbox; nil means DefaultLimits. Its Cgroup
	// names the cgroup subtree delegated to the program.
	Limits *Limits
	// EgressCaps bound every egress proxy (see Egress); zero fields
	// take egress's defaults.
	EgressCaps egress.Caps
	// EgressResolver resolves the names egress proxies connect to; nil
	// means net.DefaultResolver. The proxy checks the addresses it
	// returns like any others.
	EgressResolver egress.Resolver
	// Launching becomes the Policies' Launching: told of every start
	// under them, it can record or refuse it.
	Launching func(ctx context.Context, r LaunchRecord) error
}

// NewPolicy returns the strictest Policy under s, for the caller's uid
// and gid: no network, no workspace, nothing of the host but /usr and a
// curated part of /etc, read-only. label becomes Policy.Profile, for
// Launching. The caller opens what the work needs on the Policy.
func (s Settings) NewPolicy(label string) (*Policy, error) {
	p := &Policy{Bwrap: s.Bwrap, UID: os.Getuid(), GID: os.Getgid(), Limits: DefaultLimits(), Profile: label, Launching: s.Launching}
	if s.Limits != nil {
		p.Limits = *s.Limits
	}
	if err := p.Limits.Validate(); err != nil {
		return nil, err
	}
	mode, err := seccomp.ParseMode(string(s.Seccomp))
	if err != nil {
		return nil, fmt.Errorf("sandboxkit: %w", err)
	}
	f, err := seccomp.Load(mode)
	if err != nil {
		return nil, seccompUnavailable(err)
	}
	if f != nil {
		p.Seccomp = f.Program
	}
	return p, nil
}

// Workspace returns NewPolicy(label) with ws mounted at /workspace, the
// working directory: a sandbox that works on a copy-on-write view of a
// host tree, without network.
func (s Settings) Workspace(label string, ws *Workspace) (*Policy, error) {
	if ws == nil {
		return nil, errors.New("sandboxkit: a workspace sandbox needs a workspace")
	}
	p, err := s.NewPolicy(label)
	if err != nil {
		return nil, err
	}
	p.Workspace = ws
	return p, nil
}

// Egress returns the options of an egress proxy under s (its caps and
// resolver) that connects to the destinations of allow (see
// egress.ParseAllow), for Policy.Egress. The caller may set OnEvent.
func (s Settings) Egress(allow []string) *egress.Options {
	return &egress.Options{Allow: allow, Caps: s.EgressCaps, Resolver: s.EgressResolver}
}

// hostMasks are hidden in a host view: other users' files, service
// state and credentials.
var hostMasks = []string{"/home", "/root", "/var/lib", "/var/backups", "/var/mail", "/var/spool", "/run", "/var/tmp", "/media", "/mnt", "/srv", "/etc/ssh", "/etc/ssl/private"}

// HostView returns NewPolicy(label) with a read-only view of the whole
// host (Policy.HostView), without network: other users' homes, the
// caller's own home, service state (/var/lib, /run), credentials
// (/etc/ssh, /etc/ssl/private) and every UNIX socket are masked, and so
// is each path of mask (e.g. the program's data directory): a directory
// behind an empty tmpfs, anything else behind /dev/null (on a nodev
// mount: opening it fails), a symlink where it leads. A path of mask
// that does not exist is skipped; one that cannot be resolved is masked
// as a directory (the sandbox does not start if that fails).
func (s Settings) HostView(label string, mask []string) (*Policy, error) {
	p, err := s.NewPolicy(label)
	if err != nil {
		return nil, err
	}
	p.HostView = true
	// Build mounts a fresh /tmp anyway. The caller's home is masked too,
	// wherever it is.
	p.Tmpfs = append([]string{}, hostMasks...)
	for _, m := range mask {
		// bwrap mounts on no symlink: the path it leads to is masked.
		real, err := filepath.EvalSymlinks(m)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		fi, serr := os.Stat(real)
		switch {
		case err == nil && serr == nil && !fi.IsDir():
			p.ReadOnly = append(p.ReadOnly, Bind{Src: "/dev/null", Dst: real})
		case err == nil:
			p.Tmpfs = append(p.Tmpfs, real)
		default:
			p.Tmpfs = append(p.Tmpfs, m)
		}
	}
	if home, err := os.UserHomeDir(); err == nil && home != "/" {
		p.Tmpfs = append(p.Tmpfs, home)
	}
	// /var/run is usually a symlink to /run (masked); where it is a
	// directory of its own, it holds sockets too.
	if fi, err := os.Lstat("/var/run"); err == nil && fi.IsDir() {
		p.Tmpfs = append(p.Tmpfs, "/var/run")
	}
	// Sockets elsewhere in the view: hidden one by one, and the
	// directories the scan could not cover masked whole.
	socks, unscanned := hostSockets("/", append(slices.Clone(hostViewSkipped), p.Tmpfs...), hostScanBudget)
	for _, s := range socks {
		p.ReadOnly = append(p.ReadOnly, Bind{Src: "/dev/null", Dst: s})
	}
	p.Tmpfs = append(p.Tmpfs, unscanned...)
	slices.Sort(p.Tmpfs)
	p.Tmpfs = slices.Compact(p.Tmpfs)
	return p, nil
}
