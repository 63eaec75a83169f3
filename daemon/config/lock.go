package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked refuses a second server on an instance that one already
// serves: two would both append to the same conversations, and the
// second's crash recovery would fail the first's live turns.
var ErrLocked = errors.New("the instance is in use by another codumentor api")

// LockFile is the instance's lock file: <instance>/lock.
func (i Instance) LockFile() string { return filepath.Join(i.Dir, "lock") }

// Lock takes the instance's exclusive lock without waiting and writes
// this process's pid into the lock file. The lock is flock(2) on an open
// file: it is held until the returned file is closed or the process
// ends, also by kill -9, so a crashed server never leaves a stale lock.
// When another process holds it, Lock fails with an error wrapping
// ErrLocked that names the holder's pid.
func (i Instance) Lock() (*os.File, error) {
	f, err := os.OpenFile(i.LockFile(), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the instance lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "unknown pid"
		if b, rerr := io.ReadAll(io.LimitReader(f, 32)); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = "pid " + strconv.Itoa(pid)
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s holds %s): stop that server first, or give this one another --instance", ErrLocked, holder, i.LockFile())
		}
		return nil, fmt.Errorf("locking %s: %w", i.LockFile(), err)
	}
	// A lock naming no pid, or a stale one, would misname the holder to
	// the next server that tries.
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("writing this server's pid into %s: %w", i.LockFile(), err)
	}
	return f, nil
}
