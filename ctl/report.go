package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/codumentor/codumentor/sandboxkit"
)

// runReported is sandbox exec --report: the command runs in a Session,
// whose supervisor observes the seccomp blocklist in log mode, and the
// blocklisted calls it made are listed on stderr afterwards: what
// sandbox.seccomp enforce would refuse.
func runReported(ctx context.Context, cmd *cli.Command, p *sandboxkit.Policy, argv []string, run *execRun) error {
	sess, err := sandboxkit.StartSession(ctx, p, sandboxkit.SessionOptions{})
	if err != nil {
		run.cleanup(false)
		return execError(ctx, nil, err)
	}
	c := sess.Command(ctx, argv...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.Root().Writer, cmd.Root().ErrWriter
	c.Timeout = cmd.Duration("timeout")
	if err := c.Start(); err != nil {
		sess.Close()
		run.cleanup(false)
		return execError(ctx, c, err)
	}
	if run.tmpParent != "" {
		fmt.Fprintf(cmd.Root().ErrWriter, "%s: writes land in %s\n", progName, run.upper)
	}
	err = c.Wait()
	report(cmd.Root().ErrWriter, sess)
	sess.Close()
	var setup *sandboxkit.SetupError
	run.cleanup(!errors.As(err, &setup))
	return execError(ctx, c, err)
}

// report lists the session's seccomp violations, or says why there is no
// list.
func report(w io.Writer, sess *sandboxkit.Session) {
	if err := sess.Observing(); err != nil {
		fmt.Fprintf(w, "%s: seccomp report: %v\n", progName, err)
		return
	}
	vs := sess.Violations()
	if len(vs) == 0 {
		fmt.Fprintf(w, "%s: seccomp report: no blocklisted call was made\n", progName)
		return
	}
	fmt.Fprintf(w, "%s: seccomp report: %d blocklisted call(s) ran in log mode; enforce would refuse them:\n", progName, len(vs))
	for _, v := range vs {
		fmt.Fprintf(w, "  %s by %s, %d time(s), first args %s (enforce: %s)\n", v.Syscall, v.Command, v.Count, v.Args, v.Refusal)
	}
}
