package seccomp

import (
	"bytes"
	"context"
	"os"
	"os/exec"
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
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	if err := unix.SetsockoptTimeval(sp[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 60}); err != nil {
		t.Fatal(err)
	}
	childEnd := os.NewFile(uintptr(sp[1]), "listener socket")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestWatchReportsBeforeContinue$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), watchChildEnv+"=3")
	cmd.ExtraFiles = []*os.File{childEnd}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	childEnd.Close()
	if err != nil {
		t.Fatal(err)
	}
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sp[0], make([]byte, 1), oob, 0)
	var fds []int
	if err == nil {
		var msgs []unix.SocketControlMessage
		if msgs, err = unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
			fds, err = unix.ParseUnixRights(&msgs[0])
		}
	}
	if err != nil || len(fds) != 1 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no listener from the child: %v, %v\n%s", fds, err, out.String())
	}
	l, err := ListenerFile(fds[0])
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
	err = unix.Sendmsg(3, []byte{0}, unix.UnixRights(int(l.Fd())), nil, 0)
	l.Close()
	unix.Close(3)
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
