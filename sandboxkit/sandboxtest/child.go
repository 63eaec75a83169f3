package sandboxtest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// StartChild runs the test named test again, alone, in a child process of
// this test binary, with env=3 in its environment: descriptor 3 is a
// socket back to this process, on which the child sends one descriptor
// with SendToParent (a seccomp listener for a filter the child installs
// on itself, which the parent must serve: a process serving its own
// would wait on itself). StartChild returns the running child, its
// output and the descriptor; the child is killed after timeout.
func StartChild(t testing.TB, test, env string, timeout time.Duration) (cmd *exec.Cmd, out *Buffer, fd int) {
	t.Helper()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	if err := unix.SetsockoptTimeval(sp[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 60}); err != nil {
		t.Fatal(err)
	}
	childEnd := os.NewFile(uintptr(sp[1]), "parent socket")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"=3")
	cmd.ExtraFiles = []*os.File{childEnd}
	out = &Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
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
		t.Fatalf("no descriptor from the child: %v, %v\n%s", fds, err, out.String())
	}
	return cmd, out, fds[0]
}

// SendToParent, in a child StartChild started, sends fd to the parent
// and closes the socket to it.
func SendToParent(fd int) error {
	defer unix.Close(3)
	return unix.Sendmsg(3, []byte{0}, unix.UnixRights(fd), nil, 0)
}
