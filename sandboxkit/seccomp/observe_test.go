package seccomp

import (
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// watchChildEnv runs TestWatchReportsBeforeContinue's child: it sends
// its parent a listener for its own observing filter on the socket at
// this descriptor, then calls unshare(0) (blocklisted, harmless) and
// sleeps, watchCalls times.
const watchChildEnv = "SECCOMP_TEST_WATCH_CHILD"

// Watch reports a call while the caller still waits for it, not after
// letting it continue: a command that ends with a blocklisted call has
// it in its report by the time it has exited.
func TestWatchReportsBeforeContinue(t *testing.T) {
	if fd := os.Getenv(watchChildEnv); fd != "" {
		watchChild(t)
		return
	}
	cmd, out, fd := sandboxtest.StartChild(t, "TestWatchReportsBeforeContinue", watchChildEnv, 2*time.Minute)
	l, err := ListenerFile(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	var in []string // the call the unshare caller is in, at each report
	go Watch(l, func(c Call) {
		if c.Syscall != "unshare" {
			return
		}
		// Long enough for a caller let go to be in its next call.
		time.Sleep(20 * time.Millisecond)
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(c.Pid) + "/syscall")
		nr, _, _ := strings.Cut(string(b), " ")
		mu.Lock()
		defer mu.Unlock()
		in = append(in, nr)
	})
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "--- PASS: TestWatchReportsBeforeContinue") {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(in) != watchCalls {
		t.Fatalf("%d unshare calls reported, the child made %d", len(in), watchCalls)
	}
	for i, nr := range in {
		if nr != strconv.Itoa(unix.SYS_UNSHARE) {
			t.Fatalf("unshare call %d reported after it went on (the caller is in system call %q)", i+1, nr)
		}
	}
}

// watchCalls is how many unshare(0) calls the child makes, each
// followed by a sleep.
const watchCalls = 5

func watchChild(t *testing.T) {
	runtime.LockOSThread()
	err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	var l *os.File
	if err == nil {
		l, err = Listen()
	}
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("listener: %v", err)
	}
	err = sandboxtest.SendToParent(int(l.Fd()))
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	for range watchCalls {
		if err := unix.Unshare(0); err != nil {
			t.Fatalf("unshare(0): %v", err)
		}
		unix.Nanosleep(&unix.Timespec{Nsec: 100e6}, nil)
	}
	runtime.UnlockOSThread()
}
