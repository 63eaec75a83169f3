package daemon_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func listens(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// Item 13: scripts/run --demo-llm stopped the way a supervisor stops it
// (SIGTERM to the script), the way a terminal does (Ctrl-C: SIGINT to
// its process group, or SIGHUP when it closes), or by the server ending
// on its own, leaves neither the demo model nor the server running.
func TestRunScriptStopsDemoModel(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("as root, scripts/run sets up the system user codumentor; the suite runs as the unprivileged test user")
	}
	for _, tc := range []struct {
		name   string
		target stopTarget
		sig    syscall.Signal
	}{
		{"SIGTERM to the script", stopScript, syscall.SIGTERM},
		{"Ctrl-C", stopGroup, syscall.SIGINT},
		{"terminal closed", stopScript, syscall.SIGHUP},
		{"the server stops", stopServer, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) { runScriptAndStop(t, tc.target, tc.sig) })
	}
}

// stopTarget is what runScriptAndStop signals.
type stopTarget int

const (
	stopScript stopTarget = iota // the script's own process
	stopGroup                    // its process group, as a terminal does
	stopServer                   // the server the script started, alone
)

// childRunning returns the pid of parent's child process whose command
// line contains arg, or 0. A child is listed under the thread that
// started it: a Go parent's under any of its threads.
func childRunning(parent int, arg string) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", parent))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); pid > 0 && strings.Contains(string(cmd), arg) {
				return pid
			}
		}
	}
	return 0
}

func runScriptAndStop(t *testing.T, target stopTarget, sig syscall.Signal) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr, llmAddr := freeAddr(t), freeAddr(t)
	cmd := exec.Command(filepath.Join(root, "scripts", "run"), "--demo-llm")
	cmd.Env = append(os.Environ(), "CODUMENTOR_INSTANCE="+filepath.Join(t.TempDir(), "instance"),
		"CODUMENTOR_RUN_LISTEN="+srvAddr, "CODUMENTOR_DEMO_LLM_LISTEN="+llmAddr)
	// Its own process group, so that the test can clean up whatever the
	// script leaves behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &sandboxtest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 2 * time.Second // what it leaves running may hold the output open
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	if _, err := waitListening(out, done); err != nil {
		t.Fatalf("scripts/run: %v", err)
	}
	if !listens(llmAddr) {
		t.Fatalf("the demo model does not listen on %s:\n%s", llmAddr, out)
	}
	// It ends by saying where the web UI is.
	sandboxtest.Eventually(t, 60*time.Second, func() error {
		if want := "open http://" + srvAddr + "/ in a browser"; !strings.Contains(out.String(), want) {
			return fmt.Errorf("scripts/run did not print %q:\n%s", want, out)
		}
		return nil
	})
	switch target {
	case stopGroup:
		syscall.Kill(-cmd.Process.Pid, sig)
	case stopServer:
		srv := childRunning(cmd.Process.Pid, "\x00api\x00")
		if srv == 0 {
			t.Fatalf("no codumentor api among the script's children:\n%s", out)
		}
		syscall.Kill(srv, sig)
	default:
		cmd.Process.Signal(sig)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("scripts/run did not exit within 30 s of %v:\n%s", sig, out)
	}
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		if l, s := listens(llmAddr), listens(srvAddr); l || s {
			return fmt.Errorf("after scripts/run exited: demo model listening %v, server listening %v\n%s", l, s, out)
		}
		return nil
	})
	if !strings.Contains(out.String(), "shutting down") {
		t.Errorf("the server did not shut down gracefully:\n%s", out)
	}
}
