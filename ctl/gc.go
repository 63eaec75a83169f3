package ctl

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/urfave/cli/v3"
)

func gcCommand() *cli.Command {
	return &cli.Command{
		Name:  "gc",
		Usage: "remove workspace layers unused for a while",
		Description: "Removes the conversations' copy-on-write workspace layers (DIR/workspaces/layers)\n" +
			"that no sandbox has used for the TTL: the agent's changes not yet pushed or exported\n" +
			"are lost, and the conversation starts from a clean workspace when it next runs a tool.\n" +
			"Prints the ID of each layer removed (with --dry-run, of each it would remove).\n\n" +
			"Safe while the server runs: a layer mounted by a sandbox is locked and skipped. The\n" +
			"server also runs this itself every sandbox.gc_interval.",
		Flags: []cli.Flag{
			instanceFlag(),
			&cli.BoolFlag{Name: "dry-run", Usage: "only print what would be removed"},
			&cli.StringFlag{Name: "ttl", HideDefault: true, Usage: "remove layers unused this `DURATION`, e.g. 30d or 72h (default: the configuration's sandbox.workspace_ttl, 30d unless set)"},
		},
		Action: runGC,
	}
}

func runGC(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	var ttl time.Duration
	if cmd.IsSet("ttl") {
		var err error
		if ttl, err = config.ParseDuration(cmd.String("ttl")); err != nil {
			return usageError(cmd, "--ttl %q: not a duration like 30d, 72h or 90m", cmd.String("ttl"))
		}
	}
	if cmd.IsSet("ttl") && ttl <= 0 {
		return usageError(cmd, "--ttl %v: the TTL must be positive (0 would remove every layer)", ttl)
	}
	inst, err := openInstance(cmd, false)
	if err != nil {
		return err
	}
	if !cmd.IsSet("ttl") {
		cfg, err := inst.Load("")
		if err != nil {
			return exitWith(exitFailure, err)
		}
		ttl = cfg.Sandbox.WorkspaceTTL.Std()
	}
	// The server's layer store; see daemon.build.
	layers, err := overlay.Open(filepath.Join(inst.WorkspacesDir(), "layers"))
	if err != nil {
		return exitWith(exitFailure, err)
	}
	dryRun := cmd.Bool("dry-run")
	ids, err := layers.GC(ctx, ttl, time.Now(), dryRun)
	out := cmd.Root().Writer
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	for _, id := range ids {
		fmt.Fprintf(out, "%s %s\n", verb, id)
	}
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("gc %s %d layers; these failed: %w", verb, len(ids), err))
	}
	if len(ids) == 0 {
		fmt.Fprintf(out, "no layer unused for %v\n", ttl)
	}
	return nil
}
