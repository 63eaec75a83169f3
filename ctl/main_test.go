package ctl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// ctlBin is the real codumentorctl, built once for all tests.
var ctlBin string

func TestMain(m *testing.M) {
	// TestRepos runs the server's sync handler here, whose local remote
	// is served in a sandbox: the test binary is also the spawner.
	sandboxkit.Main()
	dir, err := os.MkdirTemp("", "codumentorctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctlBin = filepath.Join(dir, "codumentorctl")
	build := exec.Command("go", "build", "-o", ctlBin, "github.com/codumentor/codumentor/ctl/codumentorctl")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building codumentorctl: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one codumentorctl run showed.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run describes one codumentorctl invocation.
type run struct {
	bin   string // codumentorctl binary; empty means ctlBin
	args  []string
	env   []string // added to (and overriding) the test's environment
	stdin string
	// wrap, when set, is the argv run instead of codumentorctl args...: a
	// program that runs codumentorctl itself (env gives it the path).
	wrap []string
	// dir, when set, is the working directory.
	dir string
}

func ctl(t *testing.T, args ...string) result {
	t.Helper()
	return run{args: args}.do(t)
}

func (r run) do(t *testing.T) result {
	t.Helper()
	bin := ctlBin
	if r.bin != "" {
		bin = r.bin
	}
	argv := append([]string{bin}, r.args...)
	if r.wrap != nil {
		argv = r.wrap
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = r.dir
	c.Env = append(os.Environ(), r.env...)
	c.Stdin = strings.NewReader(r.stdin)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := c.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	go func() { done <- c.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		c.Process.Kill()
		<-done
		t.Fatalf("%v did not finish in 2 minutes\nstdout: %s\nstderr: %s", argv, stdout.String(), stderr.String())
	}
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("run %v: %v", argv, err)
	}
	return res
}

var sandboxOnce struct {
	sync.Once
	why string
}

// requireSandbox skips a test that starts real bwrap sandboxes unless it
// runs as an unprivileged user on a machine that passes the checks (root
// hides permission bugs). Under CI=true the skip is a failure: CI installs
// bwrap and runs the tests as an unprivileged user.
func requireSandbox(t *testing.T) {
	t.Helper()
	sandboxtest.RequireSandbox(t, func(context.Context) error {
		sandboxOnce.Do(func() {
			if r := (run{args: []string{"check"}}).do(t); r.code != 0 {
				sandboxOnce.why = "codumentorctl check fails on this machine:\n" + r.stdout
			}
		})
		if sandboxOnce.why != "" {
			return errors.New(sandboxOnce.why)
		}
		return nil
	})
}

// listDir returns the sorted names in dir; nil when dir does not exist.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// assertNothingLeft fails when a process still runs, or a mount exists,
// whose command line or mount entry mentions needle (a test's unique dir).
// It polls briefly: bwrap is killed when codumentorctl exits, and its
// /proc entry lingers until it is reaped.
func assertNothingLeft(t *testing.T, needle string) {
	t.Helper()
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		var found []string
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, []byte(needle)) {
				found = append(found, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
		if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(b, []byte(needle)) {
			found = append(found, "a mount under "+needle)
		}
		if len(found) > 0 {
			return fmt.Errorf("left running or mounted:\n%s", strings.Join(found, "\n"))
		}
		return nil
	})
}

// workspace makes a lower tree with base.txt and an empty parent for the
// upper dir; it returns the lower dir and the upper path (not created).
func workspace(t *testing.T) (lower, upper string) {
	t.Helper()
	lower = filepath.Join(t.TempDir(), "lower")
	if err := os.MkdirAll(filepath.Join(lower, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "base.txt"), []byte("base content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lower, "sub", "keep.txt"), []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return lower, filepath.Join(t.TempDir(), "upper")
}
