package config

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestLock(t *testing.T) {
	inst := Instance{Dir: t.TempDir()}
	f, err := inst.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := os.ReadFile(inst.LockFile())
	if want := strconv.Itoa(os.Getpid()) + "\n"; err != nil || string(b) != want {
		t.Fatalf("lock file %q, %v; want %q", b, err, want)
	}
	// flock(2) locks are per open file: a second Lock conflicts even in
	// this process, and names the holder.
	if g, err := inst.Lock(); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		if g != nil {
			g.Close()
		}
		t.Fatalf("second Lock = %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	f.Close()
	g, err := inst.Lock()
	if err != nil {
		t.Fatalf("Lock after the holder closed: %v", err)
	}
	g.Close()
}

// lockFsizeEnv makes the test binary, re-run by TestLockWriteFails, take
// the lock of the instance it names under a file size limit of 0.
const lockFsizeEnv = "CODUMENTOR_TEST_LOCK_FSIZE0"

// TestLockWriteFails: a lock file whose pid cannot be written fails Lock
// instead of holding a lock that names no holder.
func TestLockWriteFails(t *testing.T) {
	if dir := os.Getenv(lockFsizeEnv); dir != "" {
		// The child: writes past 0 bytes fail with EFBIG (Go ignores
		// SIGXFSZ).
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 0, Max: 0}); err != nil {
			t.Fatal(err)
		}
		f, err := Instance{Dir: dir}.Lock()
		if err == nil {
			f.Close()
			t.Fatal("Lock under a file size limit of 0: no error")
		}
		if !errors.Is(err, syscall.EFBIG) {
			t.Fatalf("Lock = %v, want EFBIG", err)
		}
		return
	}
	t.Run("pid write", func(t *testing.T) {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestLockWriteFails$", "-test.count=1")
		cmd.Env = append(os.Environ(), lockFsizeEnv+"="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	})
	t.Run("truncate", func(t *testing.T) {
		// A FIFO opens and locks like a file but cannot be truncated.
		inst := Instance{Dir: t.TempDir()}
		if err := syscall.Mkfifo(inst.LockFile(), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := inst.Lock()
		if err == nil {
			f.Close()
			t.Fatal("Lock of an untruncatable lock file: no error")
		}
		if !strings.Contains(err.Error(), filepath.Base(inst.LockFile())) {
			t.Errorf("Lock = %v, want the lock file named", err)
		}
	})
}
