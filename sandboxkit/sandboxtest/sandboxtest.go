// Package sandboxtest holds helpers for testing programs that use
// sandboxkit: the rule for when a sandbox test may be skipped
// (RequireSandbox), waiting for a condition with a limit that means
// stuck (Eventually), the old bwrap fixture for fail-closed tests, and
// tree snapshots that prove a workspace's lower layer unchanged.
package sandboxtest

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// SkipOrFail skips t, or fails it when the environment says CI=true: a
// CI run installs every component the tests need, so a missing one there
// is a broken setup, never an optional test.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("cannot skip under CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireUnprivileged skips (or fails, see SkipOrFail) a test run as
// root: sandboxes are deployed under an unprivileged user, and root
// hides permission bugs and changes how user namespaces behave.
func RequireUnprivileged(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		SkipOrFail(t, "sandbox tests run as an unprivileged user (as the test runner does); root hides bugs")
	}
}

// RequireSandbox skips (or fails, see SkipOrFail) a test that runs real
// sandboxes unless it runs as an unprivileged user (RequireUnprivileged)
// on a machine where check, the program's own check that sandboxes run
// (for most, sandboxkit.Doctor's Err), passes. The check is a parameter
// because sandboxkit's own tests use this package.
func RequireSandbox(t testing.TB, check func(context.Context) error) {
	t.Helper()
	RequireUnprivileged(t)
	if err := check(t.Context()); err != nil {
		SkipOrFail(t, "the sandbox cannot run here: %v", err)
	}
}

// Eventually calls cond until it returns nil and fails t with cond's
// last error if it has not by timeout. The timeout says the code is
// stuck, never that it is slow: choose it far beyond the slowest run on
// a loaded machine. cond runs on t's goroutine, so it may call t.Fatal.
// Where the code under test has an event to wait on (a channel it
// closes, a message it sends), wait on that instead.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stuck: still after %v: %v", timeout, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// OldBwrap returns the path of a real bubblewrap older than sandboxkit
// accepts (Debian 12's 0.8.0, say), named by the environment variable
// SANDBOXTEST_OLD_BWRAP, for tests that show the sandbox refusing it.
func OldBwrap(t testing.TB) string {
	t.Helper()
	p := os.Getenv("SANDBOXTEST_OLD_BWRAP")
	if p == "" {
		SkipOrFail(t, "SANDBOXTEST_OLD_BWRAP names no old bwrap (the test runner sets it)")
	}
	if _, err := os.Stat(p); err != nil {
		SkipOrFail(t, "old bwrap %s (SANDBOXTEST_OLD_BWRAP) missing: %v", p, err)
	}
	return p
}

// Snapshot is every entry under a directory, by slash-separated relative
// path: its mode, plus a regular file's content or a symlink's target.
type Snapshot map[string]string

// Take records the tree at dir.
func Take(t testing.TB, dir string) Snapshot {
	t.Helper()
	s := Snapshot{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + target
		}
		rel, _ := filepath.Rel(dir, p)
		s[filepath.ToSlash(rel)] = v
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot of %s: %v", dir, err)
	}
	return s
}

// Unchanged fails t, naming the differing entries, unless the tree at dir
// is still exactly as in s.
func (s Snapshot) Unchanged(t testing.TB, dir string) {
	t.Helper()
	now := Take(t, dir)
	if maps.Equal(s, now) {
		return
	}
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		if v, ok := now[k]; !ok {
			diff = append(diff, fmt.Sprintf("- %s: %.60q", k, s[k]))
		} else if v != s[k] {
			diff = append(diff, fmt.Sprintf("~ %s: %.60q → %.60q", k, s[k], v))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(now)) {
		if _, ok := s[k]; !ok {
			diff = append(diff, fmt.Sprintf("+ %s: %.60q", k, now[k]))
		}
	}
	t.Errorf("%s changed:\n%s", dir, strings.Join(diff, "\n"))
}
