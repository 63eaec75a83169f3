package agentcore

import "github.com/codumentor/codumentor/sandboxkit"

// violations is what a session reported so far, for the difference a
// command makes.
type violations struct {
	sess *sandboxkit.Session
	seen map[[2]string]int64 // syscall, command → count
}

func violationsOf(s *sandboxkit.Session) violations {
	v := violations{sess: s, seen: map[[2]string]int64{}}
	for _, x := range s.Violations() {
		v.seen[[2]string{x.Syscall, x.Command}] = x.Count
	}
	return v
}

// reportViolations emits a seccomp_violation event for each blocklisted
// call the session's processes made since seen was taken (in log mode
// they run; the event says which would be refused under enforce). A
// background job's calls show up with the next command.
func (e *Engine) reportViolations(c *Call, seen violations) {
	t := c.turn
	if t == nil || seen.sess == nil {
		return
	}
	for _, v := range seen.sess.Violations() {
		n := v.Count - seen.seen[[2]string{v.Syscall, v.Command}]
		if n <= 0 {
			continue
		}
		e.emit(t.c, t.ID, t.red, t.log, EventSeccompViolation, SeccompViolation{
			ID: c.ID, Name: c.Name, Syscall: v.Syscall, Command: v.Command, Args: v.Args, Refusal: v.Refusal, Count: n,
		})
	}
}
