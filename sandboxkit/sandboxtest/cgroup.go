package sandboxtest

import (
	"os/user"
	"path/filepath"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
	"golang.org/x/sys/unix"
)

// CgroupParent is the parent of the current user's delegated cgroup v1
// subtree on this machine (CONTROLLER/PARENT/USER, writable by the user),
// or "" on v2 or where none is delegated. sandboxkit has no default
// parent: the program names it, and on a test machine it is whatever the
// machine's setup delegated.
func CgroupParent(t testing.TB) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(cgroup.DefaultMount, "pids", "*", u.Username))
	for _, d := range dirs {
		if unix.Access(d, unix.W_OK) == nil {
			return filepath.Base(filepath.Dir(d))
		}
	}
	return ""
}
