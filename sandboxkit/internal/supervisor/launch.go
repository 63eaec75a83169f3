package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The launcher is an OS thread that starts the spawner (spawner.go) and
// never exits; the spawner and the launcher are the process-wide state.
//
// The Pdeathsig we set on the spawner fires when the *thread* that forked
// it exits, not the process (golang/go#27505). Go exits threads at will
// (a goroutine that ends while locked to its thread takes the thread with
// it), which would kill every sandbox at random. Forking from a thread
// that lives as long as the process makes "the parent died" mean exactly
// "the server died".
var launcher struct {
	once sync.Once
	reqs chan launchReq
}

type launchReq struct {
	cmd  *exec.Cmd
	done chan error
}

// startProcess starts cmd from the launcher thread, to die with this
// process.
func startProcess(cmd *exec.Cmd) error {
	launcher.once.Do(func() {
		launcher.reqs = make(chan launchReq)
		go launchLoop(launcher.reqs)
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	launcher.reqs <- launchReq{cmd, done}
	return <-done
}

func launchLoop(reqs chan launchReq) {
	// Never unlocked: the goroutine, and so the thread, lives as long as
	// the process.
	runtime.LockOSThread()
	for r := range reqs {
		r.done <- closeInherited(r.cmd)
	}
}

// closeInherited marks every descriptor above stderr close-on-exec, then
// starts cmd. Go opens its own files close-on-exec, but a process can
// inherit open descriptors from whoever started it (a shell, a service
// manager), and those would reach the spawner, bwrap and the sandboxed
// command. The descriptors in cmd.ExtraFiles are dup'ed into the child
// after the fork, which clears the flag on the copies.
func closeInherited(cmd *exec.Cmd) error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("sandboxkit: cannot mark inherited descriptors close-on-exec (close_range needs Linux 5.11): %w", err)
	}
	return cmd.Start()
}

// memFile returns a sealed in-memory file holding data, positioned at 0,
// for bwrap to read from an inherited descriptor.
func memFile(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("sandboxkit-"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("sandboxkit: memfd for %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandboxkit: memfd for %s: %w", name, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	// Nothing can change what bwrap will read.
	_, err = unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// MemFiles returns data as sealed memfds, in order, for bwrap to read
// from inherited descriptors.
func MemFiles(data [][]byte) ([]*os.File, error) {
	var files []*os.File
	for i, data := range data {
		f, err := memFile(fmt.Sprintf("file%d", i), data)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
