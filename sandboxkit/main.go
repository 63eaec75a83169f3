package sandboxkit

import (
	"os"
	"sync/atomic"
)

// mainCalled records that the program called Main, so StartSession can
// count on the binary turning into the supervisor when re-executed.
var mainCalled atomic.Bool

// Main must be the first call in main (and in TestMain) of every program
// that starts Sessions. A Session's pid 1 is this same binary, executed
// again inside the sandbox; there Main runs the Session's supervisor and
// never returns. Everywhere else it returns at once.
//
// Package init functions run before Main, in the sandbox too: keep them
// free of side effects (files, network, goroutines that do work).
func Main() {
	if len(os.Args) > 1 && os.Args[1] == supervisorFlag {
		os.Exit(supervise(os.Args[2:]))
	}
	mainCalled.Store(true)
}
