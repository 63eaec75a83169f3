package sandboxkit

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
)

// ErrUnavailable is the fail-closed error: isolation was asked for but
// cannot be provided here, so nothing was executed. The error returned
// is an *UnavailableError naming the failed check and its remedy.
var ErrUnavailable = errors.New("sandbox unavailable")

// ErrNotFound means the command does not exist inside the sandbox.
var ErrNotFound = errors.New("command not found in the sandbox")

// ErrNotExecutable means the command exists inside the sandbox but cannot
// be executed (no execute permission).
var ErrNotExecutable = errors.New("command not executable in the sandbox")

// ErrLimitsUnavailable means Limits.Require asked for process, memory and
// CPU limits that no delegated cgroup can enforce here; nothing ran.
var ErrLimitsUnavailable = errors.New("sandbox resource limits unavailable")

// ErrDiskReserve refuses to start a sandbox whose workspace's filesystem
// has less free space than Limits.DiskReserve: nothing was run. Deleting
// files (in a workspace, say) brings it back.
var ErrDiskReserve = errors.New("sandboxkit: the workspace's filesystem is below its free-space reserve")

// ErrLaunchRefused is wrapped by the error of a start that
// Policy.Launching refused (e.g. its audit record could not be
// written): nothing was run.
var ErrLaunchRefused = errors.New("sandboxkit: launch refused")

// ErrSessionClosed is wrapped by the errors of a Session that has ended:
// closed, idle too long, or its sandbox died. The message says which.
var ErrSessionClosed = errors.New("sandboxkit: session closed")

// ErrNoJob means Output or Kill named a job the Session does not have.
var ErrNoJob = errors.New("sandboxkit: no such background job")

// ErrTooManyJobs refuses a background job while SessionOptions.MaxJobs
// run: wait for one to end, or Kill one.
var ErrTooManyJobs = errors.New("sandboxkit: too many background jobs running")

// startErr turns the supervisor's refusal to start a command into a
// *SetupError, with the sentinel for its cause; other errors pass.
func startErr(err error) error {
	var se *supervisor.StartError
	if !errors.As(err, &se) {
		return err
	}
	e := &SetupError{Message: se.Message}
	switch se.Cause {
	case supervisor.CauseNotFound:
		e.err = ErrNotFound
	case supervisor.CauseNotExecutable:
		e.err = ErrNotExecutable
	}
	return e
}

// UnavailableError reports the Doctor check that failed.
//
// Its Error text names the check and what it means, and nothing of the
// host: it reaches users and models, and Check.Detail names host paths
// (the configured bwrap, the workspace base dir) and raw OS errors. The
// whole of it, for a log or an administrator, is Detail.
type UnavailableError struct {
	Check Check
	err   error // the underlying cause, e.g. seccomp.ErrNoFilter
}

func (e *UnavailableError) Error() string {
	reason := checkReasons[e.Check.Name]
	if reason == "" {
		reason = "a pre-flight check failed"
	}
	return "sandbox unavailable: " + e.Check.Name + ": " + reason + "; the server log has details"
}

// Detail is the whole report, for a log or an administrator: what the
// check found (host paths and OS errors included) and the remedy.
func (e *UnavailableError) Detail() string {
	s := "sandbox unavailable: " + e.Check.Name + ": " + e.Check.Detail
	if e.Check.Remedy != "" {
		s += "; fix: " + e.Check.Remedy
	}
	return s
}

// UnavailableDetail is err's text with the Detail of the *UnavailableError
// it wraps, if any, added: what a log should keep of a fail-closed error.
func UnavailableDetail(err error) string {
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		return err.Error()
	}
	return err.Error() + " (" + ue.Detail() + ")"
}

// checkReasons say what a failed Doctor check means, naming nothing of
// the host.
var checkReasons = map[string]string{
	"bwrap":            "bubblewrap (bwrap) was not found",
	"bwrap-version":    "the installed bubblewrap is missing or older than " + minBwrapVersion,
	"bwrap-not-setuid": "the installed bubblewrap cannot be used (setuid root, or unreadable)",
	"userns":           "unprivileged user namespaces are not available on this host",
	"proc":             "a fresh /proc cannot be mounted in the sandbox",
	"overlay":          "the copy-on-write workspace overlay does not work on the workspace filesystem",
	"loopback":         "loopback does not come up in a new network namespace",
	"seccomp":          "the seccomp filter cannot be loaded",
	"limits":           "the required process, memory and CPU limits cannot be enforced",
	"main":             "the program cannot start sandboxes: call sandboxkit.Main() first in main",
}

// Is reports ErrUnavailable, so callers test errors.Is(err, ErrUnavailable).
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the underlying cause, if any (seccomp.ErrNoFilter for a
// missing or damaged filter).
func (e *UnavailableError) Unwrap() error { return e.err }

// seccompUnavailable is the fail-closed error for a filter that was
// asked for and cannot be loaded.
func seccompUnavailable(err error) error {
	return &UnavailableError{Check: Check{Name: "seccomp", Detail: err.Error(), Remedy: seccompRemedy}, err: err}
}

const seccompRemedy = "rebuild the program from an unmodified source tree (go generate ./... in sandboxkit restores the filter blobs), or set the seccomp mode to off to run without a filter"

// SetupError means bwrap failed before the command started (a mount
// failed, the command was not found, ...). Nothing of the command ran.
type SetupError struct {
	// Message is what bwrap printed, e.g. "bwrap: execvp foo: No such file or directory".
	Message string
	err     error
}

func (e *SetupError) Error() string { return "sandbox setup failed: " + e.Message }

// Unwrap returns ErrNotFound when the command was not found, and
// ErrNotExecutable when it could not be executed.
func (e *SetupError) Unwrap() error { return e.err }

// ExitError reports a command that ran and exited with a non-zero status.
type ExitError struct {
	// Code is the exit status; 128+N when the command died of signal N.
	Code int
}

func (e *ExitError) Error() string {
	if e.Code > 128 {
		return "sandboxed command killed by signal " + strconv.Itoa(e.Code-128)
	}
	return fmt.Sprintf("sandboxed command exited with status %d", e.Code)
}
