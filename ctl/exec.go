package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/setup"
	"github.com/codumentor/codumentor/integrations/mcp"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
	"github.com/urfave/cli/v3"
)

// sandboxPath is PATH inside every sandbox (sandboxkit's minimal
// environment), for the message of a command not found there.
const sandboxPath = "/usr/local/bin:/usr/bin:/bin"

func sandboxCommand() *cli.Command {
	return &cli.Command{
		Name:     "sandbox",
		Usage:    "run a command in the sandbox, show the sandbox profiles",
		Commands: []*cli.Command{execCommand(), profileCommand()},
		Action:   groupAction,
	}
}

// execStopAt stops flag parsing at the command's name, so that
// `sandbox exec ls -la` needs no "--" and the command's flags stay its own.
var execStopAt = 1

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run one command in the sandbox, as the agent's shell tool does",
		ArgsUsage: "[--] CMD [ARG...]",
		Description: `Runs CMD in a fresh sandbox and waits for it. stdin, stdout and stderr are passed
through; nothing of codumentorctl's environment reaches the command.

With --workspace, the sandbox is the agent shell's (profile "workspace"): the tree
is shown read-only at /workspace, copy-on-write; every write lands in the --upper
dir, the tree itself is never modified. No network: with --share-net the setup
profile is used instead, the one profile that has the workspace and the network.
Without --workspace, the sandbox has no workspace at all: the MCP server profile
(/usr and a curated /etc read-only, empty /tmp and HOME), network only with
--share-net.

With --allow-host (repeatable: HOST, *.DOMAIN or an IP literal, each optionally
:PORT) the sandbox keeps its own network, with only loopback, and reaches only those
destinations through an egress proxy on the host (HTTP_PROXY, HTTPS_PROXY and
ALL_PROXY point at it); names resolving to loopback, private, link-local or CGNAT
addresses are refused. Each attempt, allowed or refused, is printed on stderr. With
--workspace it uses the setup profile, as --share-net does.

The overlay's scratch (work) dir is created fresh in the upper dir's parent, which
is on the same filesystem as the upper dir and where the overlay check probes, and
removed after the run. UPPER.lock beside the upper dir marks it in use while a
sandbox runs (one sandbox per upper dir) and stays. Without --upper, a new temp dir
holds upper and work; the upper dir's path is printed on stderr and kept.

Before starting, the sandbox pre-flight checks run ("codumentorctl check"); when one
fails nothing runs: exit 125 with the failed check and its remedy.

No audit log records the run: it belongs to no instance (it has no --instance; it
runs the operator's command on a tree they name, as their own user, touching no
server's database, workspaces or secrets). The server's own sandboxes are recorded.

Exit status: the command's own status (128+N when killed by signal N); 2 usage
error; 124 --timeout expired; 125 the sandbox is unavailable, could not be set up,
or its upper dir is in use by another sandbox; 126 CMD not executable; 127 CMD not
found in the sandbox; 130 interrupted.`,
		StopOnNthArg: &execStopAt,
		// "help" is a command to run in the sandbox, not cli's help command.
		HideHelpCommand: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workspace", Usage: "host tree shown read-only at /workspace (copy-on-write)", TakesFile: true},
			&cli.StringFlag{Name: "upper", Usage: "dir that receives the workspace's writes; created if missing (default: a new temp dir)", TakesFile: true},
			&cli.BoolFlag{Name: "share-net", Usage: "share the host's network (with --workspace: the setup profile)"},
			&cli.StringSliceFlag{Name: "allow-host", Usage: "let the command reach `HOST[:PORT]` through the egress proxy, and nothing else (repeatable; *.DOMAIN for the names below DOMAIN)"},
			&cli.StringFlag{
				Name:      "seccomp",
				Value:     "log",
				Usage:     "seccomp filter: log (blocklisted calls run and the kernel logs them), enforce (they are refused), off (no filter)",
				Validator: validSeccompMode,
			},
			&cli.StringFlag{Name: "bwrap", Usage: "bubblewrap binary (default: bwrap on PATH)", TakesFile: true},
			&cli.DurationFlag{Name: "timeout", Usage: "kill the sandbox after this long, exit 124 (0: no limit)"},
			&cli.BoolFlag{Name: "report", Usage: "after the command, list on stderr the blocklisted system calls it made (seccomp log mode): what enforce would refuse"},
		},
		Action: runExec,
	}
}

// execRun is one `sandbox exec`: the dirs it made, so that a run that
// never started leaves nothing behind.
type execRun struct {
	tmpParent string // the temp dir holding upper and work, when --upper was not given
	upper     string
	made      bool // upper was created by this run
	work      string
}

func runExec(ctx context.Context, cmd *cli.Command) error {
	argv := cmd.Args().Slice()
	if len(argv) == 0 {
		return usageError(cmd, "missing command: %s [flags] -- CMD [ARG...]", cmd.FullName())
	}
	if cmd.Duration("timeout") < 0 {
		return usageError(cmd, "invalid --timeout %s: must not be negative", cmd.Duration("timeout"))
	}
	lower := cmd.String("workspace")
	if lower == "" && cmd.String("upper") != "" {
		return usageError(cmd, "--upper needs --workspace")
	}
	// A signal kills the sandbox through the context, so that the dirs
	// this run made are still cleaned up.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The sandboxes of the server's own shapes, by their owners'
	// constructors: without a workspace the MCP server's (the strict zero
	// Policy plus an optional network), with one the agent's shell's, or
	// the setup script's when it has a network.
	s := sandboxkit.Settings{Bwrap: cmd.String("bwrap"), Seccomp: seccomp.Mode(cmd.String("seccomp")), Limits: new(config.DefaultSandboxLimits())}
	shareNet := cmd.Bool("share-net")
	hosts := cmd.StringSlice("allow-host")
	if len(hosts) > 0 {
		if shareNet {
			return usageError(cmd, "--allow-host and --share-net exclude each other: the allow-list is enforced only without the host network")
		}
		if err := egress.ParseAllow(hosts); err != nil {
			return usageError(cmd, "--allow-host: %v", err)
		}
	}
	server := mcp.ServerConfig{Name: "exec", EgressAllowlist: hosts}
	if shareNet {
		server.Network = mcp.NetworkHost
	}
	policy := func() (*sandboxkit.Policy, error) { return mcp.ServerPolicy(s, server) }
	run := &execRun{}
	if lower != "" {
		var err error
		if lower, err = checkDir(lower); err != nil {
			return usageError(cmd, "--workspace: %v", err)
		}
		if err := run.prepare(lower, cmd.String("upper")); err != nil {
			var ue *exitError
			if errors.As(err, &ue) {
				return usageError(cmd, "%v", ue.err)
			}
			return exitWith(exitSandbox, err)
		}
		ws := &sandboxkit.Workspace{Lower: lower, Upper: run.upper, Work: run.work}
		policy = func() (*sandboxkit.Policy, error) { return agentcore.WorkspacePolicy(s, ws) }
		if shareNet || len(hosts) > 0 {
			policy = func() (*sandboxkit.Policy, error) { return setup.Policy(s, 0, ws, shareNet, hosts) }
		}
	}
	p, err := policy()
	if err == nil && p.Egress != nil {
		p.Egress.OnEvent = egressPrinter(cmd.Root().ErrWriter)
	}
	if err != nil {
		run.cleanup(false)
		// A filter that cannot be loaded is ErrUnavailable: nothing
		// starts without it.
		return execError(ctx, nil, err)
	}

	if p.ShareNet && !diag.AbstractUnixScoped() {
		fmt.Fprintf(cmd.Root().ErrWriter, "%s: warning: this kernel lacks Landlock's abstract socket scope (Linux 6.12): the sandbox can connect to the host's abstract UNIX sockets\n", progName)
	}
	if cmd.Bool("report") {
		return runReported(ctx, cmd, p, argv, run)
	}
	c := sandboxkit.Command(ctx, p, argv...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.Root().Writer, cmd.Root().ErrWriter
	c.Timeout = cmd.Duration("timeout")
	if err := c.Start(); err != nil {
		run.cleanup(false)
		return execError(ctx, c, err)
	}
	if run.tmpParent != "" {
		fmt.Fprintf(cmd.Root().ErrWriter, "%s: writes land in %s\n", progName, run.upper)
	}
	err = c.Wait()
	// A SetupError means the command never ran: its upper dir is empty.
	var se *sandboxkit.SetupError
	run.cleanup(!errors.As(err, &se))
	return execError(ctx, c, err)
}

// execError maps sandboxkit's errors to exit codes (see the package
// comment). c is nil when the error came before a Cmd existed (from
// Profile), which never reports a command that was not found.
func execError(ctx context.Context, c *sandboxkit.Cmd, err error) error {
	var exit *sandboxkit.ExitError
	var se *sandboxkit.SetupError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit):
		return exitWith(exit.Code, nil)
	case ctx.Err() != nil:
		// Only a signal cancels ctx (--timeout uses the Cmd's own).
		return exitWith(exitInterrupted, errors.New("interrupted; nothing is left running"))
	case errors.Is(err, egress.ErrProxyDown):
		return exitWith(exitSandbox, err)
	case errors.Is(err, sandboxkit.ErrUnavailable):
		// An administrator's tool: the whole report, host paths included.
		var ue *sandboxkit.UnavailableError
		if errors.As(err, &ue) {
			return exitWith(exitSandbox, fmt.Errorf("%s; nothing was run", ue.Detail()))
		}
		return exitWith(exitSandbox, fmt.Errorf("%w; nothing was run", err))
	case errors.Is(err, sandboxkit.ErrNotFound):
		return exitWith(exitNotFound, fmt.Errorf("%s: command not found in the sandbox (PATH inside is %s)", c.Args[0], sandboxPath))
	case errors.Is(err, sandboxkit.ErrNotExecutable):
		return exitWith(exitCannotRun, fmt.Errorf("%s: cannot execute in the sandbox: permission denied", c.Args[0]))
	case errors.As(err, &se):
		return exitWith(exitSandbox, err)
	case errors.Is(err, context.DeadlineExceeded):
		return exitWith(exitTimeout, fmt.Errorf("timed out after %s; the sandbox was killed", c.Timeout))
	default:
		return exitWith(exitSandbox, err)
	}
}

// checkDir returns dir as an absolute path, if it is an existing directory.
func checkDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s: no such directory", dir)
		}
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	return abs, nil
}

// prepare makes the upper dir (unless it exists) and a fresh work dir next
// to it. Errors about the flags come back as *exitError (usage).
func (r *execRun) prepare(lower, upper string) error {
	if upper == "" {
		parent, err := os.MkdirTemp("", progName+"-")
		if err != nil {
			return err
		}
		r.tmpParent, r.upper, r.work = parent, filepath.Join(parent, "upper"), filepath.Join(parent, "work")
		for _, d := range []string{r.upper, r.work} {
			if err := os.Mkdir(d, 0o700); err != nil {
				r.cleanup(false)
				return err
			}
		}
		return nil
	}
	upper, err := filepath.Abs(upper)
	if err != nil {
		return err
	}
	// Overlayfs refuses overlapping layers; say so before the kernel does.
	if within(upper, lower) || within(lower, upper) {
		return &exitError{code: exitUsage, err: fmt.Errorf("--upper %s and --workspace %s overlap; put the upper dir outside the workspace", upper, lower)}
	}
	switch fi, err := os.Stat(upper); {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(upper, 0o700); err != nil {
			return err
		}
		r.made = true
	case err != nil:
		return err
	case !fi.IsDir():
		return &exitError{code: exitUsage, err: fmt.Errorf("--upper %s is not a directory", upper)}
	}
	r.upper = upper
	// A fresh work dir per run: overlayfs wants it empty, and it must be on
	// the upper dir's filesystem; the parent is where the Doctor probes.
	work, err := os.MkdirTemp(filepath.Dir(upper), "."+filepath.Base(upper)+".work-")
	if err != nil {
		r.cleanup(false)
		return err
	}
	r.work = work
	return nil
}

// cleanup removes the work dir, and, when the command never ran, the
// upper dir this run created.
func (r *execRun) cleanup(ran bool) {
	if r.work != "" {
		overlay.RemoveAll(r.work)
	}
	if ran {
		return
	}
	if r.tmpParent != "" {
		overlay.RemoveAll(r.tmpParent)
	} else if r.made {
		os.Remove(r.upper)
	}
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// validSeccompMode accepts the modes the server's config takes.
func validSeccompMode(v string) error {
	var names []string
	for _, m := range seccomp.Modes {
		if v == string(m) {
			return nil
		}
		names = append(names, string(m))
	}
	return fmt.Errorf("want one of %s", strings.Join(names, ", "))
}

// egressPrinter prints each egress attempt on w, one line each.
func egressPrinter(w io.Writer) func(egress.Event) {
	var mu sync.Mutex
	return func(e egress.Event) {
		line := fmt.Sprintf("%s: egress %s %s %s", progName, e.Verdict, e.Proto, net.JoinHostPort(e.Host, strconv.Itoa(e.Port)))
		if e.Addr != "" {
			line += " (" + e.Addr + ")"
		}
		if e.Verdict == egress.Allowed {
			line += fmt.Sprintf(": sent %d, received %d bytes in %s", e.Sent, e.Received, e.Duration.Round(time.Millisecond))
		}
		if e.Reason != "" {
			line += ": " + e.Reason
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(w, line)
	}
}
