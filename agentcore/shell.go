package agentcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
)

// shellTool runs a command with sh -c in the conversation's sandbox.
type shellTool struct {
	e    *Engine
	spec ToolSpec // made once: it depends only on the configuration
}

func (s *shellTool) Spec() ToolSpec { return s.spec }

func (s *shellTool) makeSpec() ToolSpec {
	return ToolSpec{
		Name: "shell",
		Description: "Run a command with sh -c in the conversation's sandbox, in /workspace (a copy-on-write view of the project; no network). " +
			"Each command needs the user's approval unless they allowed all. background: true starts it as a job and returns its id at once (see shell_output, shell_kill). " +
			"Long output is shown as its start and its real end; the whole of it is kept, and the result names the path to page it with read_file. " +
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
		// Its whole output is kept too, and finished once it ends.
		kept, kerr := e.keepOutput(c, true)
		var tee io.Writer
		if kerr == nil {
			tee = kept
		}
		var j sandboxkit.JobInfo
		var sess *sandboxkit.Session
		err := e.startIn(ctx, c, func(ws *workspace) (err error) {
			j, err = ws.sess.StartBackgroundTee(ctx, argv, env, c.Action.Cwd, tee)
			sess = ws.sess
			return err
		})
		if err != nil {
			if kept != nil {
				kept.discard()
			}
			return "", err
		}
		if kept != nil {
			e.keepJob(c, sess, j.ID, kept)
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
	kept, kerr := e.keepOutput(c, false)
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
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return text + fmt.Sprintf("[killed: it ran longer than its timeout of %v; send a larger timeout, or run it with background: true]", timeout) + limit, nil
	case ctx.Err() != nil:
		return text, context.Cause(ctx)
	}
	return text, err
}

// limitHit records that a command of call c hit a sandbox limit.
func (e *Engine) limitHit(c *Call, l string, msg string) {
	t := c.turn
	if t == nil {
		return
	}
	e.emit(t.c, t.ID, t.red, t.log, EventSandboxLimit, SandboxLimit{ID: c.ID, Name: c.Name, Limit: l, Message: msg})
}

// jobTool is shell_output or shell_kill.
type jobTool struct {
	e    *Engine
	spec ToolSpec
	run  func(ctx context.Context, c *Call, s *sandboxkit.Session, a jobArgs) (string, error)
}

type jobArgs struct {
	Job  int
	Wait int
}

// maxJobWait bounds shell_output's wait.
const maxJobWait = 600

func (j *jobTool) Spec() ToolSpec { return j.spec }

func (j *jobTool) Run(ctx context.Context, c *Call) (string, error) {
	var a jobArgs
	if err := c.Args(&a); err != nil {
		return "", err
	}
	if a.Wait < 0 || a.Wait > maxJobWait {
		return "", fmt.Errorf("wait is in seconds, from 0 to %d", maxJobWait)
	}
	s := j.e.currentSession(c.wsKey())
	if s == nil {
		return "", fmt.Errorf("%w: %d (no background job was started in this conversation's sandbox)", sandboxkit.ErrNoJob, a.Job)
	}
	out, err := j.run(ctx, c, s, a)
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
	killArgs := schema([]string{"job"}, map[string]any{"job": prop("integer", "the job id that shell returned")})
	sh := &shellTool{e: e}
	sh.spec = sh.makeSpec()
	return []Tool{
		sh,
		&jobTool{e: e, spec: ToolSpec{
			Name:        "shell_output",
			Description: "Show the state and output (stdout and stderr together: its start and its real end, the middle elided if long) of a background job. wait: N waits up to N seconds for it to end or print something new since you last looked.",
			Parameters: schema([]string{"job"}, map[string]any{
				"job":  prop("integer", "the job id that shell returned"),
				"wait": prop("integer", fmt.Sprintf("seconds to wait for the job to end or print more, 0 to %d; default 0 (answer at once)", maxJobWait)),
			}),
		}, run: func(ctx context.Context, c *Call, s *sandboxkit.Session, a jobArgs) (string, error) {
			return e.jobOutput(ctx, c, s, a)
		}},
		&jobTool{e: e, spec: ToolSpec{
			Name:        "shell_kill",
			Description: "Kill a background job and everything it started.",
			Parameters:  killArgs,
		}, run: func(_ context.Context, _ *Call, s *sandboxkit.Session, a jobArgs) (string, error) {
			if err := s.Kill(a.Job); err != nil {
				return "", err
			}
			return fmt.Sprintf("job %d %s", a.Job, jobState(s, a.Job)), nil
		}},
	}
}

// jobOutput is shell_output: the job's state and the head and real tail
// of its output, after waiting up to a.Wait seconds for it to end or to
// print more than when this conversation last looked.
func (e *Engine) jobOutput(ctx context.Context, c *Call, s *sandboxkit.Session, a jobArgs) (string, error) {
	cv := e.conv(c.Conversation)
	key := fmt.Sprintf("%p/%d", s, a.Job)
	cv.mu.Lock()
	seen := cv.jobSeen[key]
	cv.mu.Unlock()
	if a.Wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(a.Wait)*time.Second)
		err := s.WaitJob(wctx, a.Job, seen)
		cancel()
		if err != nil && ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		if errors.Is(err, sandboxkit.ErrNoJob) {
			return "", err
		}
	}
	o, err := s.JobOutput(a.Job)
	if err != nil {
		return "", err
	}
	cv.mu.Lock()
	if cv.jobSeen == nil {
		cv.jobSeen = map[string]int64{}
	}
	cv.jobSeen[key] = o.Total
	cv.mu.Unlock()
	out := e.newOutput()
	note := ""
	if !out.fits(o.Total) {
		cv.mu.Lock()
		jk := cv.jobKept[key]
		cv.mu.Unlock()
		if jk != nil && !slices.ContainsFunc(s.Jobs(), func(i sandboxkit.JobInfo) bool { return i.ID == a.Job && i.Running }) {
			// Ended: its kept output is being finished.
			select {
			case <-jk.done:
			case <-ctx.Done():
				return "", context.Cause(ctx)
			}
		}
		if jk != nil {
			note = fmt.Sprintf("[whole output: read_file path %q once the job has ended]", jk.path)
			select {
			case <-jk.done:
				note = jk.note
			default:
			}
		}
	}
	out.Write(o.Head)
	out.Skip(o.Dropped)
	if o.Dropped > 0 {
		out.Write(o.Tail)
	} else if over := int64(len(o.Head)+len(o.Tail)) - o.Total; over < int64(len(o.Tail)) {
		// Head and Tail overlap: the tail's part after the head.
		out.Write(o.Tail[max(0, over):])
	}
	margin := 0
	if c.turn != nil {
		margin = c.turn.red.longestSpan()
	}
	head := fmt.Sprintf("[job %d %s; %s bytes of output]\n", a.Job, jobState(s, a.Job), commas(o.Total))
	if o.Dropped > 0 {
		head += fmt.Sprintf("[%s bytes from its middle were not kept]\n", commas(o.Dropped))
	}
	return head + out.textNote(margin, note), nil
}

// secrets are the user's secrets, loaded when the turn started.
func (c *Call) secrets() map[string]string {
	if c.turn == nil {
		return nil
	}
	return c.turn.secrets
}
