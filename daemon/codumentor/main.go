// Command codumentor is the Codumentor server.
//
//	codumentor api [--instance DIR] [--config FILE] [--listen 127.0.0.1:8080] [--insecure-listen]
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/codumentor/codumentor/daemon"
	"github.com/codumentor/codumentor/integrations/office"
	"github.com/codumentor/codumentor/sandboxkit"
)

func main() {
	// The sandbox supervisor and spawner are this binary re-executed.
	sandboxkit.Main()
	// So is the office worker, which parses one attachment in its sandbox.
	office.WorkerMain()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := command().Run(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "codumentor:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

// defaultInstance is ~/.codumentor, or $CODUMENTOR_INSTANCE.
func defaultInstance() string {
	if d := os.Getenv("CODUMENTOR_INSTANCE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".codumentor")
}

func command() *cli.Command {
	return &cli.Command{
		Name:  "codumentor",
		Usage: "the Codumentor server",
		Commands: []*cli.Command{{
			Name:  "api",
			Usage: "serve the HTTP API, the agent engine, the job queue and the scheduler",
			Description: "Reads DIR/config.yaml (CODUMENTOR_JWT_SECRET overrides auth.jwt_secret), keeps its\n" +
				"database in DIR/data, workspaces in DIR/workspaces and logs in DIR/logs/codumentor.log.\n" +
				"Set up users with codumentorctl users add --instance DIR.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "instance", Value: defaultInstance(), Usage: "instance directory (created 0700 if missing)", Sources: cli.EnvVars("CODUMENTOR_INSTANCE")},
				&cli.StringFlag{Name: "config", Usage: "configuration file (default: DIR/config.yaml)"},
				&cli.StringFlag{Name: "listen", Usage: "address to listen on (default: the configuration's, 127.0.0.1:8080)"},
				&cli.BoolFlag{Name: "insecure-listen", Usage: "allow a non-loopback address without TLS"},
				// For tests: how often an event stream sends a heartbeat
				// and re-checks its token and user.
				&cli.DurationFlag{Name: "sse-heartbeat", Hidden: true},
			},
			Action: func(ctx context.Context, cmd *cli.Command) error {
				if cmd.NArg() > 0 {
					return cli.Exit(fmt.Sprintf("unexpected argument %q; see codumentor api --help", cmd.Args().First()), 2)
				}
				return daemon.Run(ctx, daemon.Options{
					Instance:       cmd.String("instance"),
					ConfigFile:     cmd.String("config"),
					Listen:         cmd.String("listen"),
					InsecureListen: cmd.Bool("insecure-listen"),
					Stderr:         os.Stderr,
					Heartbeat:      cmd.Duration("sse-heartbeat"),
				})
			},
		}},
	}
}
