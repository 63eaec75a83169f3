// Package externalagent lets the model hand a task to an external coding
// agent CLI (the external_agent tool). The CLI is untrusted code working
// on model-written input: at tier 1 it runs in the conversation's
// sandbox, over the same copy-on-write workspace as the shell tool, with
// no network unless its egress allow-list is non-empty. Tier 0 runs it on
// the host, unconfined: only because the operator wrote so, and while
// workspace isolation is enabled only with
// allow_unsandboxed_external_agents too; every start logs a warning. It
// works in a private copy of the conversation's workspace, whose changes
// are brought back into the conversation's layer when it ends
// (agentcore.Engine.RunOnCopy): never in the project tree that every
// conversation on the commit shares.
//
// Every call is an executing tool call: it waits for the user's approval
// (the engine's approval gate), which shows the exact command line.
package externalagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// Sandbox tiers of Config.SandboxTier.
const (
	TierAuto = "auto" // tier 1 when workspace isolation is enabled, else 0
	Tier1    = "1"    // in the conversation's sandbox
	Tier0    = "0"    // on the host, unconfined
)

// ErrUnsandboxed refuses a tier-0 agent while workspace isolation is
// enabled and allow_unsandboxed_external_agents is not set.
var ErrUnsandboxed = errors.New("an unsandboxed (tier 0) external agent while workspace isolation is enabled")

// Config is one entry of config.yaml's external_agents.
type Config struct {
	// Name is what the model calls the agent (A-Z a-z 0-9 _ -).
	Name string `yaml:"name"`
	// Command is the agent's program: a name looked up on the sandbox's
	// PATH (/usr/local/bin:/usr/bin:/bin), or an absolute host path; one
	// outside /usr is shown read-only in the sandbox.
	Command string `yaml:"command"`
	// Args come before the task. An argument "{task}" is replaced by the
	// task; without one, the task is the last argument.
	Args []string `yaml:"args"`
	// Env is added to the agent's minimal environment.
	Env map[string]string `yaml:"env"`
	// EgressAllowlist lists the destinations a sandboxed agent may reach
	// (HOST, *.DOMAIN or an IP literal, each optionally :PORT), through
	// the egress proxy: its sandbox keeps its own network, with only
	// loopback. Empty means no network. A tier-0 agent has the host's
	// network whatever the list says.
	EgressAllowlist []string `yaml:"egress_allowlist"`
	// SandboxTier is auto (default), 1 or 0.
	SandboxTier string `yaml:"sandbox_tier"`
	// Timeout bounds one run (default 20 min; the turn's own limit
	// still applies).
	Timeout time.Duration `yaml:"timeout"`
}

// programDir is where a host program outside /usr is shown in the
// sandbox: programDir/<agent name>/<base name>.
const programDir = "/opt/codumentor/agents"

// DefaultTimeout bounds a run when Config.Timeout is zero.
const DefaultTimeout = 20 * time.Minute

// maxTask bounds a task's bytes.
const maxTask = 64 << 10

// agentName is what an agent may be called. The patterns are compiled on
// first use: a server without the plugin never builds them.
var agentName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`) })

// envKey is a portable environment variable name.
var envKey = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// Validate checks agents as config.yaml's external_agents, naming the
// key at fault.
func Validate(agents []Config) error {
	var errs []error
	seen := map[string]bool{}
	for i, a := range agents {
		key := fmt.Sprintf("external_agents[%d]", i)
		switch {
		case !agentName().MatchString(a.Name):
			errs = append(errs, fmt.Errorf("%s.name: %q must be 1-64 of A-Z a-z 0-9 _ -", key, a.Name))
		case seen[a.Name]:
			errs = append(errs, fmt.Errorf("%s.name: %q is used twice", key, a.Name))
		}
		seen[a.Name] = true
		if a.Command == "" || strings.ContainsRune(a.Command, 0) || (strings.Contains(a.Command, "/") && !path.IsAbs(a.Command)) {
			errs = append(errs, fmt.Errorf("%s.command: %q must be a program name or an absolute path", key, a.Command))
		}
		for k, v := range a.Env {
			if !envKey().MatchString(k) || strings.ContainsRune(v, 0) {
				errs = append(errs, fmt.Errorf("%s.env: %q is not a valid variable", key, k))
			}
		}
		switch a.SandboxTier {
		case "", TierAuto, Tier1, Tier0:
		default:
			errs = append(errs, fmt.Errorf("%s.sandbox_tier: %q is not auto, 1 or 0", key, a.SandboxTier))
		}
		if a.Timeout < 0 {
			errs = append(errs, fmt.Errorf("%s.timeout must not be negative", key))
		}
		if err := egress.ParseAllow(a.EgressAllowlist); err != nil {
			errs = append(errs, fmt.Errorf("%s.egress_allowlist: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// sandboxed reports whether a runs at tier 1.
func (a Config) sandboxed(isolation bool) bool {
	switch a.SandboxTier {
	case Tier1:
		return true
	case Tier0:
		return false
	}
	return isolation
}

// inside is a's program as the sandbox names it.
func (a Config) inside() string {
	if !path.IsAbs(a.Command) || strings.HasPrefix(path.Clean(a.Command), "/usr/") {
		return a.Command
	}
	return path.Join(programDir, a.Name, path.Base(a.Command))
}

// Programs are the read-only binds the conversation sandboxes need for
// agents' programs outside /usr (agentcore.Config.Programs).
func Programs(agents []Config, isolation bool) []sandboxkit.Bind {
	var out []sandboxkit.Bind
	for _, a := range agents {
		if a.sandboxed(isolation) && a.inside() != a.Command {
			out = append(out, sandboxkit.Bind{Src: a.Command, Dst: a.inside()})
		}
	}
	return out
}

// Options configure New.
type Options struct {
	Agents []Config
	// Isolation says that workspace isolation is enabled.
	Isolation bool
	// AllowUnsandboxed is allow_unsandboxed_external_agents: tier 0
	// while isolation is enabled.
	AllowUnsandboxed bool
	// Engine runs tier-1 agents in conversations' workspaces, and gives
	// tier-0 agents their copy of one; its Config.Programs must hold
	// Programs(Agents, Isolation).
	Engine *agentcore.Engine
	// Logger may be nil.
	Logger *slog.Logger
}

// Tool is the external_agent tool (an agentcore.ExecTool).
type Tool struct {
	o      Options
	agents map[string]Config
	log    *slog.Logger
}

// New checks the agents and returns the tool. A tier-0 agent while
// isolation is enabled, without AllowUnsandboxed, is an error wrapping
// ErrUnsandboxed naming the setting: the server refuses to start.
func New(o Options) (*Tool, error) {
	if err := Validate(o.Agents); err != nil {
		return nil, err
	}
	if o.Engine == nil {
		return nil, errors.New("externalagent: Options.Engine is required")
	}
	t := &Tool{o: o, agents: map[string]Config{}, log: o.Logger}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	for i, a := range o.Agents {
		if !a.sandboxed(o.Isolation) && o.Isolation && !o.AllowUnsandboxed {
			return nil, fmt.Errorf("external_agents[%d] (%s): %w: set allow_unsandboxed_external_agents: true to run it unconfined on the host, or sandbox_tier: auto (or 1) to sandbox it", i, a.Name, ErrUnsandboxed)
		}
		if path.IsAbs(a.Command) {
			if fi, err := os.Stat(a.Command); err != nil || fi.IsDir() {
				return nil, fmt.Errorf("external_agents[%d].command: %s is not a program on this host", i, a.Command)
			}
		}
		t.warn(a)
		t.agents[a.Name] = a
	}
	return t, nil
}

// warn logs what a run of a opens: logged at start and at each run.
func (t *Tool) warn(a Config) {
	switch {
	case !a.sandboxed(t.o.Isolation):
		t.log.Warn("external agent runs UNSANDBOXED (sandbox_tier 0): it has the server user's files, network and credentials", "agent", a.Name, "isolation", t.o.Isolation)
	}
}

// Spec implements agentcore.Tool.
func (t *Tool) Spec() agentcore.ToolSpec {
	names := slices.Sorted(maps.Keys(t.agents))
	return agentcore.ToolSpec{
		Name: "external_agent",
		Description: "Hand a coding task to an external coding agent, which works in this conversation's workspace (its edits appear in the workspace diff) and prints a report. " +
			"Each run needs the user's approval. Agents: " + strings.Join(names, ", ") + ".",
		Parameters: []byte(`{"type":"object","properties":{"agent":{"type":"string","enum":` + jsonList(names) + `,"description":"which agent"},"task":{"type":"string","description":"what the agent should do, in plain words"}},"required":["agent","task"],"additionalProperties":false}`),
	}
}

func jsonList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return "[" + strings.Join(q, ",") + "]"
}

type args struct {
	Agent string
	Task  string
}

// run is one prepared run: the agent and its argv.
func (t *Tool) prepare(c *agentcore.Call) (Config, []string, error) {
	var a args
	if err := c.Args(&a); err != nil {
		return Config{}, nil, err
	}
	ag, ok := t.agents[a.Agent]
	if !ok {
		return Config{}, nil, fmt.Errorf("unknown agent %q; the agents are: %s", a.Agent, strings.Join(slices.Sorted(maps.Keys(t.agents)), ", "))
	}
	if strings.TrimSpace(a.Task) == "" {
		return Config{}, nil, errors.New("task is empty")
	}
	if len(a.Task) > maxTask || strings.ContainsRune(a.Task, 0) {
		return Config{}, nil, fmt.Errorf("task must be at most %d bytes of text", maxTask)
	}
	prog := ag.Command
	if ag.sandboxed(t.o.Isolation) {
		prog = ag.inside()
	}
	argv := []string{prog}
	placed := false
	for _, s := range ag.Args {
		if s == "{task}" {
			s, placed = a.Task, true
		}
		argv = append(argv, s)
	}
	if !placed {
		argv = append(argv, a.Task)
	}
	return ag, argv, nil
}

// command is what the approval shows: the agent, its tier and the exact
// command line.
func (t *Tool) command(ag Config, argv []string) string {
	where := "sandboxed"
	switch {
	case !ag.sandboxed(t.o.Isolation):
		where = "UNSANDBOXED on the host"
	case len(ag.EgressAllowlist) > 0:
		where = "sandboxed, network only to " + strings.Join(ag.EgressAllowlist, ", ")
	}
	q := make([]string, len(argv))
	for i, s := range argv {
		q[i] = quote(s)
	}
	return fmt.Sprintf("external agent %s (%s): %s", ag.Name, where, strings.Join(q, " "))
}

// quote writes s as one sh word.
func quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Prepare implements agentcore.ExecTool: it names the exact command.
func (t *Tool) Prepare(ctx context.Context, c *agentcore.Call) (agentcore.Action, error) {
	ag, argv, err := t.prepare(c)
	if err != nil {
		return agentcore.Action{}, err
	}
	cwd := sandboxkit.WorkspaceDir
	if !ag.sandboxed(t.o.Isolation) {
		cwd = "(a private copy of the workspace on the host)"
	}
	return agentcore.Action{Command: t.command(ag, argv), Cwd: cwd}, nil
}

// Run implements agentcore.Tool: it runs the approved command.
func (t *Tool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	ag, argv, err := t.prepare(c)
	if err != nil {
		return "", err
	}
	if c.Action == nil || c.Action.Command != t.command(ag, argv) {
		return "", errors.New("external_agent: not approved")
	}
	t.warn(ag)
	timeout := ag.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	var env []string
	for _, k := range slices.Sorted(maps.Keys(ag.Env)) {
		env = append(env, k+"="+ag.Env[k])
	}
	var out bytes.Buffer
	stream := t.o.Engine.StreamOutput(c)
	w := io.MultiWriter(&out, stream)
	if ag.sandboxed(t.o.Isolation) {
		err = t.o.Engine.RunInWorkspace(ctx, c, agentcore.WorkspaceCommand{
			Argv: argv, Env: env, Egress: ag.EgressAllowlist, Output: w, Timeout: timeout,
		})
	} else {
		err = t.runHost(ctx, c, argv, env, w, timeout)
	}
	stream.Close()
	var ee *sandboxkit.ExitError
	var le *sandboxkit.LimitError
	var he *exec.ExitError
	switch {
	case errors.Is(err, egress.ErrProxyDown):
		// Fail closed, and say so: the agent lost its way out.
		return out.String(), err
	case err == nil:
		return out.String() + "[exit status 0]", nil
	case errors.As(err, &ee):
		return out.String() + fmt.Sprintf("[exit status %d]", ee.Code), nil
	case errors.As(err, &he):
		return out.String() + fmt.Sprintf("[exit status %d]", he.ExitCode()), nil
	case errors.As(err, &le):
		return out.String() + "[killed: " + le.Error() + "]", nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return out.String() + fmt.Sprintf("[killed: the agent ran longer than its time limit of %v]", timeout), nil
	}
	return out.String(), err
}

// hostOutputLimit bounds a tier-0 agent's output kept.
const hostOutputLimit = 1 << 20

// runHost runs a tier-0 agent on the host, in a private copy of the
// conversation's workspace whose changes come back into its layer (a
// failed project setup refuses it like every execution tool), with a
// minimal environment, in its own process group (killed whole at the
// time limit).
func (t *Tool) runHost(ctx context.Context, c *agentcore.Call, argv, env []string, w io.Writer, timeout time.Duration) error {
	return t.o.Engine.RunOnCopy(ctx, c, func(ctx context.Context, dir string) error {
		return runIn(ctx, dir, argv, env, w, timeout)
	})
}

// hostPath is PATH of a command run on the host: the minimal one a
// sandbox has too, nothing of the server's own environment.
const hostPath = "/usr/local/bin:/usr/bin:/bin"

// runIn runs argv in dir on the host.
func runIn(ctx context.Context, dir string, argv, env []string, w io.Writer, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	home, _ := os.UserHomeDir()
	cmd.Env = append([]string{"PATH=" + hostPath, "HOME=" + home, "LANG=C.UTF-8", "TERM=dumb"}, env...)
	lw := &limitWriter{w: w, n: hostOutputLimit}
	cmd.Stdout, cmd.Stderr = lw, lw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("starting %s: %w", filepath.Base(argv[0]), pe.Err)
	}
	return err
}

// limitWriter passes on at most n bytes and drops the rest.
type limitWriter struct {
	w       io.Writer
	n       int
	dropped bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		if !l.dropped {
			l.dropped = true
			l.w.Write(append(p[:l.n:l.n], "\n[output dropped beyond 1 MiB]\n"...))
		}
		l.n = 0
		return len(p), nil
	}
	l.n -= len(p)
	l.w.Write(p)
	return len(p), nil
}
