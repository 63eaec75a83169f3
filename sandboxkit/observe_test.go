package sandboxkit

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/sandboxkit/internal/probe"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// observedPolicy is a session policy with the log-mode filter, and this
// test binary in the lower tree as /workspace/probe (the probe program).
func observedPolicy(t *testing.T, mode seccomp.Mode) *Policy {
	t.Helper()
	p := sessionPolicy(t)
	f, err := seccomp.Load(mode)
	if err != nil {
		t.Fatal(err)
	}
	p.Seccomp = f.Program
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(filepath.Join(p.Workspace.Lower, "probe"), os.O_CREATE|os.O_WRONLY, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every blocklisted call the probe program makes in log mode is reported
// once, by name and caller, with how often it was made; the calls still
// run.
func TestSessionObservesLogMode(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	s := startSession(t, observedPolicy(t, seccomp.Log), SessionOptions{})
	if err := s.Observing(); err != nil {
		t.Fatalf("Observing: %v", err)
	}
	out, _, err := inSession(t, s, "/workspace/probe "+probe.CallsFlag)
	if err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
	var called []string
	if err := json.Unmarshal([]byte(out), &called); err != nil || len(called) < 40 {
		t.Fatalf("probe output %q: %v", out, err)
	}
	want := map[string]int64{}
	for _, name := range called {
		want[name]++
	}
	got := map[string]int64{}
	for _, v := range s.Violations() {
		if v.Command != "probe" {
			t.Errorf("violation by %q, not the probe: %+v", v.Command, v)
			continue
		}
		if _, dup := got[v.Syscall]; dup {
			t.Errorf("%s reported twice", v.Syscall)
		}
		got[v.Syscall] = v.Count
		if !strings.HasPrefix(v.Args, "(") {
			t.Errorf("%s: args %q", v.Syscall, v.Args)
		}
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: reported %d times, the probe made it %d times", name, got[name], n)
		}
	}
	for name := range got {
		if want[name] == 0 {
			t.Errorf("%s reported, the probe never made it", name)
		}
	}
}

// Enforce mode refuses first: the listener is not even installed, and
// the refused calls are refused.
func TestSessionEnforceNotObserved(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	s := startSession(t, observedPolicy(t, seccomp.Enforce), SessionOptions{})
	if err := s.Observing(); !errors.Is(err, errNotObserved) {
		t.Fatalf("Observing = %v, want errNotObserved", err)
	}
	if out, _, err := inSession(t, s, "/workspace/probe "+probe.CallsFlag); err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
	if v := s.Violations(); len(v) != 0 {
		t.Fatalf("violations under enforce: %+v", v)
	}
}

// outerListenerEnv runs TestLogModeWithoutListener's body in a child
// test process, which sends its parent a listener for its own filter on
// the socket at this descriptor.
const outerListenerEnv = "SANDBOXKIT_TEST_OUTER_LISTENER"

// Where the supervisor cannot set up its listener (here: the host
// process is under an observing filter already, and a filter tree has
// at most one listener), log mode still runs on SECCOMP_RET_LOG: the
// blocklisted calls go through, the session says why nothing is
// reported, and the Doctor warns that log mode is not observed.
//
// The body runs in a child test process under a filter whose listener
// this process serves (a process serving its own would wait on itself
// when the runtime starts a thread).
func TestLogModeWithoutListener(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	if os.Getenv(outerListenerEnv) != "" {
		logModeWithoutListener(t)
		return
	}
	cmd, out, fd := sandboxtest.StartChild(t, "TestLogModeWithoutListener", outerListenerEnv, 3*time.Minute)
	l, err := seccomp.ListenerFile(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	seen := map[string]bool{}
	go seccomp.Watch(l, func(c seccomp.Call) {
		mu.Lock()
		defer mu.Unlock()
		if c.Command == "probe" {
			seen[c.Syscall] = true
		}
	})
	err = cmd.Wait()
	if err != nil || !strings.Contains(out.String(), "--- PASS: TestLogModeWithoutListener") {
		t.Fatalf("child test: %v\n%s", err, out.String())
	}
	// The outer listener saw the probe's calls: the sandbox's filter let
	// them through (RET_LOG); an errno refusal answers before any
	// listener is asked.
	_, list, _ := strings.Cut(out.String(), "probe called: ")
	list, _, _ = strings.Cut(list, "\n")
	var called []string
	if err := json.Unmarshal([]byte(list), &called); err != nil || len(called) < 40 {
		t.Fatalf("the child's probe list %q: %v", list, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, name := range called {
		if !seen[name] {
			t.Errorf("%s did not go through the sandbox's filter", name)
		}
	}
}

// logModeWithoutListener is TestLogModeWithoutListener in the child.
func logModeWithoutListener(t *testing.T) {
	// No new privileges first, as bwrap sets them, then the filter on
	// every thread; its listener goes to the parent.
	runtime.LockOSThread()
	err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	var outer *os.File
	if err == nil {
		outer, err = seccomp.Listen()
	}
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatalf("outer listener: %v", err)
	}
	err = sandboxtest.SendToParent(int(outer.Fd()))
	outer.Close()
	if err != nil {
		t.Fatal(err)
	}

	s := startSession(t, observedPolicy(t, seccomp.Log), SessionOptions{})
	if err := s.Observing(); !errors.Is(err, errNotObserved) || !strings.Contains(err.Error(), "no user-notification listener") {
		t.Fatalf("Observing = %v; want errNotObserved saying the listener could not be set up", err)
	}
	out, _, err := inSession(t, s, "/workspace/probe "+probe.CallsFlag)
	if err != nil {
		t.Fatalf("probe: %v: %s", err, out)
	}
	t.Logf("probe called: %s", strings.TrimSpace(out))
	if v := s.Violations(); len(v) != 0 {
		t.Errorf("violations without a listener: %+v", v)
	}
	c := observeCheck(t.Context(), "")
	if c.Name != "seccomp-observe" || !c.OK || !c.Warning || !strings.Contains(c.Detail, "SECCOMP_RET_LOG only") {
		t.Errorf("Doctor's check: %+v; want a warning that log mode is not observed", c)
	}
}

// Ordinary builds make no blocklisted call: go build and make report
// nothing.
func TestSessionObservesNothingForBuilds(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		sandboxtest.SkipOrFail(t, "go: %v", err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		sandboxtest.SkipOrFail(t, "make: %v", err)
	}
	p := sessionPolicy(t)
	f, err := seccomp.Load(seccomp.Log)
	if err != nil {
		t.Fatal(err)
	}
	p.Seccomp = f.Program
	// The host's build cache, so that the build costs seconds, not a
	// compilation of the runtime.
	cache, err := exec.Command(goBin, "env", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	p.ReadWrite = append(p.ReadWrite, Bind{Src: strings.TrimSpace(string(cache)), Dst: "/gocache"})
	files := map[string]string{
		"go.mod":  "module hello\n\ngo 1.22\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\t\"os/exec\"\n)\n\nfunc main() {\n\tb, _ := exec.Command(\"echo\", \"from a child\").Output()\n\tfmt.Printf(\"hello from go %s\", b)\n}\n",
		"Makefile": "hello: main.go\n\t" + goBin + " build -o /tmp/hello .\n\t/tmp/hello\n" +
			".PHONY: hello-c\nhello-c:\n\tcc -o /tmp/c c/c.c && /tmp/c\n",
		"c/c.c": "#include <stdio.h>\nint main(void) { puts(\"hello from c\"); return 0; }\n",
	}
	if err := os.Mkdir(filepath.Join(p.Workspace.Lower, "c"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(p.Workspace.Lower, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := startSession(t, p, SessionOptions{})
	if err := s.Observing(); err != nil {
		t.Fatalf("Observing: %v", err)
	}
	out, _, err := inSession(t, s, "cd /workspace && HOME=/tmp GOCACHE=/gocache GOPATH=/tmp/gopath GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod make -s hello hello-c")
	if err != nil || !strings.Contains(out, "hello from go") || !strings.Contains(out, "hello from c") {
		t.Fatalf("make: %v\n%s", err, out)
	}
	if v := s.Violations(); len(v) != 0 {
		t.Fatalf("violations of an ordinary build: %+v", v)
	}
}

// The Doctor says that log mode reports per sandbox here (Linux 5.7+).
func TestDoctorObserveCheck(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	c := observeCheck(t.Context(), "")
	if c.Name != "seccomp-observe" || !c.OK || c.Warning || !strings.Contains(c.Detail, "user-notification listener") {
		t.Fatalf("check: %+v", c)
	}
}
