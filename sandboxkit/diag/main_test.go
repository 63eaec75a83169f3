package diag

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

func TestMain(m *testing.M) {
	sandboxkit.Main()
	os.Exit(m.Run())
}

// requireSandbox skips a test that needs real bwrap sandboxes unless it
// can run them as an unprivileged user (see sandboxtest.SkipOrFail).
func requireSandbox(t testing.TB) {
	t.Helper()
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(t.Context(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
}

// workspacePolicy is a conversation shell's sandbox: a fresh workspace,
// no network, the blocklist in mode m.
func workspacePolicy(t *testing.T, m seccomp.Mode) *sandboxkit.Policy {
	t.Helper()
	dir := t.TempDir()
	w := &sandboxkit.Workspace{Lower: filepath.Join(dir, "lower"), Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work")}
	for _, d := range []string{w.Lower, w.Upper, w.Work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { overlay.RemoveAll(dir) })
	f, err := seccomp.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	p := &sandboxkit.Policy{Workspace: w, UID: os.Getuid(), GID: os.Getgid(), Limits: sandboxkit.DefaultLimits()}
	if f != nil {
		p.Seccomp = f.Program
	}
	if (p.Seccomp == nil) != (m == seccomp.Off) {
		t.Fatalf("mode %s: Policy.Seccomp set = %v", m, p.Seccomp != nil)
	}
	return p
}
