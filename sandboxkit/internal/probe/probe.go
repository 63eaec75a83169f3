// Package probe holds the programs that sandboxkit's Doctor and package
// diag run inside a sandbox: the program's own binary, re-executed with
// one of the flags here (see Personality).
package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

const (
	// SeccompFlag runs the seccomp probe program (seccomp.RunProbes),
	// which writes its report to stdout as JSON.
	SeccompFlag = "--sandboxkit-seccomp-probe"
	// CallsFlag runs seccomp.ProbeCallsUnobserved: the probe program's
	// calls for an observer's test, listed as JSON on stdout.
	CallsFlag = "--sandboxkit-probe-calls"
	// ListenFlag runs the listener probe of the Doctor's
	// "seccomp-observe" check: can a sandbox stack the observing filter?
	ListenFlag = "--sandboxkit-listen-probe"
	// AbstractFlag runs the abstract-socket probe; its argument is the
	// name of the host's abstract socket to try.
	AbstractFlag = "--sandboxkit-abstract-probe"
)

// Personality runs the probe named by args[1] (os.Args) and returns its
// exit code, or reports false when args name none.
func Personality(args []string) (int, bool) {
	if len(args) < 2 {
		return 0, false
	}
	switch args[1] {
	case SeccompFlag:
		return runProbes(), true
	case CallsFlag:
		return runProbeCalls(), true
	case ListenFlag:
		return runListenProbe(), true
	case AbstractFlag:
		return runAbstractProbe(args[2:]), true
	}
	return 0, false
}

func runProbes() int {
	rep, err := seccomp.RunProbes()
	if err != nil {
		fmt.Fprintln(os.Stderr, "seccomp probe:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

func runProbeCalls() int {
	names, err := seccomp.ProbeCallsUnobserved()
	if err != nil {
		fmt.Fprintln(os.Stderr, "seccomp probe:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(names); err != nil {
		return 1
	}
	return 0
}

func runListenProbe() int {
	// As the supervisor does (see its ready).
	runtime.LockOSThread()
	l, err := seccomp.ListenThread()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	l.Close()
	fmt.Println("ok")
	return 0
}

// AbstractResult is what the abstract-socket probe found, as errno names
// ("ok" for a connection).
type AbstractResult struct {
	Host   string `json:"host"`   // connecting to the host's listener
	Inside string `json:"inside"` // connecting to one the probe listens on
}

// runAbstractProbe is the program of AbstractFlag.
func runAbstractProbe(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "abstract socket probe: want the host socket's name")
		return 2
	}
	dial := func(name string) string {
		c, err := net.Dial("unix", "@"+name)
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return unix.ErrnoName(errno)
			}
			return err.Error()
		}
		c.Close()
		return "ok"
	}
	var r AbstractResult
	r.Host = dial(args[0])
	inner := fmt.Sprintf("sandboxkit-probe-%d", os.Getpid())
	if ln, err := net.Listen("unix", "@"+inner); err != nil {
		r.Inside = "listen: " + err.Error()
	} else {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		r.Inside = dial(inner)
		ln.Close()
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}
