package sandboxkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/internal/probe"
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// errNotObserved is wrapped by Session.Observing's error when the
// session's blocklisted calls are not reported: its filter is not in
// log mode, or the listener could not be set up (the calls are then
// still let through and logged by the kernel, SECCOMP_RET_LOG).
var errNotObserved = errors.New("sandboxkit: seccomp violations are not observed")

// Violation is a blocklisted call that processes of a Session made under
// seccomp log mode, and how often.
type Violation struct {
	// Syscall is the call's name, e.g. "ptrace" (see seccomp.Call).
	Syscall string `json:"syscall"`
	// Command is the calling process's name (its comm).
	Command string `json:"command"`
	// Args shows the first three arguments of the first such call.
	Args string `json:"args"`
	// Refusal is what enforce mode would answer (seccomp.Call.Refusal):
	// EPERM breaks the program's call; ENOSYS makes C libraries fall
	// back (glibc's threads try clone3 first).
	Refusal string `json:"refusal"`
	// Count is how many times Command made the call.
	Count int64 `json:"count"`
}

// maxViolations bounds the distinct (call, command) pairs a Session
// keeps; later new pairs are counted under Syscall "(more)".
const maxViolations = 256

// observer collects a Session's violations from its listener.
type observer struct {
	err error // why nothing is observed; nil: observed

	mu    sync.Mutex
	byKey map[[2]string]int // syscall, command → index in list
	list  []Violation
	done  chan struct{}
}

// observes reports that p's filter is the log-mode blocklist: the one
// mode whose blocklisted calls run and are worth reporting.
func observes(p *Policy) bool {
	if p.Seccomp == nil {
		return false
	}
	f, err := seccomp.Load(seccomp.Log)
	return err == nil && bytes.Equal(p.Seccomp, f.Program)
}

// newObserver starts watching the listener the supervisor sent, if any.
func newObserver(p *Policy, cl *supervisor.Client) *observer {
	o := &observer{byKey: map[[2]string]int{}, done: make(chan struct{})}
	l := cl.TakeListener()
	switch {
	case !observes(p):
		o.err = fmt.Errorf("%w: the seccomp filter is not in log mode", errNotObserved)
	case l == nil:
		o.err = fmt.Errorf("%w: %s", errNotObserved, cl.NoListener())
	}
	if o.err != nil {
		if l != nil {
			l.Close()
		}
		close(o.done)
		return o
	}
	// Watch ends when the sandbox is gone: no process is left under the
	// filter.
	go func() {
		defer close(o.done)
		defer l.Close()
		seccomp.Watch(l, o.add)
	}()
	return o
}

func (o *observer) add(c seccomp.Call) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := [2]string{c.Syscall, c.Command}
	i, ok := o.byKey[k]
	if !ok {
		if len(o.list) >= maxViolations {
			k = [2]string{"(more)", ""}
			c = seccomp.Call{Syscall: "(more)"}
			i, ok = o.byKey[k]
		}
		if !ok {
			i = len(o.list)
			o.byKey[k] = i
			o.list = append(o.list, Violation{Syscall: c.Syscall, Command: c.Command, Args: c.Args, Refusal: c.Refusal})
		}
	}
	o.list[i].Count++
}

func (o *observer) snapshot() []Violation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Violation(nil), o.list...)
}

// Violations lists the blocklisted calls the session's processes made so
// far, in the order first seen, when Observing. A call the filter
// refuses (enforce mode) never runs and is never listed.
func (s *Session) Violations() []Violation {
	if s.obs == nil {
		return nil
	}
	return s.obs.snapshot()
}

// Observing is nil when the session reports its blocklisted calls
// (Violations); otherwise an error says why not.
func (s *Session) Observing() error {
	if s.obs == nil {
		return errNotObserved
	}
	return s.obs.err
}

// observeCheck is the Doctor's "seccomp-observe": whether a sandbox in
// log mode can report its blocklisted calls (Session.Violations). It
// never fails the Doctor: without a listener log mode still runs, with
// the kernel's SECCOMP_RET_LOG alone (observation fails open;
// enforcement never depends on it).
func observeCheck(ctx context.Context, bwrap string) Check {
	c := Check{Name: "seccomp-observe", OK: true}
	f, err := seccomp.Load(seccomp.Log)
	if err == nil {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cmd := Command(ctx, &Policy{Bwrap: bwrap, UID: os.Getuid(), GID: os.Getgid(), Seccomp: f.Program}, probe.ListenFlag)
		cmd.self = true
		cmd.Stdout, cmd.Stderr = &out, &out
		if err = cmd.launch(ctx); err == nil {
			err = cmd.Wait()
		}
		if err != nil {
			err = fmt.Errorf("%v: %s", err, strings.TrimSpace(out.String()))
		}
	}
	if err != nil {
		c.Warning = true
		c.Detail = "seccomp log mode runs with SECCOMP_RET_LOG only: blocklisted calls reach the kernel's audit log, not the conversation's report (" + err.Error() + ")"
		c.Remedy = "a user-notification listener needs Linux 5.7 or later; enforce mode is not affected"
		return c
	}
	c.Detail = "log mode reports blocklisted calls per sandbox (user-notification listener)"
	return c
}
