package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
)

// repos works on the instance's database, like users: add and list are
// rows; sync enqueues the same job POST /api/v1/repositories/{id}/sync
// does, and the running server's job queue runs it (codumentorctl runs no
// git). --wait follows the job's row, as GET /api/v1/jobs/{id} shows it.
func reposCommand() *cli.Command {
	return &cli.Command{
		Name:  "repos",
		Usage: "add, list and sync repositories",
		Description: "Works on the database in the instance directory, safe while the server runs. A sync\n" +
			"is a job that the running server (codumentor api) picks up within a second; with\n" +
			"--wait, codumentorctl follows it until it ends.",
		Commands: []*cli.Command{reposAddCommand(), reposListCommand(), reposSyncCommand()},
		Action:   groupAction,
	}
}

func reposAddCommand() *cli.Command {
	return &cli.Command{
		Name:      "add",
		Usage:     "add a repository (nothing is fetched until it is synced)",
		ArgsUsage: "NAME URL",
		Description: "URL is https://, ssh://, user@host:path or file:///path; anything else (options,\n" +
			"ext:: and fd:: helpers, control characters) is refused before any git runs.\n" +
			"--credential names an instance secret (PUT /api/v1/admin/secrets/{name}).\n" +
			"--run-setup runs the repository's setup.sh (or .codumentor/setup.sh) in the setup sandbox\n" +
			"before a conversation's workspace is used (no network unless --setup-network, the host's,\n" +
			"or --setup-allow-host, only those destinations through the egress proxy).\n\n" +
			"Example: codumentorctl repos add --branch main demo file:///srv/git/demo.git",
		Flags: []cli.Flag{
			instanceFlag(),
			&cli.StringFlag{Name: "branch", Value: "main", Usage: "the `BRANCH` to mirror (the default one)"},
			&cli.StringSliceFlag{Name: "also-branch", Usage: "also mirror and index `BRANCH`, searched with branch: (repeatable; at most 15)"},
			&cli.StringFlag{Name: "credential", Usage: "the instance secret `NAME` git authenticates with"},
			&cli.BoolFlag{Name: "run-setup", Usage: "run the repository's setup script (sandboxed) for its conversations"},
			&cli.BoolFlag{Name: "setup-network", Usage: "give the setup script the host network (needs --run-setup)"},
			&cli.StringSliceFlag{Name: "setup-allow-host", Usage: "let the setup script reach `HOST[:PORT]` (e.g. a package registry) through the egress proxy, and nothing else (repeatable; needs --run-setup)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 2 {
				return usageError(cmd, "want NAME URL, got %d arguments", cmd.NArg())
			}
			var branches []string
			if also := cmd.StringSlice("also-branch"); len(also) > 0 {
				branches = append([]string{cmd.String("branch")}, also...)
			}
			return withRepos(ctx, cmd, func(s *repos.Service, _ *gorm.DB) error {
				r, err := s.Add(ctx, repos.Add{Name: cmd.Args().Get(0), URL: cmd.Args().Get(1), Branch: cmd.String("branch"), Branches: branches, Credential: cmd.String("credential"), RunSetup: cmd.Bool("run-setup"), SetupNetwork: cmd.Bool("setup-network"), SetupEgress: cmd.StringSlice("setup-allow-host"), By: auth.CommandLine})
				if err != nil {
					return err
				}
				inst, err := config.NewInstance(cmd.String("instance"))
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.Root().Writer, "added repository %s (id %s); codumentorctl repos sync --wait --instance %s %s fetches it\n", r.Name, r.ID, inst.Dir, r.Name)
				return nil
			})
		},
	}
}

func reposListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the repositories",
		Flags: []cli.Flag{instanceFlag(), &cli.BoolFlag{Name: "json", Usage: "print them as JSON"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			return withRepos(ctx, cmd, func(s *repos.Service, _ *gorm.DB) error {
				rs, err := s.List(ctx)
				if err != nil {
					return err
				}
				out := cmd.Root().Writer
				if cmd.Bool("json") {
					return json.NewEncoder(out).Encode(map[string]any{"repositories": rs})
				}
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tID\tBRANCH\tHEAD\tINDEXED\tURL")
				for _, r := range rs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.ID, strings.Join(r.Branches, ","), short(r.Head), short(r.IndexedCommit), r.URL)
				}
				return tw.Flush()
			})
		},
	}
}

func short(c string) string {
	if c == "" {
		return "-"
	}
	return c[:min(12, len(c))]
}

func reposSyncCommand() *cli.Command {
	return &cli.Command{
		Name:      "sync",
		Usage:     "fetch a repository (and index it when retrieval is enabled), as a job of the server",
		ArgsUsage: "NAME|ID",
		Flags: []cli.Flag{
			instanceFlag(),
			&cli.BoolFlag{Name: "wait", Usage: "follow the job until it ends: a progress bar on a terminal, plain lines otherwise"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 {
				return usageError(cmd, "want one repository NAME or ID")
			}
			return withRepos(ctx, cmd, func(s *repos.Service, db *gorm.DB) error {
				r, err := findRepo(ctx, s, cmd.Args().First())
				if err != nil {
					return err
				}
				j, err := s.Sync(ctx, r.ID, "")
				if err != nil {
					return err
				}
				out := cmd.Root().Writer
				fmt.Fprintf(out, "sync of %s queued as job %s\n", r.Name, j.ID)
				if !cmd.Bool("wait") {
					return nil
				}
				q, err := jobs.New(db, jobs.Options{})
				if err != nil {
					return err
				}
				return followJob(ctx, q, j.ID, out, isTerminal(out), time.Second)
			})
		},
	}
}

func findRepo(ctx context.Context, s *repos.Service, nameOrID string) (repos.Repository, error) {
	if r, err := s.Get(ctx, nameOrID); err == nil {
		return r, nil
	}
	rs, err := s.List(ctx)
	if err != nil {
		return repos.Repository{}, err
	}
	for _, r := range rs {
		if r.Name == nameOrID {
			return r, nil
		}
	}
	return repos.Repository{}, fmt.Errorf("no repository %q (codumentorctl repos list shows them)", nameOrID)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// followJob prints a job's progress until it ends: a redrawn bar on a
// terminal, a line per change otherwise. A job still queued after a while
// means no server is running to take it, which it says once.
func followJob(ctx context.Context, q *jobs.Queue, id string, out io.Writer, tty bool, poll time.Duration) error {
	start := time.Now()
	var last string
	hinted := false
	for {
		j, err := q.Get(ctx, id)
		if err != nil {
			return err
		}
		line := string(j.Status)
		if p := j.Progress; p != nil {
			line = fmt.Sprintf("%s %d/%d %s", j.Status, p.Done, p.Total, p.Unit)
			if tty && p.Total > 0 {
				const width = 30
				n := int(min(p.Done, p.Total) * width / p.Total)
				line = fmt.Sprintf("[%s%s] %d/%d %s", strings.Repeat("#", n), strings.Repeat(" ", width-n), p.Done, p.Total, p.Unit)
			}
		}
		if line != last {
			if tty {
				fmt.Fprintf(out, "\r\x1b[K%s", line)
			} else {
				fmt.Fprintln(out, line)
			}
			last = line
		}
		switch j.Status {
		case jobs.StatusSucceeded:
			if tty {
				fmt.Fprintln(out)
			}
			fmt.Fprintf(out, "done: %s\n", j.Result)
			return nil
		case jobs.StatusFailed:
			if tty {
				fmt.Fprintln(out)
			}
			return fmt.Errorf("job %s failed: %s", id, j.LastError)
		case jobs.StatusQueued:
			if !hinted && time.Since(start) > 15*time.Second && j.Attempts == 0 {
				hinted = true
				fmt.Fprintln(out, "\nstill queued: is the server (codumentor api) running on this instance? It runs the job.")
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// withRepos opens the instance's repositories for f, as the server does
// (its credentials' keyring from config.yaml).
func withRepos(ctx context.Context, cmd *cli.Command, f func(*repos.Service, *gorm.DB) error) error {
	inst, cfg, err := openConfig(cmd)
	if err != nil {
		return err
	}
	return withDatabase(ctx, inst, false, func(db *gorm.DB) error {
		sec, err := secrets.New(db, secrets.NewKeyring(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets))
		if err != nil {
			return err
		}
		q, err := jobs.New(db, jobs.Options{})
		if err != nil {
			return err
		}
		s, err := repos.Open(repos.Options{DB: db, Queue: q, Secrets: sec, Dir: config.Instance{Dir: inst.Dir}.ReposDir(), DefaultAccess: cfg.Repositories.DefaultAccess})
		if err != nil {
			return err
		}
		return f(s, db)
	})
}
