// Package ctl is codumentorctl, the operator's command line: it checks
// that this machine can sandbox and that an instance is sound (check),
// runs one command exactly as the agent's shell tool will (sandbox exec),
// shows what each sandbox profile gives bwrap (sandbox profile), and
// administers an instance directory: users, the rotation of
// auth.jwt_secret (secrets rotate, status) and workspace garbage
// collection (gc), all safe while the server runs; migrate, which copies
// an SQLite instance into PostgreSQL, takes the instance lock and so
// runs only while the server is stopped.
//
// Exit codes follow env(1), timeout(1) and docker run, so a script can
// tell who failed:
//
//	0..   the sandboxed command's own status (sandbox exec)
//	1     a codumentorctl command failed (check: a required check failed)
//	2     usage error: unknown flag or command, bad flag value, missing command
//	124   sandbox exec --timeout expired; the sandbox was killed
//	125   the sandbox could not be provided or set up; nothing ran
//	126   the command exists inside the sandbox but could not be executed
//	127   the command was not found inside the sandbox
//	130   interrupted (SIGINT/SIGTERM); the sandbox was killed
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v3"
)

// Exit codes; see the package comment.
const (
	exitFailure     = 1
	exitUsage       = 2
	exitTimeout     = 124
	exitSandbox     = 125
	exitCannotRun   = 126
	exitNotFound    = 127
	exitInterrupted = 130
)

const progName = "codumentorctl"

// exitError ends codumentorctl with code after printing err (nothing
// when err is nil: a propagated exit status speaks for itself).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func exitWith(code int, err error) error { return &exitError{code: code, err: err} }

// usageError reports a wrong command line of cmd, pointing at its help.
func usageError(cmd *cli.Command, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	//lint:ignore ST1005 printed to the user as is: its last line is the hint to --help
	return exitWith(exitUsage, fmt.Errorf("%s\nRun '%s --help' for usage.", msg, cmd.FullName()))
}

// noArgs refuses arguments to a command that takes none.
func noArgs(cmd *cli.Command) error {
	if cmd.Args().Present() {
		return usageError(cmd, "unexpected argument %q", cmd.Args().First())
	}
	return nil
}

// New returns the codumentorctl command tree. It never exits the
// process itself: errors come back from Run, carrying their exit code
// (see Run).
func New() *cli.Command {
	root := &cli.Command{
		Name:  progName,
		Usage: "operate a Codumentor server and its sandbox",
		Description: "Exit codes: 0 success (sandbox exec: the command's own status), 1 failure,\n" +
			"2 usage error, 124 timeout, 125 sandbox unavailable or setup failed (nothing ran),\n" +
			"126 command not executable, 127 command not found in the sandbox, 130 interrupted.",
		Commands: []*cli.Command{
			checkCommand(),
			sandboxCommand(),
			usersCommand(),
			groupsCommand(),
			secretsCommand(),
			gcCommand(),
			reposCommand(),
			setupCgroupsCommand(),
			auditCommand(),
			backupCommand(),
			restoreCommand(),
			migrateCommand(),
		},
		Action: groupAction,
		// Errors are printed once, by Run, with their exit code.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		HideVersion:    true,
	}
	setUsageErrors(root)
	return root
}

// setUsageErrors makes every flag-parsing error of the tree a usage error
// (exit 2) instead of cli's default of printing the whole help text.
func setUsageErrors(cmd *cli.Command) {
	cmd.OnUsageError = func(_ context.Context, c *cli.Command, err error, _ bool) error {
		return usageError(c, "%s", err.Error())
	}
	for _, sub := range cmd.Commands {
		setUsageErrors(sub)
	}
}

// groupAction runs for a command that only groups subcommands: it was
// given none, or an unknown one.
func groupAction(_ context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return usageError(cmd, "unknown command %q", cmd.Args().First())
	}
	if cmd.Root() == cmd {
		_ = cli.ShowRootCommandHelp(cmd)
	} else {
		_ = cli.ShowSubcommandHelp(cmd)
	}
	return exitWith(exitUsage, nil)
}

// Run runs codumentorctl with args (args[0] is the program name), prints
// any error on stderr as "codumentorctl: …" and returns the exit code.
func Run(ctx context.Context, args []string) int {
	return exitCode(os.Stderr, New().Run(ctx, args))
}

// exitCode prints err (if it has a message) and returns its exit code.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	code := exitFailure
	var ee *exitError
	var ec cli.ExitCoder
	switch {
	case errors.As(err, &ee):
		code = ee.code
		if ee.err == nil {
			return code
		}
		err = ee.err
	case errors.As(err, &ec):
		code = ec.ExitCode()
	}
	fmt.Fprintf(stderr, "%s: %s\n", progName, strings.TrimPrefix(err.Error(), progName+": "))
	return code
}
