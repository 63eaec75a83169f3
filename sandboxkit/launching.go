package sandboxkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// The kinds of LaunchRecord.
const (
	launchRun       = "run"
	launchSession   = "session"
	launchInSession = "session-command"
)

// LaunchRecord is what Policy.Launching is told of a start: enough for
// an audit record of who ran what, where, under which filter.
type LaunchRecord struct {
	// Kind says what starts: "run", a one-shot sandbox (Cmd.Start, Run);
	// "session", a Session's sandbox (StartSession), whose pid 1 is the
	// supervisor and whose Argv is empty (the commands started in it are
	// reported one by one); "session-command", a command or background
	// job started in a running Session, under the filter the session
	// loaded.
	Kind string
	// Profile is Policy.Profile, the Policy's label.
	Profile string
	// Argv is the command line inside the sandbox (for a SelfCommand,
	// the arguments after the program's own binary). It holds whatever
	// the caller substituted into it: record a digest, not the text.
	Argv []string
	// Cwd is the working directory inside.
	Cwd string
	// Seccomp is the filter's mode: seccomp.Off without a filter, "" for
	// a filter that is none of the embedded ones. FilterSHA256 is the
	// SHA-256 (hex) of the filter program, "" without one.
	Seccomp      seccomp.Mode
	FilterSHA256 string
}

// ArgvSHA256 is the SHA-256 (hex) of Argv joined by NUL bytes; ""
// without Argv (a Session's start).
func (r LaunchRecord) ArgvSHA256() string {
	if len(r.Argv) == 0 {
		return ""
	}
	sum := sha256.Sum256([]byte(strings.Join(r.Argv, "\x00")))
	return hex.EncodeToString(sum[:])
}

// launching tells p.Launching of a start, if set. Its error refuses the
// start: the caller runs nothing.
func (p *Policy) launching(ctx context.Context, kind string, argv []string, dir string) error {
	if p.Launching == nil {
		return nil
	}
	r := LaunchRecord{Kind: kind, Profile: p.Profile, Argv: slices.Clone(argv), Cwd: dir, Seccomp: seccomp.Off}
	if r.Cwd == "" {
		r.Cwd = p.Dir
	}
	if r.Cwd == "" {
		r.Cwd = homeDir
		if p.Workspace != nil {
			r.Cwd = WorkspaceDir
		}
	}
	if p.Seccomp != nil {
		sum := sha256.Sum256(p.Seccomp)
		r.FilterSHA256, r.Seccomp = hex.EncodeToString(sum[:]), ""
		// The embedded filters are cached per mode (seccomp.Load).
		for _, m := range []seccomp.Mode{seccomp.Log, seccomp.Enforce} {
			if f, err := seccomp.Load(m); err == nil && f != nil && f.Digest == r.FilterSHA256 {
				r.Seccomp = m
			}
		}
	}
	if err := p.Launching(ctx, r); err != nil {
		return fmt.Errorf("%w: %w; nothing was run", ErrLaunchRefused, err)
	}
	return nil
}
