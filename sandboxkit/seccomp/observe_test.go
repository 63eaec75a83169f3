package seccomp

import (
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// watchChildEnv makes the test binary the observed process of
// TestWatchReportsBeforeContinue.
const watchChildEnv = "SECCOMP_TEST_WATCH_CHILD"

// A call is reported before its caller continues: a command that ends
// right after a blocklisted call must already be counted when its Wait
// returns (a session's report per command is read then). The report
// here is slow on purpose; had the call continued first, the child would
// have exited while the report was still sleeping.
func TestWatchReportsBeforeContinue(t *testing.T) {
	if os.Getenv(watchChildEnv) == "1" {
		watchChild()
		return
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	host, child := os.NewFile(uintptr(pair[0]), "host"), os.NewFile(uintptr(pair[1]), "child")
	defer host.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchReportsBeforeContinue$")
	cmd.Env = append(os.Environ(), watchChildEnv+"=1")
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	defer cmd.Process.Kill()

	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(pair[0], buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("no listener from the child: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("no listener from the child: %v", err)
	}
	l, err := ListenerFile(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	var mu sync.Mutex
	var calls []string
	go Watch(l, func(c Call) {
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		calls = append(calls, c.Syscall)
		mu.Unlock()
	})
	if _, err := host.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(calls, "acct") {
		t.Fatalf("the child's acct call was not reported by the time it ended: %q", calls)
	}
}

// watchChild installs the observing filter, hands its listener to the
// test over descriptor 3, waits for the go-ahead, makes one blocklisted
// call and exits.
func watchChild() {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		os.Exit(2)
	}
	l, err := Listen()
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(3)
	}
	if err := unix.Sendmsg(3, []byte{0}, unix.UnixRights(int(l.Fd())), nil, 0); err != nil {
		os.Exit(4)
	}
	l.Close()
	var b [1]byte
	if _, err := unix.Read(3, b[:]); err != nil {
		os.Exit(5)
	}
	unix.Syscall(unix.SYS_ACCT, 0, 0, 0) // refused or not: only its report matters
	os.Exit(0)
}
