package agentcore

import (
	"context"
	"slices"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// Launch describes a start in a conversation's sandbox (see LaunchOf):
// the sandbox itself, or a command in it.
type Launch struct {
	User, Conversation string
	// Kind says what starts, as sandboxkit.LaunchRecord.Kind: a one-shot
	// sandbox ("run"), a session's sandbox ("session"), or a command in
	// the session ("session-command").
	Kind string
	// Profile is the sandbox's label ("workspace", "external-agent",
	// "host-readonly").
	Profile string
	// ArgvSHA256 is the SHA-256 (hex) of the argv joined by NUL bytes,
	// secret placeholders unsubstituted; empty for a session's start.
	ArgvSHA256 string
	Cwd        string
	// Seccomp is the filter mode; FilterSHA256 the SHA-256 of the
	// filter program loaded (empty in mode off).
	Seccomp      seccomp.Mode
	FilterSHA256 string
	// Secrets names the secrets substituted into the command (never
	// their values).
	Secrets []string
}

// approvedKey is the context key of an approvedLaunch.
type approvedKey struct{}

// approvedLaunch is a command as it starts (argv, secret values
// substituted) and as the user approved it (placeholders).
type approvedLaunch struct{ argv, approved []string }

// withApproved returns ctx telling the engine's Launching hook that argv
// is approved as approvedArgv: the launch of exactly argv is recorded
// with approvedArgv's digest and the secrets it names. A digest of a
// secret's value would be one to guess it against.
func withApproved(ctx context.Context, argv, approvedArgv []string) context.Context {
	return context.WithValue(ctx, approvedKey{}, &approvedLaunch{argv: argv, approved: approvedArgv})
}

// launchKey is the context key of a Launch.
type launchKey struct{}

// LaunchOf returns, to Config.Sandbox.Launching, what the engine tells
// of the start it is asked about: the user and conversation, and the
// secrets substituted into the command (Launch.Secrets). ok is false for
// a start that is not in a conversation's sandbox.
func LaunchOf(ctx context.Context) (l Launch, ok bool) {
	p, ok := ctx.Value(launchKey{}).(*Launch)
	if !ok {
		return Launch{}, false
	}
	return *p, true
}

// sandbox is Config.Sandbox for call's conversation: its Launching
// (if set) is told of every start with LaunchOf the conversation's, and
// the record of an approved command names the placeholders of its
// secrets, never their values.
func (e *Engine) sandbox(call *Call) sandboxkit.Settings {
	s := e.cfg.Sandbox
	next := s.Launching
	if next == nil {
		return s
	}
	user, conv := call.User, call.Conversation
	s.Launching = func(ctx context.Context, r sandboxkit.LaunchRecord) error {
		if a, ok := ctx.Value(approvedKey{}).(*approvedLaunch); ok && r.Kind == "session-command" && slices.Equal(a.argv, r.Argv) {
			r.Argv = a.approved
		}
		l := Launch{User: user, Conversation: conv, Kind: r.Kind, Profile: r.Profile, ArgvSHA256: r.ArgvSHA256(), Cwd: r.Cwd, Seccomp: r.Seccomp, FilterSHA256: r.FilterSHA256}
		seen := map[string]bool{}
		for _, a := range r.Argv {
			for _, m := range secretRef.FindAllStringSubmatch(a, -1) {
				if !seen[m[1]] {
					seen[m[1]] = true
					l.Secrets = append(l.Secrets, m[1])
				}
			}
		}
		return next(context.WithValue(ctx, launchKey{}, &l), r)
	}
	return s
}
