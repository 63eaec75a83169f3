package sandboxkit

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// testChildEnv makes the test binary a child process of a test instead:
// "run:MARKER", "many:MARKER" or "session". Those tests kill the child to show that its
// sandboxes die with it.
const testChildEnv = "SANDBOXKIT_TEST_CHILD"

func TestMain(m *testing.M) {
	// The test binary is also the Session supervisor inside sandboxes.
	Main()
	if len(os.Args) > 1 && os.Args[1] == testRlimitsFlag {
		printRlimits()
	}
	if mode, ok := os.LookupEnv(testChildEnv); ok {
		var err error
		if mode == "session" {
			err = sessionChild()
		} else {
			err = runChild(mode)
		}
		fmt.Println("child:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// requireSandbox skips a test that needs real bwrap sandboxes unless it
// can run them as an unprivileged user (see sandboxtest.RequireSandbox).
func requireSandbox(t testing.TB) {
	t.Helper()
	sandboxtest.RequireSandbox(t, func(ctx context.Context) error { return Doctor(ctx, DoctorOptions{}).Err() })
}
