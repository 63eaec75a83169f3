package sandboxkit

import (
	"os"

	"github.com/codumentor/codumentor/sandboxkit/internal/probe"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
)

// Main must be the first call in main (and in TestMain) of every program
// that starts sandboxes (Run, Session, Doctor). The spawner that starts
// every bwrap, and a Session's pid 1 inside its sandbox, are this same
// binary, executed again; there Main runs them and never returns.
// In a SelfCommand it sets the sandbox's rlimits first. Everywhere else
// it returns at once.
//
// Package init functions run before Main, in the sandbox too: keep them
// free of side effects (files, network, goroutines that do work).
func Main() {
	supervisor.TakeSelfRlimits()
	if code, ok := supervisor.Personality(os.Args); ok {
		os.Exit(code)
	}
	if code, ok := probe.Personality(os.Args); ok {
		os.Exit(code)
	}
	supervisor.MainCalled.Store(true)
}
