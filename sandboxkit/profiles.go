package sandboxkit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// Profiles name the sandboxes Codumentor starts. Each is a Policy; the
// differences are the point, so they are spelled out here in one place.
const (
	// ProfileWorkspace runs the agent's shell commands in a conversation's
	// copy-on-write workspace, without network.
	ProfileWorkspace = "workspace"
	// ProfileSetup runs a project's setup script in its workspace; the
	// network only when the operator allows it for setup (an egress
	// allow-list, or the host network).
	ProfileSetup = "setup"
	// ProfileExternalAgent runs an external coding-agent CLI (tier 1) in
	// the workspace; network only through the egress proxy, to its
	// allow-list.
	ProfileExternalAgent = "external-agent"
	// ProfileOffice parses one office document: the input read-only, no
	// workspace, no network.
	ProfileOffice = "office"
	// ProfileMCP runs a local MCP stdio server for the life of the
	// process: empty HOME (no ~/.ssh, ~/.gnupg), own pid namespace,
	// network per the server's config.
	ProfileMCP = "mcp"
	// ProfileHostReadOnly gives an investigation a read-only view of the
	// host with data directories masked; network only after the user
	// agreed.
	ProfileHostReadOnly = "host-readonly"
	// ProfileGit runs git on a repository's bare mirror for the server
	// (checkout of a snapshot, the push gateway's commit): the mirror
	// read-only at /mirror, one output directory read-write at /out, no
	// network, no credentials. Repository contents are hostile; git
	// parses them in here.
	ProfileGit = "git"
)

// ProfileNames lists the profiles in a stable order.
var ProfileNames = []string{ProfileWorkspace, ProfileSetup, ProfileExternalAgent, ProfileOffice, ProfileMCP, ProfileHostReadOnly, ProfileGit}

// ProfileOptions are the inputs a profile takes. Options a profile does
// not take must be left zero: Profile rejects them rather than ignore
// a hole the caller believes open, or closed.
type ProfileOptions struct {
	// Bwrap is the bubblewrap binary (all profiles).
	Bwrap string
	// Workspace is required by workspace, setup and external-agent.
	Workspace *Workspace
	// ShareNet shares the host network (setup, external-agent, mcp,
	// host-readonly).
	ShareNet bool
	// Egress gives the sandbox, in its own network namespace, a way out
	// through an egress proxy to the destinations of its allow-list
	// (setup, external-agent, mcp; not with ShareNet). See
	// Policy.Egress.
	Egress *egress.Options
	// Input is the host file an office worker parses, shown read-only at
	// /input/<base name> (office only, required there).
	Input string
	// Output is the host directory shown read-write at /out (git only,
	// required there, with Input the mirror shown read-only at /mirror).
	Output string
	// Mask lists extra host paths hidden in the host-readonly view (e.g.
	// the instance dir, a configuration file): a directory behind an
	// empty tmpfs, anything else behind /dev/null (on a nodev mount:
	// opening it fails), a symlink where it leads. A path that does not exist is skipped; one
	// that cannot be resolved is masked as a directory (the sandbox does
	// not start if that fails).
	Mask []string
	// Seccomp is the filter mode (all profiles); empty means seccomp.Log.
	// A filter that cannot be loaded makes Profile fail with
	// ErrUnavailable, never a Policy without it.
	Seccomp seccomp.Mode
	// Limits are the sandbox's resource limits (all profiles); nil
	// means DefaultLimits.
	Limits *Limits
	// Launching becomes the Policy's Launching (all profiles): told of
	// every start under it, it can record or refuse it.
	Launching func(ctx context.Context, r LaunchRecord) error
}

// hostMasks are hidden in the host-readonly view: other users' files,
// service state and credentials.
var hostMasks = []string{"/home", "/root", "/var/lib", "/var/backups", "/var/mail", "/var/spool", "/run", "/var/tmp", "/media", "/mnt", "/srv", "/etc/ssh", "/etc/ssl/private"}

// Profile returns the Policy of the named profile for the caller's uid
// and gid.
func Profile(name string, o ProfileOptions) (*Policy, error) {
	if !slices.Contains(ProfileNames, name) {
		return nil, fmt.Errorf("sandboxkit: unknown profile %q (known: %s)", name, strings.Join(ProfileNames, ", "))
	}
	reject := func(opt string, set bool) error {
		if set {
			return fmt.Errorf("sandboxkit: profile %s does not take option %s", name, opt)
		}
		return nil
	}
	p := &Policy{Bwrap: o.Bwrap, UID: os.Getuid(), GID: os.Getgid(), Limits: DefaultLimits(), Profile: name, Launching: o.Launching}
	if o.Limits != nil {
		p.Limits = *o.Limits
	}
	if err := p.Limits.Validate(); err != nil {
		return nil, err
	}
	mode, err := seccomp.ParseMode(string(o.Seccomp))
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
	var errs []error
	switch name {
	case ProfileSetup, ProfileExternalAgent, ProfileMCP:
		errs = append(errs, reject("Egress with ShareNet (the proxy is the way out of a sandbox without the host network)", o.Egress != nil && o.ShareNet))
		p.Egress = o.Egress
	default:
		errs = append(errs, reject("Egress", o.Egress != nil))
	}
	if name != ProfileGit {
		errs = append(errs, reject("Output", o.Output != ""))
	}
	switch name {
	case ProfileWorkspace, ProfileSetup, ProfileExternalAgent:
		if o.Workspace == nil {
			return nil, fmt.Errorf("sandboxkit: profile %s needs a workspace", name)
		}
		p.Workspace = o.Workspace
		p.ShareNet = o.ShareNet
		errs = append(errs, reject("Input", o.Input != ""), reject("Mask", len(o.Mask) > 0))
		if name == ProfileWorkspace {
			errs = append(errs, reject("ShareNet (the workspace shell has no network)", o.ShareNet))
		}
	case ProfileOffice:
		if o.Input == "" {
			return nil, fmt.Errorf("sandboxkit: profile %s needs an input file", name)
		}
		if !filepath.IsAbs(o.Input) {
			return nil, fmt.Errorf("sandboxkit: office input %q must be an absolute path", o.Input)
		}
		p.ReadOnly = []Bind{{Src: o.Input, Dst: "/input/" + filepath.Base(o.Input)}}
		p.Dir = "/input"
		errs = append(errs, reject("Workspace", o.Workspace != nil), reject("ShareNet", o.ShareNet), reject("Mask", len(o.Mask) > 0))
	case ProfileGit:
		if !filepath.IsAbs(o.Input) || !filepath.IsAbs(o.Output) {
			return nil, fmt.Errorf("sandboxkit: profile %s needs absolute Input (the mirror) and Output paths", name)
		}
		p.ReadOnly = []Bind{{Src: o.Input, Dst: "/mirror"}}
		p.ReadWrite = []Bind{{Src: o.Output, Dst: "/out"}}
		p.Dir = "/out"
		errs = append(errs, reject("Workspace", o.Workspace != nil), reject("ShareNet", o.ShareNet), reject("Mask", len(o.Mask) > 0))
	case ProfileMCP:
		p.ShareNet = o.ShareNet
		errs = append(errs, reject("Workspace", o.Workspace != nil), reject("Input", o.Input != ""), reject("Mask", len(o.Mask) > 0))
	case ProfileHostReadOnly:
		p.HostView = true
		p.ShareNet = o.ShareNet
		// Build mounts a fresh /tmp anyway. The server user's home is
		// masked too, wherever it is.
		p.Tmpfs = append([]string{}, hostMasks...)
		for _, m := range o.Mask {
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
		errs = append(errs, reject("Workspace", o.Workspace != nil), reject("Input", o.Input != ""))
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}
