package sandboxkit

import (
	"context"

	"github.com/codumentor/codumentor/sandboxkit/internal/invocation"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
)

// Every bwrap is started by the spawner, and a Session's pid 1 is the
// supervisor: this program's binary, re-executed (package
// internal/supervisor; Main runs them). Here are the Policy's parts of
// that: which spawner, and the launch steps in front of bwrap.

// Paths inside every sandbox, and the bubblewrap this package builds for.
const (
	homeDir         = invocation.HomeDir
	defaultPath     = invocation.DefaultPath
	minBwrapVersion = invocation.MinBwrapVersion
)

func init() {
	// For package diag, which shows the argv without starting anything.
	invocation.Build = func(policy any, argv []string) (*invocation.Bwrap, error) {
		l, err := policy.(*Policy).build(argv, buildOptions{})
		if err != nil {
			return nil, err
		}
		return &invocation.Bwrap{Path: l.Path, Args: l.Args, Env: l.Env, Files: l.Files}, nil
	}
}

// spawnerFor returns the spawner and the absolute path of p's bwrap,
// resolved on the host: the spawner executes exactly that.
func spawnerFor(p *Policy) (*supervisor.Spawner, string, error) {
	sp, err := supervisor.Get(supervisor.Rlimits{FileSize: p.Limits.FileSize, OpenFiles: p.Limits.OpenFiles})
	if err != nil {
		return nil, "", err
	}
	bwrap, err := resolveBwrap(p.Bwrap)
	return sp, bwrap, err
}

// rlimitLaunch returns the command line the spawner executes for args
// under p: args itself, or the rlimit step in front of it when p has an
// address-space or CPU-time limit (rlimits of one sandbox, not of the
// spawner, which lives as long as the server).
func rlimitLaunch(p *Policy, args []string) []string {
	return supervisor.StepRlimits(p.Limits.AddressSpace, p.Limits.CPUTime, args)
}

// selfRlimits returns the arguments of a SelfCommand under p: args, or
// the two limits in front of them for Main to set when p has either.
func selfRlimits(p *Policy, args []string) []string {
	return supervisor.SelfRlimits(p.Limits.AddressSpace, p.Limits.CPUTime, args)
}

// scopedLaunch returns the command line the spawner executes for the
// bwrap command line args of a sandbox under p: args itself, or the
// Landlock scope step in front of it when p shares the network and the
// kernel can keep it from the host's abstract UNIX sockets.
func scopedLaunch(p *Policy, args []string) []string {
	return supervisor.StepScope(p.ShareNet, args)
}

// SelfCommand returns a Cmd that runs this program's own binary under p,
// with args after argv[0]: a worker that parses untrusted input with the
// program's own code. The binary is passed in as a descriptor (it need
// not be under /usr), and, like the spawner, it calls Main first; the
// program's main must recognise args and run the worker before doing
// anything else. There Main sets the Policy's AddressSpace and CPUTime
// limits (hard) before it returns: the worker reads its input under
// them, with no launch step in between.
func SelfCommand(ctx context.Context, p *Policy, args ...string) *Cmd {
	c := Command(ctx, p, args...)
	c.self = true
	return c
}
