package sandboxkit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// A damaged filter makes the sandbox unavailable: nothing runs, and
// nothing runs unfiltered.
func TestSeccompDamagedFilterFailsClosed(t *testing.T) {
	requireSandbox(t)
	f, err := seccomp.Load(seccomp.Enforce)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "marker")
	for _, c := range []struct {
		name string
		prog []byte
	}{
		{"truncated", f.Program[:len(f.Program)-4]},
		{"no architecture check", f.Program[8:]},
		{"empty", []byte{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Policy{Seccomp: c.prog, ReadWrite: []Bind{{Src: filepath.Dir(marker)}}}
			err := Command(t.Context(), p, "touch", marker).Run()
			var ue *UnavailableError
			if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ue) || ue.Check.Name != "seccomp" || !strings.Contains(ue.Detail(), "seccomp program") {
				t.Fatalf("Run = %v; want the seccomp check's ErrUnavailable", err)
			}
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the command ran: %v", err)
			}
		})
	}
}

// A Session's supervisor (pid 1, this binary) works under enforce: it
// starts foreground and background commands, and they are filtered.
func TestSeccompEnforceSession(t *testing.T) {
	requireSandbox(t)
	p, err := Settings{Seccomp: seccomp.Enforce}.Workspace("workspace", testWorkspace(t))
	if err != nil {
		t.Fatal(err)
	}
	s := startSession(t, p, SessionOptions{})
	out, _, err := inSession(t, s, "echo hi > f.txt && cat f.txt && grep -E '^Seccomp:' /proc/self/status")
	if err != nil || !strings.Contains(out, "hi\n") || !strings.Contains(out, "Seccomp:\t2") {
		t.Fatalf("foreground command under enforce: %q, %v", out, err)
	}
	// unshare(1) is refused by the filter, not by bwrap's userns limit:
	// the message is EPERM ("Operation not permitted").
	out, _, err = inSession(t, s, "unshare -U true")
	if err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Fatalf("unshare under enforce: %q, %v", out, err)
	}
	job, err := s.StartBackground(t.Context(), []string{"sh", "-c", "echo bg; sleep 30"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(job.ID); err != nil {
		t.Fatalf("kill background job: %v", err)
	}
}
