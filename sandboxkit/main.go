package sandboxkit

import (
	"os"
	"sync/atomic"
)

// mainCalled records that the program called Main, so a launch can count
// on the binary turning into the spawner or the supervisor when
// re-executed.
var mainCalled atomic.Bool

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
	takeSelfRlimits()
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case supervisorFlag:
			os.Exit(supervise(os.Args[2:]))
		case spawnerFlag:
			os.Exit(spawn(os.Args[2:]))
		case probeFlag:
			os.Exit(runProbes())
		case probeCallsFlag:
			os.Exit(runProbeCalls())
		case listenProbeFlag:
			os.Exit(runListenProbe())
		case abstractProbeFlag:
			os.Exit(runAbstractProbe(os.Args[2:]))
		case scopeFlag:
			os.Exit(runScoped(os.Args[2:]))
		case egressBridgeFlag:
			os.Exit(runEgressBridge(os.Args[2:]))
		case rlimitFlag:
			os.Exit(runRlimited(os.Args[2:]))
		}
	}
	mainCalled.Store(true)
}
