package ctl_test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func TestExecWorkspaceWritesLandInUpper(t *testing.T) {
	requireSandbox(t)
	lower, upper := workspace(t)
	before := sandboxtest.Take(t, lower)

	r := ctl(t, "sandbox", "exec", "--workspace", lower, "--upper", upper, "--",
		"sh", "-c", "echo new > f; rm sub/keep.txt; cat base.txt")
	if r.code != 0 || r.stdout != "base content\n" {
		t.Fatalf("want base.txt's content and exit 0, got %v", r)
	}
	if b, err := os.ReadFile(filepath.Join(upper, "f")); err != nil || string(b) != "new\n" {
		t.Errorf("upper/f = %q, %v; want %q", b, err, "new\n")
	}
	before.Unchanged(t, lower)
	// The per-run work dir is gone; only the upper dir and its lock file
	// (overlay.Lock: beside it, so that a chmod inside cannot break it) remain.
	if got := listDir(t, filepath.Dir(upper)); !slices.Equal(got, []string{"upper", "upper.lock"}) {
		t.Errorf("upper's parent holds %v, want only upper and upper.lock", got)
	}
	assertNothingLeft(t, lower)

	// A second run sees the first one's writes: the upper dir is the state.
	r = ctl(t, "sandbox", "exec", "--workspace", lower, "--upper", upper, "--", "sh", "-c", "cat f; ls sub")
	if r.code != 0 || r.stdout != "new\n" {
		t.Errorf("second run: want f's content and an empty sub/, got %v", r)
	}
}

func TestExecTempUpper(t *testing.T) {
	requireSandbox(t)
	lower, _ := workspace(t)
	before := sandboxtest.Take(t, lower)
	r := ctl(t, "sandbox", "exec", "--workspace", lower, "--", "sh", "-c", "echo hi > made-here")
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	m := regexp.MustCompile(`codumentorctl: writes land in (\S+)`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("stderr does not say where writes land: %v", r)
	}
	upper := m[1]
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(upper)) })
	if b, err := os.ReadFile(filepath.Join(upper, "made-here")); err != nil || string(b) != "hi\n" {
		t.Errorf("%s/made-here = %q, %v; want %q", upper, b, err, "hi\n")
	}
	if got := listDir(t, filepath.Dir(upper)); !slices.Equal(got, []string{"upper", "upper.lock"}) {
		t.Errorf("temp dir holds %v, want only upper and upper.lock (work removed)", got)
	}
	before.Unchanged(t, lower)
}

func TestExecPropagatesExitCode(t *testing.T) {
	requireSandbox(t)
	if r := ctl(t, "sandbox", "exec", "--", "sh", "-c", "exit 7"); r.code != 7 || r.stderr != "" {
		t.Errorf("want exit 7 and no message, got %v", r)
	}
	lower, upper := workspace(t)
	if r := ctl(t, "sandbox", "exec", "--workspace", lower, "--upper", upper, "--", "sh", "-c", "exit 3"); r.code != 3 {
		t.Errorf("with a workspace: want exit 3, got %v", r)
	}
	// Without "--", flag parsing stops at the command's name.
	if r := ctl(t, "sandbox", "exec", "sh", "-c", "exit 5"); r.code != 5 {
		t.Errorf("without --: want exit 5, got %v", r)
	}
	if r := ctl(t, "sandbox", "exec", "--", "sh", "-c", "kill -TERM $$"); r.code != 128+15 {
		t.Errorf("killed by SIGTERM: want exit 143, got %v", r)
	}
}

func TestExecPassesStdin(t *testing.T) {
	requireSandbox(t)
	in := "line one\nline two\n"
	r := run{args: []string{"sandbox", "exec", "--", "sh", "-c", "cat; echo done >&2"}, stdin: in}.do(t)
	if r.code != 0 || r.stdout != in || !strings.Contains(r.stderr, "done") {
		t.Errorf("want stdin echoed on stdout and stderr passed through, got %v", r)
	}
}

func TestExecEnvironmentIsolated(t *testing.T) {
	requireSandbox(t)
	lower, upper := workspace(t)
	r := run{
		args: []string{"sandbox", "exec", "--workspace", lower, "--upper", upper, "--", "env"},
		env:  []string{"CODUMENTOR_JWT_SECRET=canary"},
	}.do(t)
	if r.code != 0 || !strings.Contains(r.stdout, "HOME=/home/sandbox") {
		t.Fatalf("env did not run in the sandbox: %v", r)
	}
	if strings.Contains(r.stdout, "canary") || strings.Contains(r.stdout, "CODUMENTOR_JWT_SECRET") {
		t.Errorf("the host environment reached the sandbox:\n%s", r.stdout)
	}
}

func TestExecNoNetworkUnlessShared(t *testing.T) {
	requireSandbox(t)
	// Only the loopback interface exists without --share-net.
	r := ctl(t, "sandbox", "exec", "--", "cat", "/proc/net/dev")
	if got := interfaces(r.stdout); r.code != 0 || !slices.Equal(got, []string{"lo"}) {
		t.Errorf("want only lo, got %v from %v", got, r)
	}
	b, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	host := interfaces(string(b))
	lower, upper := workspace(t)
	r = ctl(t, "sandbox", "exec", "--share-net", "--workspace", lower, "--upper", upper, "--", "cat", "/proc/net/dev")
	if got := interfaces(r.stdout); r.code != 0 || !slices.Equal(got, host) {
		t.Errorf("--share-net: want the host's interfaces %v, got %v from %v", host, got, r)
	}
}

// interfaces returns the sorted interface names of a /proc/net/dev.
func interfaces(procNetDev string) []string {
	var names []string
	for _, line := range strings.Split(procNetDev, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			names = append(names, strings.TrimSpace(name))
		}
	}
	slices.Sort(names)
	return names
}

func TestExecTimeout(t *testing.T) {
	requireSandbox(t)
	start := time.Now()
	r := ctl(t, "sandbox", "exec", "--timeout", "1s", "--", "sleep", "60")
	if r.code != 124 || !strings.Contains(r.stderr, "timed out") {
		t.Errorf("want exit 124 and a timeout message, got %v", r)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %s", d)
	}
}

// failClosed is one way the sandbox cannot be provided here.
type failClosed struct {
	name   string
	args   []string // flags before "--"
	env    []string
	check  string // the failed check's name in the message
	remedy string // part of its remedy
	bin    string // codumentorctl binary; empty means ctlBin
}

func TestExecFailsClosed(t *testing.T) {
	cases := []failClosed{
		{name: "bwrap missing", args: []string{"--bwrap", "/nonexistent/bwrap"},
			check: "bwrap: ", remedy: "install bubblewrap 0.12.0 or newer"},
		{name: "bwrap not on PATH", env: []string{"PATH=/usr/bin:/bin"},
			check: "bwrap: ", remedy: "install bubblewrap 0.12.0 or newer"},
		{name: "bwrap too old", args: []string{"--bwrap", "(set below)"},
			check: "bwrap-version: ", remedy: "install bubblewrap 0.12.0 or newer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			switch tc.name {
			case "bwrap not on PATH":
				for _, d := range []string{"/usr/bin", "/bin"} {
					if _, err := os.Stat(filepath.Join(d, "bwrap")); err == nil {
						sandboxtest.SkipOrFail(t, "%s/bwrap exists", d)
					}
				}
			case "bwrap too old":
				tc.args = []string{"--bwrap", sandboxtest.OldBwrap(t)}
			}
			assertFailsClosed(t, tc)
		})
	}
}

// assertFailsClosed runs a host-visible marker command and a workspace
// write under tc, and checks that both were refused with the failed check
// and its remedy, and that nothing ran or stayed behind.
func assertFailsClosed(t *testing.T, tc failClosed) {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "marker-"+strings.ReplaceAll(tc.name, " ", "-"))
	args := append(append([]string{"sandbox", "exec"}, tc.args...), "--", "touch", marker)
	r := run{bin: tc.bin, args: args, env: tc.env}.do(t)
	assertRefused(t, r, tc)
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("%s was created on the host", marker)
	}

	lower, upper := workspace(t)
	before := sandboxtest.Take(t, lower)
	args = append(append([]string{"sandbox", "exec", "--workspace", lower, "--upper", upper}, tc.args...),
		"--", "sh", "-c", "touch /workspace/marker; touch "+marker)
	r = run{bin: tc.bin, args: args, env: tc.env}.do(t)
	assertRefused(t, r, tc)
	before.Unchanged(t, lower)
	if got := listDir(t, filepath.Dir(upper)); len(got) != 0 {
		t.Errorf("left behind next to the upper dir: %v", got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("%s was created on the host", marker)
	}
	assertNothingLeft(t, lower)
}

func assertRefused(t *testing.T, r result, tc failClosed) {
	t.Helper()
	if r.code != 125 {
		t.Errorf("want exit 125, got %v", r)
	}
	for _, want := range []string{"sandbox unavailable: " + tc.check, tc.remedy, "nothing was run"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %v", want, r)
		}
	}
	if r.stdout != "" {
		t.Errorf("something printed on stdout: %v", r)
	}
}

// TestExecFailsClosedOverlayRefused puts the upper dir on overlayfs, which
// the kernel refuses as an upper layer: the Doctor's overlay probe, run in
// the upper dir's parent, must catch it before the command starts.
func TestExecFailsClosedOverlayRefused(t *testing.T) {
	requireSandbox(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) is missing")
	}
	lower, _ := workspace(t)
	before := sandboxtest.Take(t, lower)
	d := t.TempDir()
	marker := filepath.Join(t.TempDir(), "marker-overlay")
	// In a private mount namespace: a tmpfs on d, an overlay on d/m, and the
	// upper dir inside that overlay. After codumentorctl, list what it left
	// in the upper dir's parent, then exit with its status.
	script := `set -e
mount -t tmpfs none "$D"
mkdir -p "$D/l" "$D/u" "$D/w" "$D/m"
mount -t overlay none -o "lowerdir=$D/l,upperdir=$D/u,workdir=$D/w" "$D/m"
mkdir "$D/m/base"
set +e
"$CTL" sandbox exec --workspace "$W" --upper "$D/m/base/upper" -- sh -c "touch /workspace/marker; touch $MARKER"
status=$?
echo "left: $(ls -A "$D/m/base")"
exit $status`
	r := run{
		wrap: []string{"unshare", "-Urm", "sh", "-c", script},
		env:  []string{"D=" + d, "CTL=" + ctlBin, "W=" + lower, "MARKER=" + marker},
	}.do(t)
	assertRefused(t, result{code: r.code, stderr: r.stderr}, failClosed{
		check:  "overlay: ",
		remedy: "put the workspace base dir on a filesystem that supports overlayfs upper dirs",
	})
	if strings.TrimSpace(r.stdout) != "left:" {
		t.Errorf("want nothing left in the upper's parent, got %q", r.stdout)
	}
	before.Unchanged(t, lower)
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("%s was created on the host", marker)
	}
	assertNothingLeft(t, lower)
}

func TestExecBadInput(t *testing.T) {
	lower, upper := workspace(t)
	missing := filepath.Join(t.TempDir(), "does-not-exist")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"workspace missing", []string{"--workspace", missing, "--upper", upper, "--", "true"}, 2, "no such directory"},
		{"workspace is a file", []string{"--workspace", filepath.Join(lower, "base.txt"), "--", "true"}, 2, "is not a directory"},
		{"upper inside workspace", []string{"--workspace", lower, "--upper", filepath.Join(lower, "up"), "--", "true"}, 2, "overlap"},
		{"upper without workspace", []string{"--upper", upper, "--", "true"}, 2, "--upper needs --workspace"},
		{"no command after --", []string{"--workspace", lower, "--upper", upper, "--"}, 2, "missing command"},
		{"no command", nil, 2, "missing command"},
		{"bad seccomp mode", []string{"--seccomp", "strict", "--", "true"}, 2, `invalid value "strict" for flag -seccomp: want one of log, enforce, off`},
		{"unknown flag", []string{"--no-such-flag", "--", "true"}, 2, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := sandboxtest.Take(t, lower)
			r := ctl(t, append([]string{"sandbox", "exec"}, tc.args...)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Errorf("want exit %d and %q on stderr, got %v", tc.code, tc.want, r)
			}
			if !strings.HasPrefix(r.stderr, "codumentorctl: ") {
				t.Errorf("stderr is not one clean message: %q", r.stderr)
			}
			before.Unchanged(t, lower)
			if got := listDir(t, filepath.Dir(upper)); len(got) != 0 {
				t.Errorf("left behind next to the upper dir: %v", got)
			}
		})
	}
}

func TestExecCommandNotFound(t *testing.T) {
	requireSandbox(t)
	lower, upper := workspace(t)
	before := sandboxtest.Take(t, lower)
	r := ctl(t, "sandbox", "exec", "--workspace", lower, "--upper", upper, "--", "no-such-command-xyz", "arg")
	if r.code != 127 || !strings.Contains(r.stderr, "no-such-command-xyz: command not found in the sandbox") {
		t.Errorf("want exit 127 and a not-found message, got %v", r)
	}
	before.Unchanged(t, lower)
	if got := listDir(t, upper); len(got) != 0 {
		t.Errorf("upper dir holds %v, want nothing", got)
	}
	assertNothingLeft(t, lower)
	// "help" too is a command for the sandbox, not codumentorctl's help.
	if r := ctl(t, "sandbox", "exec", "help"); r.code != 127 || !strings.Contains(r.stderr, "help: command not found in the sandbox") {
		t.Errorf("sandbox exec help: want exit 127, got %v", r)
	}

	// Found but not executable: 126.
	if err := os.WriteFile(filepath.Join(lower, "script.sh"), []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = ctl(t, "sandbox", "exec", "--workspace", lower, "--upper", upper, "--", "./script.sh")
	if r.code != 126 || strings.Contains(r.stdout, "ran") {
		t.Errorf("want exit 126, got %v", r)
	}
}

func TestExecUpperInUse(t *testing.T) {
	requireSandbox(t)
	lower, upper := workspace(t)

	// The first sandbox holds the upper dir until its stdin closes.
	first, stdin, firstErr := startReady(t, "sandbox", "exec", "--workspace", lower, "--upper", upper, "--",
		"sh", "-c", "echo ready; read line; echo second > f")

	r := ctl(t, "sandbox", "exec", "--workspace", lower, "--upper", upper, "--", "sh", "-c", "echo intruder > f")
	if r.code != 125 || !strings.Contains(r.stderr, "in use by another sandbox") {
		t.Errorf("want exit 125 and an in-use message, got %v", r)
	}
	if got := listDir(t, filepath.Dir(upper)); len(got) != 3 {
		// upper, its lock file and the first run's work dir; the refused
		// run left none.
		t.Errorf("upper's parent holds %v, want upper, upper.lock and one work dir", got)
	}

	io.WriteString(stdin, "go\n")
	stdin.Close()
	if err := first.Wait(); err != nil {
		t.Fatalf("first sandbox: %v; stderr: %s", err, firstErr.String())
	}
	if b, _ := os.ReadFile(filepath.Join(upper, "f")); string(b) != "second\n" {
		t.Errorf("upper/f = %q, want the first sandbox's write", b)
	}
	assertNothingLeft(t, lower)
}

func TestExecInterruptKillsSandbox(t *testing.T) {
	requireSandbox(t)
	lower, upper := workspace(t)
	c, _, stderr := startReady(t, "sandbox", "exec", "--workspace", lower, "--upper", upper, "--",
		"sh", "-c", "echo ready; sleep 3600; : "+lower)
	c.Process.Signal(syscall.SIGTERM)
	err := c.Wait()
	if c.ProcessState.ExitCode() != 130 || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("want exit 130 and an interrupted message, got %v; stderr: %s", err, stderr.String())
	}
	// bwrap and the shell inside are gone (both argvs name the lower dir).
	assertNothingLeft(t, lower)
	if got := listDir(t, filepath.Dir(upper)); !slices.Equal(got, []string{"upper", "upper.lock"}) {
		t.Errorf("upper's parent holds %v, want only upper and upper.lock", got)
	}
}

// startReady starts codumentorctl with args, whose sandboxed command
// prints "ready" once it runs, and returns when it has.
func startReady(t *testing.T, args ...string) (c *exec.Cmd, stdin io.WriteCloser, stderr *bytes.Buffer) {
	t.Helper()
	c = exec.Command(ctlBin, args...)
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr = &bytes.Buffer{}
	c.Stderr = stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("sandbox did not start: %q %v; stderr: %s", line, err, stderr.String())
	}
	return c, stdin, stderr
}

func TestExecAllowHost(t *testing.T) {
	requireSandbox(t)
	// The real resolver: no name under .invalid resolves, and other.invalid
	// is not in the list either way.
	r := ctl(t, "sandbox", "exec", "--allow-host", "allowed.invalid", "--allow-host", "*.allowed.invalid:443", "--",
		"sh", "-c", "curl -sS --max-time 10 https://other.invalid/; curl -sS --max-time 10 https://allowed.invalid/; echo curl=$?; cat /proc/net/dev")
	if got := interfaces(r.stdout); !slices.Equal(got, []string{"lo"}) {
		t.Errorf("want only lo, got %v from %v", got, r)
	}
	for _, want := range []string{"egress refused connect other.invalid:443: other.invalid:443 is not in the allow-list", "egress failed connect allowed.invalid:443: cannot resolve allowed.invalid"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q: %v", want, r)
		}
	}
	if !strings.Contains(r.stdout, "curl=56") {
		t.Errorf("curl through the proxy to an unresolvable name: want exit 56, got %v", r)
	}
	for _, args := range [][]string{
		{"--allow-host", "*.com", "--", "true"},
		{"--allow-host", "example.com", "--share-net", "--", "true"},
	} {
		if r := ctl(t, append([]string{"sandbox", "exec"}, args...)...); r.code != 2 {
			t.Errorf("sandbox exec %v: want exit 2, got %v", args, r)
		}
	}
}
