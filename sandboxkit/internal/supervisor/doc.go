// Package supervisor is sandboxkit's process machinery: the spawner that
// starts every bwrap, the supervisor that is pid 1 of a Session's sandbox,
// the control protocol between them and the host (Client), the launch
// steps the spawner runs before bwrap (rlimits, the Landlock scope), and
// the egress bridge inside a sandbox. Each of those is the program's own
// binary, re-executed with one of the flags here; Personality runs it.
package supervisor

import (
	"io"
	"os"
)

// Personality runs the re-executed binary named by args[1] (os.Args) and
// returns its exit code, or reports false when args name none of them.
func Personality(args []string) (int, bool) {
	if len(args) < 2 {
		return 0, false
	}
	switch args[1] {
	case SupervisorFlag:
		return supervise(args[2:]), true
	case SpawnerFlag:
		return spawn(args[2:]), true
	case ScopeFlag:
		return runScoped(args[2:]), true
	case EgressBridgeFlag:
		return runEgressBridge(args[2:]), true
	case RlimitFlag:
		return runRlimited(args[2:]), true
	}
	return 0, false
}

// SameWriter reports a == b, false for incomparable dynamic types.
func SameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a != nil && a == b
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
