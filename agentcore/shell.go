package agentcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
)

// shellTool runs a command with sh -c in the conversation's sandbox.
type shellTool struct{ e *Engine }

func (s *shellTool) Spec() ToolSpec {
	return ToolSpec{
		Name: "shell",
		Description: "Run a command with sh -c in the conversation's sandbox, in /workspace (a copy-on-write view of the project; no network). " +
			"Each command needs the user's approval unless they allowed all. background: true starts it as a job and returns its id at once (see shell_output, shell_kill). " +
			"Secret values never enter your context by the server's doing: a command gets them in its environment. Its output is redacted of the forms the server recognises (the value, base64, base32, hex, URL and JSON escapes) before you see it, but only as a best effort, so never print a secret.",
		Parameters: schema([]string{"command"}, map[string]any{
			"command":    prop("string", "the command line, run by sh -c"),
			"background": prop("boolean", "run as a background job"),
			"cwd":        prop("string", "working directory relative to /workspace; default /workspace"),
			"timeout":    prop("integer", fmt.Sprintf("seconds the command may run before it is killed; default %d, at most %d (not for background jobs)", int(s.e.cfg.CommandTimeout.Seconds()), int(s.e.cfg.MaxCommandTimeout.Seconds()))),
		}),
	}
}

type shellArgs struct {
	Command    string
	Background bool
	Cwd        string
	Timeout    int
}

// timeout is the foreground command's time limit that a asks for.
func (s *shellTool) timeout(a shellArgs) (time.Duration, error) {
	max := s.e.cfg.MaxCommandTimeout
	switch {
	case a.Timeout == 0:
		return s.e.cfg.CommandTimeout, nil
	case a.Timeout < 0:
		return 0, errors.New("timeout is in seconds and must be positive")
	case a.Background:
		return 0, errors.New("timeout is for foreground commands; a background job runs until it ends or shell_kill")
	case time.Duration(a.Timeout) > max/time.Second:
		return 0, fmt.Errorf("timeout %d s is more than the server's maximum of %d s; send at most %d, or run it with background: true", a.Timeout, int(max.Seconds()), int(max.Seconds()))
	}
	return time.Duration(a.Timeout) * time.Second, nil
}

// Prepare checks the arguments and the secret names, so that an approval
// is only asked for a command that can run.
func (s *shellTool) Prepare(ctx context.Context, c *Call) (Action, error) {
	var a shellArgs
	if err := c.Args(&a); err != nil {
		return Action{}, err
	}
	if strings.TrimSpace(a.Command) == "" {
		return Action{}, errors.New("command is empty")
	}
	rel, err := cleanRel(a.Cwd)
	if err != nil {
		return Action{}, fmt.Errorf("cwd: %w", err)
	}
	cwd := sandboxkit.WorkspaceDir
	if host, err := s.e.isHostView(ctx, c); err != nil {
		return Action{}, err
	} else if host {
		cwd = "" // an investigation has no workspace: its cwd is under /
	}
	if rel != "" {
		cwd += "/" + rel
	} else if cwd == "" {
		cwd = "/"
	}
	if _, err := s.timeout(a); err != nil {
		return Action{}, err
	}
	if _, _, err := substituteSecrets(a.Command, c.secrets()); err != nil {
		return Action{}, err
	}
	return Action{Command: a.Command, Cwd: cwd, Background: a.Background}, nil
}

// Run executes exactly c.Action: the approved command.
func (s *shellTool) Run(ctx context.Context, c *Call) (string, error) {
	e := s.e
	if c.Action == nil {
		return "", errors.New("shell: not approved")
	}
	text, env, err := substituteSecrets(c.Action.Command, c.secrets())
	if err != nil {
		return "", err
	}
	argv := []string{"sh", "-c", text}
	// Recorded as approved, with placeholders (Config.Launching).
	ctx = withApproved(ctx, argv, []string{"sh", "-c", c.Action.Command})
	if c.Action.Background {
		var j sandboxkit.JobInfo
		err := e.startIn(ctx, c, func(ws *workspace) (err error) {
			j, err = ws.sess.StartBackground(ctx, argv, env, c.Action.Cwd)
			return err
		})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("started background job %d (pid %d in the sandbox); read its output with shell_output, stop it with shell_kill", j.ID, j.Pid), nil
	}
	var a shellArgs
	if err := c.Args(&a); err != nil {
		return "", err
	}
	timeout, err := s.timeout(a)
	if err != nil {
		return "", err
	}
	// The head and the real tail, within MaxOutput with room for the
	// status lines: all else is read, counted and dropped as it comes,
	// and kept whole (up to OutputKeep) for read_file.
	out := e.newOutput()
	kept, kerr := e.keepOutput(c)
	var w io.Writer = out
	if kerr == nil {
		w = io.MultiWriter(out, kept)
	}
	var cmd *sandboxkit.Cmd
	var seen violations
	err = e.startIn(ctx, c, func(ws *workspace) error {
		out.Reset()
		if kept != nil {
			kept.reset()
		}
		seen = violationsOf(ws.sess)
		cmd = ws.sess.Command(ctx, argv...)
		cmd.Env, cmd.Dir = env, c.Action.Cwd
		cmd.Stdout, cmd.Stderr = w, w
		cmd.Timeout = timeout
		return cmd.Start()
	})
	if err == nil {
		err = cmd.Wait()
		e.reportViolations(c, seen)
	}
	limit := ""
	if cmd != nil && cmd.State != nil && cmd.State.Limit != "" {
		msg := "sandbox limit: " + cmd.State.LimitMessage
		limit = "\n[" + msg + "]"
		e.limitHit(c, cmd.State.Limit, msg)
	}
	margin := 0
	var red *redactor
	if c.turn != nil {
		margin, red = c.turn.red.longestSpan(), c.turn.red
	}
	note := ""
	switch {
	case !out.elided():
		if kept != nil {
			kept.discard()
		}
	case kept != nil:
		note = kept.finish(red, margin)
	default:
		note = "[the whole output could not be kept: " + kerr.Error() + "]"
	}
	text = out.textNote(margin, note)
	var ee *sandboxkit.ExitError
	var le *sandboxkit.LimitError
	switch {
	case err == nil:
		return text + "[exit status 0]" + limit, nil
	case errors.As(err, &ee):
		return text + fmt.Sprintf("[exit status %d]", ee.Code) + limit, nil
	case errors.As(err, &le):
		// Stopped by the disk budget or the timeout, with a limit hit.
		return text + "[killed]" + limit, nil
	case ctx.Err() != nil:
		return text, context.Cause(ctx)
	}
	return text, err
}

// limitHit records that a command of call c hit a sandbox limit.
func (e *Engine) limitHit(c *Call, l sandboxkit.Limit, msg string) {
	t := c.turn
	if t == nil {
		return
	}
	e.emit(t.c, t.ID, t.red, t.log, EventSandboxLimit, map[string]string{"id": c.ID, "name": c.Name, "limit": string(l), "message": msg})
}

// jobTool is shell_output or shell_kill.
type jobTool struct {
	e    *Engine
	spec ToolSpec
	run  func(s *sandboxkit.Session, id int) (string, error)
}

func (j *jobTool) Spec() ToolSpec { return j.spec }

func (j *jobTool) Run(ctx context.Context, c *Call) (string, error) {
	var a struct{ Job int }
	if err := c.Args(&a); err != nil {
		return "", err
	}
	s := j.e.currentSession(c.wsKey())
	if s == nil {
		return "", fmt.Errorf("%w: %d (no background job was started in this conversation's sandbox)", sandboxkit.ErrNoJob, a.Job)
	}
	out, err := j.run(s, a.Job)
	if err == nil {
		j.e.jobLimitHit(c, s, a.Job)
	}
	return out, err
}

// jobLimitHit records, once per job, that a background job ended by a
// sandbox limit: when a job tool first shows that end.
func (e *Engine) jobLimitHit(c *Call, s *sandboxkit.Session, id int) {
	for _, j := range s.Jobs() {
		if j.ID != id || j.Limit == "" {
			continue
		}
		cv := e.conv(c.Conversation)
		key := fmt.Sprintf("%p/%d", s, id)
		cv.mu.Lock()
		seen := cv.limitSeen[key]
		if cv.limitSeen == nil {
			cv.limitSeen = map[string]bool{}
		}
		cv.limitSeen[key] = true
		cv.mu.Unlock()
		if !seen {
			e.limitHit(c, j.Limit, "sandbox limit: "+j.LimitMessage)
		}
	}
}

func jobState(s *sandboxkit.Session, id int) string {
	for _, j := range s.Jobs() {
		if j.ID == id {
			if j.Running {
				return "running"
			}
			if j.Limit != "" {
				return fmt.Sprintf("exited with status %d; sandbox limit: %s", j.ExitCode, j.LimitMessage)
			}
			return fmt.Sprintf("exited with status %d", j.ExitCode)
		}
	}
	return "unknown"
}

func (e *Engine) shellTools() []Tool {
	jobArgs := schema([]string{"job"}, map[string]any{"job": prop("integer", "the job id that shell returned")})
	return []Tool{
		&shellTool{e: e},
		&jobTool{e: e, spec: ToolSpec{
			Name:        "shell_output",
			Description: "Show the output (the last part, stdout and stderr together) and state of a background job.",
			Parameters:  jobArgs,
		}, run: func(s *sandboxkit.Session, id int) (string, error) {
			out, truncated, err := s.Output(id)
			if err != nil {
				return "", err
			}
			head := fmt.Sprintf("[job %d %s]\n", id, jobState(s, id))
			if truncated {
				head += "[earlier output dropped]\n"
			}
			return head + string(out), nil
		}},
		&jobTool{e: e, spec: ToolSpec{
			Name:        "shell_kill",
			Description: "Kill a background job and everything it started.",
			Parameters:  jobArgs,
		}, run: func(s *sandboxkit.Session, id int) (string, error) {
			if err := s.Kill(id); err != nil {
				return "", err
			}
			return fmt.Sprintf("job %d %s", id, jobState(s, id)), nil
		}},
	}
}

// secrets are the user's secrets, loaded when the turn started.
func (c *Call) secrets() map[string]string {
	if c.turn == nil {
		return nil
	}
	return c.turn.secrets
}
