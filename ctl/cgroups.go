package ctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/sandboxkit/cgroup"
	"github.com/urfave/cli/v3"
)

func setupCgroupsCommand() *cli.Command {
	return &cli.Command{
		Name:  "setup-cgroups",
		Usage: "delegate a cgroup subtree to the service user (as root), for per-sandbox limits",
		Description: "Creates the cgroup subtree in which the server puts each sandbox in a group of its\n" +
			"own, bounding its processes, memory and CPU (sandbox.limits), and hands it to the\n" +
			"service user. cgroup v1 (hosts without systemd): /sys/fs/cgroup/{pids,memory,cpu}/\n" +
			"codumentor/USER. cgroup v2 without systemd: /sys/fs/cgroup/codumentor/USER with the\n" +
			"controllers enabled; the server must then be started inside it. With systemd, use\n" +
			"scripts/codumentor.service (Delegate=yes) instead. Idempotent; must run as root;\n" +
			"not persistent across reboots (run it from a boot script, as scripts/install-prereqs\n" +
			"does for the test user). Without it the server runs sandboxes with rlimits only.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "user", Required: true, Usage: "the service user `NAME` the server runs as"},
			&cli.StringFlag{Name: "mount", Value: cgroup.DefaultMount, Hidden: true, Usage: "the cgroup mount point"},
		},
		Action: runSetupCgroups,
	}
}

func runSetupCgroups(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	name := cmd.String("user")
	u, err := user.Lookup(name)
	if err != nil {
		return usageError(cmd, "--user %s: %v", name, err)
	}
	if os.Geteuid() != 0 {
		return exitWith(exitFailure, errors.New("setup-cgroups must run as root: it creates cgroups and gives them to "+name))
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dirs, err := cgroup.Delegate(cmd.String("mount"), config.CgroupParent, u.Username, uid, gid)
	if err != nil {
		return exitWith(exitFailure, err)
	}
	fmt.Fprintf(cmd.Root().Writer, "delegated to %s (uid %d): %s\n", u.Username, uid, strings.Join(dirs, " "))
	return nil
}
