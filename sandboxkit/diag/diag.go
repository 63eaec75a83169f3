// Package diag shows what sandboxkit does without being part of running
// a sandbox: the bwrap argv a Policy turns into (Build), and probes that
// check a Policy's filter and isolation on this machine by running real
// sandboxes (Probe, ProbeToolchains, ProbeAbstractUnix). It is for
// tools that report on or debug a deployment; a program that only runs
// sandboxes needs none of it.
package diag

import (
	"errors"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/internal/invocation"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
)

// MinBwrapVersion is the oldest bubblewrap sandboxkit runs (the Doctor's
// "bwrap-version" check). Earlier releases lack --overlay and could be
// made to follow a symlink out of a writable tree while setting up the
// sandbox.
const MinBwrapVersion = invocation.MinBwrapVersion

// EgressSocketPlaceholder stands for the egress proxy's host socket in
// the argv that Build returns: Run and StartSession bind the socket of
// the proxy they start.
const EgressSocketPlaceholder = invocation.EgressSocketPlaceholder

// Launch is a Policy turned into a bwrap invocation.
type Launch struct {
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

// Build turns p into the bwrap invocation that runs argv inside the
// sandbox, as sandboxkit's Run does. It is a pure function: it touches
// no file and starts nothing. argv[0] is looked up on PATH inside the
// sandbox. Run and Session start a ShareNet sandbox through a Landlock
// scope step (see AbstractUnixScoped); a Launch executed directly has no
// such step. Run and Session also pass bwrap the options in an
// inherited file (--args), so that the command line the sandbox can
// read names no host path.
func Build(p *sandboxkit.Policy, argv ...string) (*Launch, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandboxkit: no command to run")
	}
	b, err := invocation.Build(p, argv)
	if err != nil {
		return nil, err
	}
	return &Launch{Path: b.Path, Args: b.Args, Env: b.Env, Files: b.Files}, nil
}

// AbstractUnixScoped reports whether this kernel keeps sandboxes that
// share the host network from the host's abstract UNIX sockets
// (Landlock's scope, Linux 6.12). When it is false, such sandboxes can
// connect to them (see Policy.ShareNet and the Doctor's "landlock"
// check).
func AbstractUnixScoped() bool { return supervisor.Scoped() }
