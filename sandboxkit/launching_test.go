package sandboxkit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// launchLog is a Policy.Launching that records every start, and refuses
// them all while refuse is set.
type launchLog struct {
	mu     sync.Mutex
	got    []LaunchRecord
	refuse bool
}

var errNoAudit = errors.New("audit log unwritable")

func (l *launchLog) launching(_ context.Context, r LaunchRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refuse {
		return errNoAudit
	}
	l.got = append(l.got, r)
	return nil
}

func (l *launchLog) records() []LaunchRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// Every start under a Policy with Launching is reported before it runs:
// one-shot, a Session's start, its commands and jobs; a refusal runs
// nothing (the marker stays absent).
func TestLaunching(t *testing.T) {
	requireSandbox(t)
	out := t.TempDir()
	marker := filepath.Join(out, "marker")
	log := &launchLog{}
	p, err := mirrorPolicy(Settings{Seccomp: seccomp.Enforce, Launching: log.launching}, t.TempDir(), out)
	if err != nil {
		t.Fatal(err)
	}
	enforce, err := seccomp.Load(seccomp.Enforce)
	if err != nil {
		t.Fatal(err)
	}

	log.refuse = true
	err = Command(t.Context(), p, "touch", "/out/marker").Run()
	if !errors.Is(err, ErrLaunchRefused) || !errors.Is(err, errNoAudit) {
		t.Fatalf("refused one-shot: %v", err)
	}
	if _, err := StartSession(t.Context(), p, SessionOptions{}); !errors.Is(err, ErrLaunchRefused) {
		t.Fatalf("refused session: %v", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused launch ran: %v", err)
	}

	log.refuse = false
	if err := Command(t.Context(), p, "true").Run(); err != nil {
		t.Fatal(err)
	}
	s := startSession(t, p, SessionOptions{})
	c := s.Command(t.Context(), "sh", "-c", "exit 0")
	c.Dir = "/tmp"
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartBackground(t.Context(), []string{"sleep", "0"}, nil, ""); err != nil {
		t.Fatal(err)
	}
	log.refuse = true
	c = s.Command(t.Context(), "touch", "/out/marker")
	if err := c.Run(); !errors.Is(err, ErrLaunchRefused) {
		t.Fatalf("refused session command: %v", err)
	}
	if _, err := s.StartBackground(t.Context(), []string{"touch", "/out/marker"}, nil, ""); !errors.Is(err, ErrLaunchRefused) {
		t.Fatalf("refused job: %v", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused launch ran: %v", err)
	}

	want := []LaunchRecord{
		{Kind: launchRun, Argv: []string{"true"}, Cwd: "/out"},
		{Kind: launchSession, Cwd: "/out"},
		{Kind: launchInSession, Argv: []string{"sh", "-c", "exit 0"}, Cwd: "/tmp"},
		{Kind: launchInSession, Argv: []string{"sleep", "0"}, Cwd: "/out"},
	}
	got := log.records()
	if len(got) != len(want) {
		t.Fatalf("%d launches reported, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		w.Profile, w.Seccomp, w.FilterSHA256 = "mirror", seccomp.Enforce, enforce.Digest
		if g := got[i]; g.Kind != w.Kind || !slices.Equal(g.Argv, w.Argv) || g.Cwd != w.Cwd || g.Profile != w.Profile || g.Seccomp != w.Seccomp || g.FilterSHA256 != w.FilterSHA256 {
			t.Errorf("launch %d = %+v, want %+v", i, g, w)
		}
	}
	if got[0].ArgvSHA256() != "b5bea41b6c623f7c09f1bf24dcae58ebab3c0cdd90ad966bc43a45b44867e12b" { // sha256("true")
		t.Errorf("ArgvSHA256 = %s", got[0].ArgvSHA256())
	}
}

func TestLaunchingSeccompOff(t *testing.T) {
	var got LaunchRecord
	p := &Policy{Launching: func(_ context.Context, r LaunchRecord) error { got = r; return nil }}
	if err := p.launching(context.Background(), launchRun, []string{"x"}, ""); err != nil {
		t.Fatal(err)
	}
	if got.Seccomp != seccomp.Off || got.FilterSHA256 != "" || got.Cwd != homeDir || got.Profile != "" {
		t.Fatalf("%+v", got)
	}
}
