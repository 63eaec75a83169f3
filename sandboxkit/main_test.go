package sandboxkit

import (
	"fmt"
	"os"
	"testing"
)

// testChildEnv makes the test binary a child process of a test instead:
// "run:MARKER", "many:MARKER" or "session". Those tests kill the child to show that its
// sandboxes die with it.
const testChildEnv = "SANDBOXKIT_TEST_CHILD"

func TestMain(m *testing.M) {
	// The test binary is also the Session supervisor inside sandboxes.
	Main()
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
// can run them as an unprivileged user (root hides permission bugs). In
// CI (CI=true) such a skip is a failure: the scripts install bwrap and
// run the tests as an unprivileged user, so a skip there means a broken
// setup.
func requireSandbox(t testing.TB) {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("sandbox test cannot run under CI=true: %s", why)
		}
		t.Skip(why)
	}
	if os.Getuid() == 0 {
		skip("sandbox tests run as an unprivileged user (scripts/test does that); root hides bugs")
	}
	if err := Doctor(t.Context(), DoctorOptions{}).Err(); err != nil {
		skip(err.Error())
	}
}
