package sandboxkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// testWorkspace makes lower (with a file and a symlink to /root), upper
// and work dirs.
func testWorkspace(t *testing.T) *Workspace {
	t.Helper()
	dir := t.TempDir()
	w := &Workspace{Lower: filepath.Join(dir, "lower"), Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work")}
	for _, d := range []string{w.Lower, w.Upper, w.Work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(w.Lower, "base.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/root", filepath.Join(w.Lower, "rootlink")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { overlay.RemoveAll(dir) })
	return w
}

func workspacePolicy(t *testing.T, w *Workspace) *Policy {
	t.Helper()
	p, err := Settings{}.Workspace("workspace", w)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sh runs a shell script in p and returns stdout+stderr.
func sh(t *testing.T, p *Policy, script string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	c := Command(t.Context(), p, "sh", "-c", script)
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}

func TestRunIsolation(t *testing.T) {
	requireSandbox(t)
	t.Setenv("SANDBOXKIT_TEST_SECRET", "canary-jwt-5f1e")
	w := testWorkspace(t)
	p := workspacePolicy(t, w)
	home, _ := os.UserHomeDir()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	hostSleep := exec.Command("sleep", "60")
	if err := hostSleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer hostSleep.Process.Kill()

	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		script string
		want   []string // substrings of the output
		reject []string // substrings that must not appear
	}{
		{"root invisible", "ls -a /root 2>&1; echo rc=$?", []string{"No such file or directory", "rc=2"}, nil},
		{"other homes invisible", "ls -a /home", []string{"sandbox"}, []string{me.Username}},
		{"host home invisible", "ls -a " + home + " 2>&1; echo rc=$?", []string{"rc=2"}, nil},
		{"no ssh keys", "ls -a $HOME/.ssh 2>&1; echo rc=$?", []string{"rc=2"}, nil},
		{"no host environment", "env", []string{"HOME=/home/sandbox", "PATH=" + defaultPath}, []string{"canary-jwt-5f1e", "SANDBOXKIT_TEST"}},
		{"no privileges", "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd)' /proc/self/status", []string{"NoNewPrivs:\t1", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000"}, nil},
		{"no nested user namespace", "unshare -U true 2>&1; echo rc=$?", []string{"rc=1"}, nil},
		{"host loopback unreachable", fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>&1; echo rc=$?", port), []string{"Connection refused", "rc=1"}, nil},
		{"host processes invisible", fmt.Sprintf("ls /proc | grep -c '^[0-9]'; test -e /proc/%d; echo exists=$?; kill -9 %d 2>&1; echo kill=$?", hostSleep.Process.Pid, hostSleep.Process.Pid), []string{"exists=1", "kill=1"}, nil},
		{"symlink to /root gives nothing", "ls rootlink/ 2>&1; cat rootlink/.bashrc 2>&1; echo rc=$?", []string{"No such file or directory", "rc=1"}, nil},
		{"synthetic passwd", "id -un; cat /etc/passwd", []string{"sandbox"}, []string{me.Username, "daemon:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := sh(t, p, tt.script)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, s := range tt.want {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.reject {
				if strings.Contains(out, s) {
					t.Errorf("output has %q:\n%s", s, out)
				}
			}
		})
	}
	select {
	case <-accepted:
		t.Error("the host's 127.0.0.1 listener accepted a connection from the sandbox")
	default:
	}
	if err := hostSleep.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("host process was signalled from the sandbox: %v", err)
	}
}

func TestRunOnlyStdioDescriptors(t *testing.T) {
	requireSandbox(t)
	// A descriptor the host process holds without close-on-exec, as one
	// inherited from a shell would be.
	leak := filepath.Join(t.TempDir(), "leak")
	if err := os.WriteFile(leak, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(leak, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	out, err := sh(t, &Policy{UID: os.Getuid(), GID: os.Getgid()}, "cd /proc/self/fd && echo *")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// sh's glob reads the directory through its own descriptor, 3.
	if got := strings.TrimSpace(out); got != "0 1 2 3" && got != "0 1 2" {
		t.Errorf("descriptors inside the sandbox: %q, want only 0 1 2 (and the listing's own)", got)
	}
}

func TestRunWorkspaceCopyOnWrite(t *testing.T) {
	requireSandbox(t)
	w := testWorkspace(t)
	before := sandboxtest.Take(t, w.Lower)
	out, err := sh(t, workspacePolicy(t, w), "cat base.txt && echo changed >> base.txt && echo new > new.txt && rm rootlink && mkdir -p d/e && echo x > d/e/f")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out != "base\n" {
		t.Errorf("read %q from the lower layer, want base", out)
	}
	before.Unchanged(t, w.Lower)
	for name, want := range map[string]string{"base.txt": "base\nchanged\n", "new.txt": "new\n", "d/e/f": "x\n"} {
		got, err := os.ReadFile(filepath.Join(w.Upper, name))
		if err != nil || string(got) != want {
			t.Errorf("upper/%s = %q, %v; want %q", name, got, err, want)
		}
	}
	// The deleted symlink is a whiteout in the upper dir.
	fi, err := os.Lstat(filepath.Join(w.Upper, "rootlink"))
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Errorf("upper/rootlink: %v %v, want a whiteout", fi, err)
	}
	// A second run sees the first one's writes.
	out, err = sh(t, workspacePolicy(t, w), "cat new.txt; ls rootlink 2>&1; true")
	if err != nil || !strings.Contains(out, "new\n") || !strings.Contains(out, "No such file") {
		t.Errorf("second run: %v\n%s", err, out)
	}
}

func TestRunExitStatusAndIO(t *testing.T) {
	requireSandbox(t)
	p := &Policy{UID: os.Getuid(), GID: os.Getgid()}
	var ee *ExitError
	if _, err := sh(t, p, "exit 3"); !errors.As(err, &ee) || ee.Code != 3 {
		t.Errorf("exit 3: %v", err)
	}
	if _, err := sh(t, p, "kill -9 $$"); !errors.As(err, &ee) || ee.Code != 137 {
		t.Errorf("killed by signal 9: %v", err)
	}

	var out, errb bytes.Buffer
	c := Command(t.Context(), p, "sh", "-c", "tr a-z A-Z; echo oops >&2; echo $EXTRA; pwd")
	c.Stdin = strings.NewReader("hello\n")
	c.Stdout, c.Stderr = &out, &errb
	c.Env = []string{"EXTRA=extra-value"}
	c.Dir = "/tmp"
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "HELLO\nextra-value\n/tmp\n" || errb.String() != "oops\n" {
		t.Errorf("stdout %q stderr %q", out.String(), errb.String())
	}
	if c.State.ExitCode != 0 || c.State.Truncated {
		t.Errorf("state %+v", c.State)
	}
}

func TestRunOutputLimit(t *testing.T) {
	requireSandbox(t)
	var out bytes.Buffer
	c := Command(t.Context(), &Policy{}, "sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo done >&2")
	c.Stdout, c.Stderr = &out, &out
	c.OutputLimit = 1000
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if !c.State.Truncated {
		t.Error("State.Truncated not set")
	}
	got := out.String()
	if !strings.HasPrefix(got, strings.Repeat("a", 1000)+"\n[sandboxkit: output truncated after 1000 bytes]\n") || strings.Contains(got, "done") {
		t.Errorf("output %d bytes: %.80q…%q", len(got), got, got[max(0, len(got)-80):])
	}
}

func waitGone(t *testing.T, marker string) {
	t.Helper()
	sandboxtest.Eventually(t, 5*time.Second, func() error {
		if p := sandboxProcesses(marker); len(p) > 0 {
			return fmt.Errorf("processes still running: %v", p)
		}
		return nil
	})
}

func TestRunTimeoutKillsTree(t *testing.T) {
	requireSandbox(t)
	marker := fmt.Sprintf("marker-timeout-%d", time.Now().UnixNano())
	c := Command(t.Context(), &Policy{}, "sh", "-c", "sleep 107 & (sleep 107; echo "+marker+") & setsid sleep 107 & wait; : "+marker)
	c.Timeout = 300 * time.Millisecond
	start := time.Now()
	err := c.Run()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v to kill", d)
	}
	waitGone(t, marker)
	if n := len(sandboxProcesses("sleep\x00107")); n > 0 {
		t.Errorf("%d of the sandbox's sleep processes survived", n)
	}
}

// runChild is the child of TestRunDiesWithParent (see TestMain). With
// mode "run:MARKER" it runs a long command tagged with MARKER, says
// "ready", and waits to be killed; with "many:MARKER" it keeps starting
// such sandboxes, so that its death finds some of them half set up.
func runChild(mode string) error {
	kind, marker, _ := strings.Cut(mode, ":")
	p := &Policy{UID: os.Getuid(), GID: os.Getgid()}
	if kind == "many" {
		for i := 0; ; i++ {
			c := Command(context.Background(), p, "sh", "-c", "sleep 1000; : "+marker)
			if err := c.Start(); err != nil {
				return err
			}
			if i == 0 {
				fmt.Println("ready")
			}
		}
	}
	c := Command(context.Background(), p, "sh", "-c", "echo ready; sleep 1000; : "+marker)
	c.Stdout = os.Stdout
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

func TestRunDiesWithParent(t *testing.T) {
	requireSandbox(t)
	for _, tt := range []struct {
		name, kind string
		killAfter  time.Duration
	}{
		{"running", "run", 0},
		// Killed while starting sandbox after sandbox: some are half set
		// up, which is where bwrap alone would leave orphans.
		{"during setup", "many", 150 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			marker := fmt.Sprintf("marker-parent-%d", time.Now().UnixNano())
			child := exec.Command(os.Args[0])
			child.Env = append(os.Environ(), testChildEnv+"="+tt.kind+":"+marker)
			out, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			n, _ := out.Read(buf)
			if !strings.Contains(string(buf[:n]), "ready") {
				t.Fatalf("child: %q", buf[:n])
			}
			time.Sleep(tt.killAfter)
			if len(sandboxProcesses(marker)) == 0 {
				t.Fatal("no sandbox is running (the test would show nothing)")
			}
			child.Process.Kill()
			child.Wait()
			waitGone(t, marker)
		})
	}
}

func TestRunBadInput(t *testing.T) {
	requireSandbox(t)
	p := &Policy{}
	var stderr bytes.Buffer
	notFound := Command(t.Context(), p, "no-such-command-xyz")
	notFound.Stderr = &stderr
	if err := notFound.Run(); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing command: %v, want ErrNotFound", err)
	} else if !strings.Contains(err.Error(), "no-such-command-xyz") {
		t.Errorf("missing command error does not name it: %v", err)
	}
	if stderr.Len() > 0 {
		t.Errorf("bwrap's message reached stderr as well as the error: %q", stderr.String())
	}
	if err := Command(t.Context(), workspacePolicy(t, testWorkspace(t)), "./base.txt").Run(); !errors.Is(err, ErrNotExecutable) || errors.Is(err, ErrNotFound) {
		t.Errorf("non-executable command: %v, want ErrNotExecutable", err)
	}
	// The command's own output that looks like bwrap's is passed on.
	stderr.Reset()
	echo := Command(t.Context(), p, "sh", "-c", "echo 'bwrap: not really' >&2")
	echo.Stderr = &stderr
	if err := echo.Run(); err != nil || stderr.String() != "bwrap: not really\n" {
		t.Errorf("command printing bwrap-like text: %v, stderr %q", err, stderr.String())
	}

	w := testWorkspace(t)
	missing := *w
	missing.Lower = filepath.Join(t.TempDir(), "does-not-exist")
	if err := Command(t.Context(), workspacePolicy(t, &missing), "true").Run(); err == nil || !strings.Contains(err.Error(), "lower") {
		t.Errorf("missing lower dir: %v", err)
	}

	// An upper dir serves one sandbox at a time.
	ctx, cancel := context.WithCancel(t.Context())
	first := Command(ctx, workspacePolicy(t, w), "sleep", "5")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	err := Command(t.Context(), workspacePolicy(t, w), "true").Run()
	if !errors.Is(err, overlay.ErrInUse) {
		t.Errorf("second sandbox on a busy upper dir: %v, want ErrInUse", err)
	}
	cancel()
	first.Wait()
	if err := Command(t.Context(), workspacePolicy(t, w), "true").Run(); err != nil {
		t.Errorf("after the first sandbox ended: %v", err)
	}
}

func TestRunFailsClosed(t *testing.T) {
	requireSandbox(t)
	oldBwrap := sandboxtest.OldBwrap(t)
	fakePath := t.TempDir() // no bwrap here
	tests := []struct {
		name, bwrap, check, remedy string
	}{
		{"absent", "/nonexistent/bwrap", "bwrap", "install bubblewrap"},
		{"absent from PATH", "", "bwrap", "install bubblewrap"},
		{"too old", oldBwrap, "bwrap-version", "0.12.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bwrap == "" {
				t.Setenv("PATH", fakePath)
			}
			out := t.TempDir()
			marker := filepath.Join(out, "marker")
			p := &Policy{Bwrap: tt.bwrap, ReadWrite: []Bind{{Src: out}}}
			err := Command(t.Context(), p, "touch", marker).Run()
			var ue *UnavailableError
			if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ue) || ue.Check.Name != tt.check {
				t.Fatalf("err = %v, want ErrUnavailable from check %s", err, tt.check)
			}
			if !strings.Contains(ue.Detail(), tt.remedy) {
				t.Errorf("the error's detail lacks the remedy %q: %s", tt.remedy, ue.Detail())
			}
			// What reaches users and models: the check and what it means,
			// nothing of the host (the bwrap path, the PATH searched).
			if msg := err.Error(); !strings.HasPrefix(msg, "sandbox unavailable: "+tt.check+": ") || !strings.HasSuffix(msg, "; the server log has details") || strings.Contains(msg, "/") {
				t.Errorf("error text %q: want the check's reason and no host path", msg)
			}
			if d := UnavailableDetail(fmt.Errorf("wrapped: %w", err)); !strings.HasPrefix(d, "wrapped: "+err.Error()+" (") || !strings.Contains(d, ue.Check.Detail) {
				t.Errorf("UnavailableDetail = %q, want the text and the check's detail", d)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the command ran")
			}
		})
	}
	// The control: with the real bwrap the same command does run.
	out := t.TempDir()
	if err := Command(t.Context(), &Policy{ReadWrite: []Bind{{Src: out}}}, "touch", filepath.Join(out, "marker")).Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "marker")); err != nil {
		t.Error("control: the command did not run with a working bwrap")
	}
}

func TestDoctorReport(t *testing.T) {
	requireSandbox(t)
	r := Doctor(t.Context(), DoctorOptions{})
	want := []string{"bwrap", "bwrap-version", "bwrap-not-setuid", "userns", "proc", "overlay", "loopback", "seccomp", "seccomp-observe", "landlock"}
	if len(r.Checks) != len(want) {
		t.Fatalf("checks %+v", r.Checks)
	}
	for i, c := range r.Checks {
		if c.Name != want[i] || !c.OK {
			t.Errorf("check %d: %+v, want %s ok", i, c, want[i])
		}
	}
	if r.Err() != nil {
		t.Error(r.Err())
	}
	if r2 := Doctor(t.Context(), DoctorOptions{}); r2 != r {
		t.Error("the report is not cached")
	}
}

// A sandbox cancelled while bwrap is still setting it up must not leave
// bwrap's child behind: killed before it sets its own PDEATHSIG, bwrap's
// parent would leave the child waiting for it for ever.
func TestRunCancelDuringSetup(t *testing.T) {
	requireSandbox(t)
	marker := fmt.Sprintf("marker-cancel-%d", time.Now().UnixNano())
	for i := range 40 {
		ctx, cancel := context.WithCancel(t.Context())
		c := Command(ctx, &Policy{}, "sh", "-c", "sleep 100; : "+marker)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		// Vary the moment of the cancel across bwrap's set-up.
		time.Sleep(time.Duration(i%8) * 250 * time.Microsecond)
		cancel()
		if err := c.Wait(); !errors.Is(err, context.Canceled) {
			t.Fatalf("run %d: %v, want Canceled", i, err)
		}
	}
	waitGone(t, marker)
}
