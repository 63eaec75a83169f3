package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/urfave/cli/v3"
	"golang.org/x/term"
	"gorm.io/gorm"
)

func usersCommand() *cli.Command {
	return &cli.Command{
		Name:  "users",
		Usage: "add, list, disable and enable users, change passwords, set token quotas",
		Description: "Works on the database in the instance directory; safe while the server runs\n" +
			"(the server looks users up on every request).",
		Commands: []*cli.Command{
			usersAddCommand(),
			usersListCommand(),
			usersSetDisabledCommand("disable", true),
			usersSetDisabledCommand("enable", false),
			usersPasswdCommand(),
			usersQuotaCommand(),
		},
		Action: groupAction,
	}
}

// passwordFlags give a password without a prompt, for scripts; without
// either, a command on a terminal prompts for it.
func passwordFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "password", Usage: "the password `PW` (visible to other local users in the process list: prefer --password-stdin)"},
		&cli.BoolFlag{Name: "password-stdin", Usage: "read the password from the first line of standard input (without either flag, a terminal is prompted)"},
	}
}

func usersAddCommand() *cli.Command {
	return &cli.Command{
		Name:      "add",
		Usage:     "add a local user",
		ArgsUsage: "NAME",
		Description: "Adds a user who logs in with NAME and a password (hashed with argon2id), creating the\n" +
			"instance directory and its database if they are missing. NAME is 1 to 64 lower-case\n" +
			"letters, digits, '.', '_' and '-', starting with a letter or digit; the password has\n" +
			"at least " + fmt.Sprint(auth.MinPasswordLength) + " characters. --admin lets the user manage other users.\n" +
			"Safe while the server runs. Prints the new user's name, ID and role.\n\n" +
			"Example: printf '%s\\n' \"$PW\" | codumentorctl users add --password-stdin --admin alice",
		Flags:  append([]cli.Flag{instanceFlag(), &cli.BoolFlag{Name: "admin", Usage: "make the user an administrator"}}, passwordFlags()...),
		Action: runUsersAdd,
	}
}

func runUsersAdd(ctx context.Context, cmd *cli.Command) error {
	name, pw, err := nameAndPassword(cmd)
	if err != nil {
		return err
	}
	return withUsers(ctx, cmd, true, func(us *auth.Users) error {
		u, err := us.Add(ctx, auth.AddUser{Name: name, Password: pw, Admin: cmd.Bool("admin"), By: auth.CommandLine})
		if errors.Is(err, auth.ErrUserExists) {
			return fmt.Errorf("user %s already exists (codumentorctl users passwd changes its password)", name)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.Root().Writer, "added user %s (id %s, role %s)\n", u.Name, u.ID, u.Role)
		return nil
	})
}

func usersListCommand() *cli.Command {
	return &cli.Command{
		Name:        "list",
		Usage:       "list the users",
		Description: "Prints every user, local and LDAP (LDAP users appear after their first login). Safe while the server runs.",
		Flags:       []cli.Flag{instanceFlag(), &cli.BoolFlag{Name: "json", Usage: "print the users as a JSON array"}},
		Action:      runUsersList,
	}
}

func runUsersList(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	return withUsers(ctx, cmd, false, func(us *auth.Users) error {
		list, err := us.List(ctx)
		if err != nil {
			return err
		}
		out := cmd.Root().Writer
		if cmd.Bool("json") {
			if list == nil {
				list = []auth.User{}
			}
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(list)
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tROLE\tSOURCE\tDISABLED\tCREATED\tLAST LOGIN")
		for _, u := range list {
			last := "never"
			if u.LastLogin != nil {
				last = formatTime(*u.LastLogin)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", u.Name, u.Role, u.Source, yesNo(u.Disabled), formatTime(u.Created), last)
		}
		return tw.Flush()
	})
}

func usersSetDisabledCommand(name string, disabled bool) *cli.Command {
	c := &cli.Command{
		Name:      name,
		ArgsUsage: "NAME",
		Flags:     []cli.Flag{instanceFlag()},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			user, err := oneName(cmd)
			if err != nil {
				return err
			}
			return withUsers(ctx, cmd, false, func(us *auth.Users) error {
				if err := us.SetDisabled(ctx, auth.CommandLine, user, disabled); err != nil {
					return err
				}
				fmt.Fprintf(cmd.Root().Writer, "%sd user %s\n", name, user)
				return nil
			})
		},
	}
	if disabled {
		c.Usage = "stop a user from logging in"
		c.Description = "The user can no longer log in, and the tokens they hold stop working at once (the\n" +
			"server checks the user on every request; open event streams end at their next\n" +
			"heartbeat). Their conversations and secrets are kept. Safe while the server runs;\n" +
			"codumentorctl users enable undoes it, but the old tokens stay revoked."
	} else {
		c.Usage = "let a disabled user log in again"
		c.Description = "Undoes codumentorctl users disable. Safe while the server runs."
	}
	return c
}

func usersPasswdCommand() *cli.Command {
	return &cli.Command{
		Name:      "passwd",
		Usage:     "set a local user's password",
		ArgsUsage: "NAME",
		Description: "Replaces the password of local user NAME (an LDAP user's password is the directory's).\n" +
			"Without --password or --password-stdin it asks twice on the terminal, without echo.\n" +
			"The tokens the user holds stop working at once (every session signs in again).\n" +
			"Safe while the server runs.",
		Flags:  append([]cli.Flag{instanceFlag()}, passwordFlags()...),
		Action: runUsersPasswd,
	}
}

func runUsersPasswd(ctx context.Context, cmd *cli.Command) error {
	name, pw, err := nameAndPassword(cmd)
	if err != nil {
		return err
	}
	return withUsers(ctx, cmd, false, func(us *auth.Users) error {
		if err := us.SetPassword(ctx, auth.CommandLine, name, pw); err != nil {
			return err
		}
		fmt.Fprintf(cmd.Root().Writer, "changed the password of user %s\n", name)
		return nil
	})
}

func usersQuotaCommand() *cli.Command {
	return &cli.Command{
		Name:      "quota",
		Usage:     "show or set a user's daily token quota",
		ArgsUsage: "NAME",
		Description: "Without flags, prints user NAME's daily quota of model tokens (prompt and completion,\n" +
			"per UTC day) and what they used of it today. --daily-tokens N sets the user's own\n" +
			"quota (0: none for this user), --default removes it so that quotas.daily_tokens of\n" +
			"config.yaml applies again. A turn past the quota is refused before the model is\n" +
			"called. The change is in the audit log. Safe while the server runs (it reads the\n" +
			"quota at every model call).",
		Flags: []cli.Flag{
			instanceFlag(),
			&cli.Int64Flag{Name: "daily-tokens", Usage: "set the user's own quota to `N` tokens a day (0: no quota)"},
			&cli.BoolFlag{Name: "default", Usage: "remove the user's own quota: quotas.daily_tokens applies"},
		},
		Action: runUsersQuota,
	}
}

func runUsersQuota(ctx context.Context, cmd *cli.Command) error {
	name, err := oneName(cmd)
	if err != nil {
		return err
	}
	set, def := cmd.IsSet("daily-tokens"), cmd.Bool("default")
	if set && def {
		return usageError(cmd, "give --daily-tokens or --default, not both")
	}
	if n := cmd.Int64("daily-tokens"); set && n < 0 {
		return usageError(cmd, "--daily-tokens must be 0 (no quota) or a positive number of tokens, not %d", n)
	}
	inst, cfg, err := openConfig(cmd)
	if err != nil {
		return err
	}
	return withDatabase(ctx, inst, false, func(db *gorm.DB) error {
		return showQuota(ctx, cmd, db, name, int64(cfg.Quotas.DailyTokens))
	})
}

// showQuota sets user name's quota as cmd's flags say, then prints it.
func showQuota(ctx context.Context, cmd *cli.Command, db *gorm.DB, name string, def int64) error {
	us, err := auth.NewUsers(db)
	if err != nil {
		return err
	}
	u, err := us.ByName(ctx, strings.ToLower(name))
	if errors.Is(err, auth.ErrUserNotFound) {
		return fmt.Errorf("there is no user %s (codumentorctl users list shows them)", name)
	}
	if err != nil {
		return err
	}
	usage, err := store.NewUsage(db)
	if err != nil {
		return err
	}
	usage.SetDefaultQuota(def)
	if cmd.IsSet("daily-tokens") || cmd.Bool("default") {
		var n *int64
		if cmd.IsSet("daily-tokens") {
			n = new(cmd.Int64("daily-tokens"))
		}
		if err := usage.SetQuota(ctx, auth.CommandLine, u.ID, n); err != nil {
			return err
		}
	}
	q, err := usage.Quota(ctx, u.ID, time.Now())
	if err != nil {
		return err
	}
	limit := "none"
	if q.DailyTokens > 0 {
		limit = fmt.Sprintf("%d tokens a day", q.DailyTokens)
	}
	from := "the user's own"
	if q.Source == store.QuotaDefault {
		from = "quotas.daily_tokens"
	}
	fmt.Fprintf(cmd.Root().Writer, "user %s: quota %s (%s); used today (%s UTC): %d tokens; resets at %s\n", u.Name, limit, from, q.Day, q.UsedToday, formatTime(q.Resets))
	return nil
}

// withUsers opens the users table of cmd's instance for f, creating the
// instance and its database first with create. Errors of f are failures
// (exit 1): the auth package's messages already name the rule that was
// broken.
func withUsers(ctx context.Context, cmd *cli.Command, create bool, f func(*auth.Users) error) error {
	inst, err := openInstance(cmd, create)
	if err != nil {
		return err
	}
	return withDatabase(ctx, inst, create, func(db *gorm.DB) error {
		us, err := auth.NewUsers(db)
		if err != nil {
			return err
		}
		return f(us)
	})
}

// oneName returns the single NAME argument of cmd.
func oneName(cmd *cli.Command) (string, error) {
	switch cmd.NArg() {
	case 0:
		return "", usageError(cmd, "missing the user's NAME")
	case 1:
		return cmd.Args().First(), nil
	}
	return "", usageError(cmd, "unexpected argument %q", cmd.Args().Get(1))
}

// nameAndPassword returns the single NAME argument of cmd and the
// password its flags or the terminal give.
func nameAndPassword(cmd *cli.Command) (name, pw string, err error) {
	if name, err = oneName(cmd); err != nil {
		return "", "", err
	}
	if pw, err = readPassword(cmd); err != nil {
		return "", "", err
	}
	return name, pw, nil
}

// readPassword returns the password of --password or --password-stdin,
// or, without either, asks for it twice on the terminal that standard
// input is, without echo.
func readPassword(cmd *cli.Command) (string, error) {
	given, fromStdin := cmd.IsSet("password"), cmd.Bool("password-stdin")
	switch {
	case given && fromStdin:
		return "", usageError(cmd, "give --password or --password-stdin, not both")
	case given:
		return cmd.String("password"), nil
	case !fromStdin:
		f, ok := cmd.Root().Reader.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			return "", usageError(cmd, "no password given and standard input is not a terminal: pipe it in with --password-stdin (or use --password)")
		}
		return promptPassword(cmd.Root().ErrWriter, int(f.Fd()))
	}
	line, err := bufio.NewReader(cmd.Root().Reader).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		if errors.Is(err, io.EOF) {
			return "", exitWith(exitFailure, errors.New("--password-stdin: standard input is empty"))
		}
		return "", exitWith(exitFailure, fmt.Errorf("--password-stdin: %w", err))
	}
	line = strings.TrimSuffix(line, "\n")
	return strings.TrimSuffix(line, "\r"), nil
}

// promptPassword asks for a password twice on the terminal fd.
func promptPassword(w io.Writer, fd int) (string, error) {
	var pws [2]string
	for i, prompt := range []string{"New password: ", "Repeat the password: "} {
		fmt.Fprint(w, prompt)
		b, err := term.ReadPassword(fd)
		fmt.Fprintln(w)
		if err != nil {
			return "", exitWith(exitFailure, fmt.Errorf("reading the password from the terminal: %w", err))
		}
		pws[i] = string(b)
	}
	if pws[0] != pws[1] {
		return "", exitWith(exitFailure, errors.New("the two passwords differ; nothing was changed"))
	}
	return pws[0], nil
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
