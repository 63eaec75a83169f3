package sandboxkit

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/headtail"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// spawnerPids returns the pids of the spawners this process started.
func spawnerPids() []int {
	var pids []int
	for _, p := range hostProcs() {
		if p.ppid == os.Getpid() && bytes.Contains(p.cmdline, []byte("\x00"+supervisor.SpawnerFlag+"\x00")) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// TestSpawnerDies kills the spawner from outside: the sandboxes of a
// running Run and of a Session die with it, both say why, and the next
// Run starts a new spawner.
func TestSpawnerDies(t *testing.T) {
	requireSandbox(t)
	marker := fmt.Sprintf("marker-spawner-%d", time.Now().UnixNano())
	s := startSession(t, sessionPolicy(t), SessionOptions{})
	running := s.Command(t.Context(), "sh", "-c", "sleep 100; : "+marker)
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	_, ns := sessionNS(t, s)
	out := headtail.New(1024, 0)
	run := Command(t.Context(), &Policy{}, "sh", "-c", "echo ready; sleep 100; : "+marker)
	run.Stdout = out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "ready") {
			return fmt.Errorf("the Run printed %q, not ready yet", out.String())
		}
		return nil
	})
	if n := len(sandboxProcesses(marker)); n < 2 {
		t.Fatalf("%d sandboxed processes are running, want the Run's and the Session's", n)
	}
	// One spawner per set of rlimits: both sandboxes have none.
	sp := supervisor.Current(supervisor.Rlimits{})
	if !slices.Contains(spawnerPids(), sp.Pid) {
		t.Fatalf("spawners of this process: %v, want %d among them", spawnerPids(), sp.Pid)
	}
	syscall.Kill(sp.Pid, syscall.SIGKILL)

	err := run.Wait()
	t.Logf("Run: %v", err)
	if !errors.Is(err, supervisor.ErrSpawnerDied) {
		t.Errorf("Run: %v, want the spawner's death", err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end with the spawner")
	}
	t.Logf("Session.Err(): %v", s.Err())
	if err := s.Err(); !errors.Is(err, ErrSessionClosed) || !errors.Is(err, supervisor.ErrSpawnerDied) {
		t.Errorf("Session.Err() = %v, want ErrSessionClosed for the spawner's death", err)
	}
	if err := running.Wait(); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("the session's command: %v", err)
	}
	waitGone(t, marker)
	if left := procsInNS(ns); len(left) > 0 {
		t.Errorf("processes left in the session's pid namespace: %v", left)
	}

	var again bytes.Buffer
	next := Command(t.Context(), &Policy{}, "echo", "again")
	next.Stdout = &again
	if err := next.Run(); err != nil || again.String() != "again\n" {
		t.Fatalf("Run after the spawner died: %q %v", again.String(), err)
	}
	now := supervisor.Current(supervisor.Rlimits{})
	if now.Pid == sp.Pid || !slices.Contains(spawnerPids(), now.Pid) || slices.Contains(spawnerPids(), sp.Pid) {
		t.Errorf("spawners after the next Run: %v (the dead one was %d, the new one %d)", spawnerPids(), sp.Pid, now.Pid)
	}
}

func TestRunNeedsMain(t *testing.T) {
	supervisor.MainCalled.Store(false)
	defer supervisor.MainCalled.Store(true)
	err := Command(t.Context(), &Policy{}, "true").Run()
	if err == nil || !strings.Contains(err.Error(), "sandboxkit.Main()") {
		t.Errorf("Run: %v; want a hint to call Main", err)
	}
	r := Doctor(t.Context(), DoctorOptions{})
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "sandboxkit.Main()") {
		t.Errorf("Doctor: %v; want a hint to call Main", err)
	}
}
