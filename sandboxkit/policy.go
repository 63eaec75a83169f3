package sandboxkit

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/internal/invocation"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// WorkspaceDir is where a Policy's Workspace overlay is mounted.
const WorkspaceDir = "/workspace"

// Policy says what a sandbox can see and do. The zero value is the
// strictest sandbox: no network, no workspace, nothing of the host but
// /usr and a curated part of /etc, read-only.
//
// Every field opens a hole; each says what it exposes.
type Policy struct {
	// Bwrap is the bubblewrap binary. Empty means "bwrap" on PATH.
	Bwrap string

	// Workspace mounts a copy-on-write overlay of a host tree at
	// /workspace: reads see Lower, writes land in Upper, Lower is never
	// modified. Nil means no workspace.
	Workspace *Workspace

	// ShareNet keeps the host's network namespace. It exposes every
	// service listening on the host (also on 127.0.0.1) and the network
	// beyond; leave it false unless the work needs the network. The
	// host's abstract UNIX sockets stay out of reach only on Linux 6.12+
	// with Landlock (the Doctor's "landlock" check); elsewhere they are
	// exposed too.
	ShareNet bool

	// Egress gives a sandbox without ShareNet a way out: an egress proxy
	// on the host (package egress), started and stopped with the sandbox
	// by Run and StartSession, that connects only to the destinations of
	// Egress.Allow and reports every attempt to Egress.OnEvent. The
	// sandbox keeps its own network namespace (only loopback); the
	// proxy's socket is bound inside and HTTP(S)_PROXY and ALL_PROXY
	// point at it. If the proxy cannot start nothing runs; if it stops,
	// the sandbox has no way out. Nil means no network.
	Egress *egress.Options

	// Env adds "KEY=value" entries to the minimal environment (PATH,
	// HOME, LANG, TERM, USER, TMPDIR). Nothing is inherited from the host
	// process.
	Env []string

	// ReadOnly binds host paths read-only. They become readable by
	// whatever runs inside.
	ReadOnly []Bind

	// ReadWrite binds host paths read-write: whatever runs inside can
	// change them on the host. Prefer Workspace.
	ReadWrite []Bind

	// ReadOnlyOverlays mount read-only overlays of host trees: whatever
	// runs inside can read them (e.g. a parent's view to diff against).
	ReadOnlyOverlays []ReadOnlyOverlay

	// Tmpfs mounts empty, writable tmpfs directories (besides /tmp and
	// HOME), e.g. to mask a directory inside a ReadOnly bind.
	Tmpfs []string

	// Dir is the working directory inside. Empty means /workspace when
	// there is a Workspace, else HOME.
	Dir string

	// HostView binds the whole host filesystem read-only instead of /usr
	// and a curated /etc: everything the server's user can read becomes
	// readable inside, except what Tmpfs masks. /dev, /tmp, HOME and the
	// Tmpfs masks are read-only too: nothing inside can write. Prefer
	// Settings.HostView, which masks the host's data and sockets.
	HostView bool

	// Seccomp is a BPF program (struct sock_filter array) loaded by bwrap
	// with --seccomp before the command starts; seccomp.Load gives the
	// blocklist (Settings' constructors set it from Settings.Seccomp). Nil means
	// no filter: the sandbox can then call every system call the
	// namespaces leave it, including nested user namespaces' entry points.
	Seccomp []byte

	// UID and GID are the ids the synthetic /etc/passwd and /etc/group
	// name "sandbox". bwrap maps the caller's ids to themselves, so these
	// should be os.Getuid() and os.Getgid(); Settings' constructors
	// fill them in.
	UID, GID int

	// Limits bound the processes, memory, CPU, tmpfs, files and disk the
	// sandbox may use; the zero value bounds nothing (Settings'
	// constructors set Settings.Limits or DefaultLimits). See Limits.
	Limits Limits

	// Profile is a free-form label of the Policy's kind (the label of
	// Settings' constructors), e.g. "build". It changes nothing in the
	// sandbox; Launching is told of it.
	Profile string

	// Launching, if set, is called before anything starts under this
	// Policy: a one-shot sandbox (Cmd.Start), a Session's sandbox
	// (StartSession) and each command and background job of the Session.
	// Its error refuses the start (errors.Is ErrLaunchRefused) and
	// nothing runs: e.g. an audit record that could not be written. It
	// opens no hole. The Doctor's own probes are not reported.
	Launching func(ctx context.Context, r LaunchRecord) error
}

// Workspace is a copy-on-write view of a host tree.
type Workspace struct {
	// Lower is the host tree shown at /workspace, never written.
	Lower string
	// Layers are read-only host trees stacked over Lower, bottom first
	// (e.g. a parent conversation's upper layer under a subagent's own),
	// never written.
	Layers []string
	// Upper receives every write, creation and deletion (as a whiteout).
	Upper string
	// Work is overlayfs's scratch dir, on the same filesystem as Upper.
	Work string
}

// ReadOnlyOverlay shows the union of Layers (bottom first) read-only at
// Dst.
type ReadOnlyOverlay struct {
	Layers []string
	Dst    string
}

// Bind maps host path Src to Dst inside the sandbox (Dst "" means Src).
type Bind struct {
	Src, Dst string
}

// etcFiles are the /etc entries tools need. The whole /etc is never
// bound: it holds host secrets (ssh host keys, shadow, credentials of
// services). passwd and group are synthetic (see build).
var etcFiles = []string{
	"/etc/alternatives",
	"/etc/ca-certificates",
	"/etc/ca-certificates.conf",
	"/etc/debian_version",
	"/etc/gitconfig",
	"/etc/host.conf",
	"/etc/hosts",
	"/etc/inputrc",
	"/etc/ld.so.cache",
	"/etc/ld.so.conf",
	"/etc/ld.so.conf.d",
	"/etc/locale.alias",
	"/etc/localtime",
	"/etc/mime.types",
	"/etc/nsswitch.conf",
	"/etc/os-release",
	"/etc/protocols",
	"/etc/services",
	"/etc/ssl/certs",
	"/etc/ssl/openssl.cnf",
	"/etc/timezone",
}

// launch is a Policy turned into a bwrap invocation.
type launch struct {
	// Path is the bwrap binary to execute; Args[0] is the same.
	Path string
	Args []string
	// Env is the environment of the bwrap process itself: empty, so
	// nothing of the host's environment reaches bwrap or the sandbox.
	Env []string
	// Files are contents bwrap reads from inherited descriptors: Files[i]
	// must be readable at fd 3+i when bwrap starts. bwrap closes each one
	// after reading it, so none reaches the command.
	Files [][]byte
}

// buildOptions are the knobs only sandboxkit itself uses.
type buildOptions struct {
	// asPid1 makes the command pid 1 of the sandbox (bwrap's own reaper
	// is left out): the Session supervisor reaps for itself.
	asPid1 bool
	// status passes fd 3 as --json-status-fd: bwrap reports there
	// whether the command itself ran, and its exit code.
	status bool
	// reserved is how many descriptors after the status fd the caller
	// passes for itself (the Session's control socket); Files follow them.
	reserved int
	// extraRO are read-only binds added after the policy's own.
	extraRO []Bind
	// egressSocket is the host socket of the Policy's egress proxy.
	egressSocket string
	// argsFile passes bwrap's options in an inherited file (--args)
	// instead of on its command line: see hideOptions.
	argsFile bool
}

// firstFile is the descriptor number of launch.Files[0].
func (o buildOptions) firstFile() int {
	n := 3 + o.reserved
	if o.status {
		n++
	}
	return n
}

func (p *Policy) build(argv []string, o buildOptions) (*launch, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	bwrap := p.Bwrap
	if bwrap == "" {
		bwrap = "bwrap"
	}
	l := &launch{Path: bwrap, Env: []string{}}
	a := []string{bwrap,
		// New user, mount, pid, ipc, uts, cgroup and network namespaces.
		"--unshare-all", "--unshare-user",
	}
	if p.ShareNet {
		a = append(a, "--share-net")
	}
	a = append(a,
		// The sandbox dies when its parent (the server) dies.
		"--die-with-parent",
		// A new session: no TIOCSTI injection into the server's terminal.
		"--new-session",
		// No nested user namespaces: closes the path to the kernel's
		// namespace-only attack surface from inside.
		"--disable-userns", "--assert-userns-disabled",
		// No capabilities, even inside the namespaces.
		"--cap-drop", "ALL",
		"--hostname", "sandbox",
		// Nothing of the host environment.
		"--clearenv",
	)
	if o.asPid1 {
		a = append(a, "--as-pid-1")
	}
	if p.HostView {
		a = append(a, "--ro-bind", "/", "/")
	} else {
		// /usr read-only and the merged-/usr symlinks.
		a = append(a,
			"--ro-bind", "/usr", "/usr",
			"--symlink", "usr/bin", "/bin",
			"--symlink", "usr/sbin", "/sbin",
			"--symlink", "usr/lib", "/lib",
			"--symlink", "usr/lib64", "/lib64",
		)
	}
	// A fresh /proc for the new pid namespace, a minimal /dev, empty /tmp.
	a = append(a, "--proc", "/proc", "--dev", "/dev")
	a = appendTmpfs(a, p.Limits.TmpSize, "/tmp")
	if !p.HostView {
		a = append(a, "--dir", "/var/tmp", "--dir", "/run")
		for _, f := range etcFiles {
			a = append(a, "--ro-bind-try", f, f)
		}
		if p.ShareNet {
			// Name resolution is only useful, and only shown, with a network.
			a = append(a, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf")
		}
		// Synthetic passwd and group: tools that look up the current
		// user (git, ssh, whoami) work, and the host's users stay hidden.
		passwd := fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:%d:%d:sandbox:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", p.UID, p.GID, homeDir)
		group := fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", p.GID)
		if p.UID == 0 {
			passwd = fmt.Sprintf("root:x:0:0:root:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", homeDir)
		}
		if p.GID == 0 {
			group = "root:x:0:\nnogroup:x:65534:\n"
		}
		a = append(a, "--file", p.fd(l, o, []byte(passwd)), "/etc/passwd")
		a = append(a, "--file", p.fd(l, o, []byte(group)), "/etc/group")
	}
	for _, b := range p.ReadOnly {
		a = append(a, "--ro-bind", b.Src, b.dst())
	}
	for _, b := range o.extraRO {
		a = append(a, "--ro-bind", b.Src, b.dst())
	}
	for _, b := range p.ReadWrite {
		a = append(a, "--bind", b.Src, b.dst())
	}
	if p.Egress != nil {
		src := o.egressSocket
		if src == "" {
			src = invocation.EgressSocketPlaceholder
		}
		// Connecting needs no write access to the mount.
		a = append(a, "--ro-bind", src, supervisor.EgressSocket)
	}
	for _, t := range p.Tmpfs {
		a = appendTmpfs(a, p.Limits.TmpSize, t)
	}
	// HOME last, so no mask hides it.
	a = appendTmpfs(a, p.Limits.HomeSize, homeDir)
	if p.HostView {
		// A host view is read-only everywhere: its scratch mounts too.
		for _, d := range append(append([]string{"/dev", "/tmp"}, p.Tmpfs...), homeDir) {
			a = append(a, "--remount-ro", d)
		}
	}
	dir := p.Dir
	if w := p.Workspace; w != nil {
		a = append(a, "--overlay-src", w.Lower)
		for _, l := range w.Layers {
			a = append(a, "--overlay-src", l)
		}
		a = append(a, "--overlay", w.Upper, w.Work, WorkspaceDir)
		if dir == "" {
			dir = WorkspaceDir
		}
	}
	for _, o := range p.ReadOnlyOverlays {
		if len(o.Layers) == 1 {
			// bwrap's --ro-overlay takes two layers or more. Not a bind:
			// /proc/self/mountinfo shows a bind's source path, and an
			// overlay's layers only as /proc/self/fd/N. An overlay with an
			// upper on bwrap's own tmpfs, made read-only.
			a = append(a, "--overlay-src", o.Layers[0], "--tmp-overlay", o.Dst, "--remount-ro", o.Dst)
			continue
		}
		for _, l := range o.Layers {
			a = append(a, "--overlay-src", l)
		}
		a = append(a, "--ro-overlay", o.Dst)
	}
	if dir == "" {
		dir = homeDir
	}
	a = append(a, "--chdir", dir)
	for _, kv := range p.env() {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	if p.Seccomp != nil {
		a = append(a, "--seccomp", p.fd(l, o, p.Seccomp))
	}
	if o.status {
		a = append(a, "--json-status-fd", "3")
	}
	if o.argsFile {
		var err error
		if a, err = p.hideOptions(l, o, a); err != nil {
			return nil, err
		}
	}
	a = append(a, "--")
	a = append(a, argv...)
	l.Args = a
	return l, nil
}

// hideOptions moves bwrap's options a[1:] into an inherited file that
// bwrap reads with --args, and returns the command line that is left:
// bwrap, --args and the descriptor. bwrap's command line is readable by
// every process of the sandbox (a one-shot sandbox's pid 1 is bwrap's own
// init, a fork of bwrap: /proc/1/cmdline), and the options name host
// paths: the workspace's layers, bind sources, the egress socket.
func (p *Policy) hideOptions(l *launch, o buildOptions, a []string) ([]string, error) {
	var b strings.Builder
	for _, s := range a[1:] {
		// The file is NUL-separated: a NUL inside an option would split it
		// into options of its own.
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("sandboxkit: sandbox option %q contains NUL", s)
		}
		b.WriteString(s)
		b.WriteByte(0)
	}
	return []string{a[0], "--args", p.fd(l, o, []byte(b.String()))}, nil
}

// appendTmpfs mounts a tmpfs at dir, of at most size bytes when size > 0:
// without --size a tmpfs may grow to half the host's memory.
func appendTmpfs(a []string, size int64, dir string) []string {
	if size > 0 {
		a = append(a, "--size", strconv.FormatInt(size, 10))
	}
	return append(a, "--tmpfs", dir)
}

// fd records data as the next inherited file and returns its number.
func (p *Policy) fd(l *launch, o buildOptions, data []byte) string {
	l.Files = append(l.Files, data)
	return strconv.Itoa(o.firstFile() + len(l.Files) - 1)
}

// env is the sandbox's whole environment: the minimal base, then p.Env
// (which may override the base).
func (p *Policy) env() []string {
	base := []string{
		"PATH=" + defaultPath,
		"HOME=" + homeDir,
		"LANG=C.UTF-8",
		"TERM=dumb",
		"USER=sandbox",
		"TMPDIR=/tmp",
	}
	if p.Egress != nil {
		base = append(base, egressEnv()...)
	}
	out := make([]string, 0, len(base)+len(p.Env))
	seen := map[string]int{}
	for _, kv := range append(base, p.Env...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := seen[k]; ok {
			out[i] = kv
			continue
		}
		seen[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func (p *Policy) validate() error {
	for _, kv := range p.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, "\x00") {
			return fmt.Errorf("sandboxkit: environment entry %q is not KEY=value", kv)
		}
	}
	abs := func(what, s string) error {
		if s == "" || !path.IsAbs(s) {
			return fmt.Errorf("sandboxkit: %s %q must be an absolute path", what, s)
		}
		if strings.Contains(s, "\x00") {
			return fmt.Errorf("sandboxkit: %s %q contains NUL", what, s)
		}
		return nil
	}
	if w := p.Workspace; w != nil {
		for _, c := range []struct{ what, p string }{{"workspace lower dir", w.Lower}, {"workspace upper dir", w.Upper}, {"workspace work dir", w.Work}} {
			if err := abs(c.what, c.p); err != nil {
				return err
			}
		}
		for _, l := range w.Layers {
			if err := abs("workspace layer", l); err != nil {
				return err
			}
		}
	}
	for _, o := range p.ReadOnlyOverlays {
		if len(o.Layers) == 0 {
			return fmt.Errorf("sandboxkit: read-only overlay %q has no layers", o.Dst)
		}
		for _, l := range append([]string{o.Dst}, o.Layers...) {
			if err := abs("read-only overlay", l); err != nil {
				return err
			}
		}
	}
	for _, b := range append(append([]Bind{}, p.ReadOnly...), p.ReadWrite...) {
		if err := abs("bind source", b.Src); err != nil {
			return err
		}
		if err := abs("bind destination", b.dst()); err != nil {
			return err
		}
	}
	for _, t := range p.Tmpfs {
		if err := abs("tmpfs", t); err != nil {
			return err
		}
	}
	if p.Dir != "" {
		if err := abs("working directory", p.Dir); err != nil {
			return err
		}
	}
	if err := p.Limits.Validate(); err != nil {
		return err
	}
	if p.Egress != nil {
		if p.ShareNet || p.HostView {
			return errors.New("sandboxkit: Egress needs the sandbox's own network namespace and /run: not with ShareNet or HostView")
		}
		if err := egress.ParseAllow(p.Egress.Allow); err != nil {
			return fmt.Errorf("sandboxkit: %w", err)
		}
	}
	if p.Seccomp != nil {
		// A filter that bwrap would refuse, or one that was damaged,
		// must not turn into a sandbox without one.
		if err := seccomp.Validate(p.Seccomp); err != nil {
			return seccompUnavailable(err)
		}
	}
	return nil
}

func (b Bind) dst() string {
	if b.Dst == "" {
		return b.Src
	}
	return b.Dst
}
