package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/codumentor/codumentor/daemon/auth"
)

func groupsCommand() *cli.Command {
	return &cli.Command{
		Name:  "groups",
		Usage: "list groups; add and delete local groups and their members",
		Description: "Groups name who may use a repository (its access entries) and, in auth.admin_groups,\n" +
			"who is an administrator. LDAP groups are the directory's, refreshed at each sign-in;\n" +
			"local memberships are set here. Safe while the server runs.",
		Commands: []*cli.Command{
			groupsListCommand(),
			groupsArgsCommand("add", "add an empty local group", "GROUP", 1, func(ctx context.Context, us *auth.Users, a []string) (string, error) {
				g, err := us.AddGroup(ctx, auth.CommandLine, a[0])
				if errors.Is(err, auth.ErrGroupExists) {
					return "", fmt.Errorf("group %s already exists", strings.ToLower(a[0]))
				}
				return "added group " + g.Name, err
			}),
			groupsArgsCommand("delete", "delete a group and all its memberships", "GROUP", 1, func(ctx context.Context, us *auth.Users, a []string) (string, error) {
				return "deleted group " + a[0], us.DeleteGroup(ctx, auth.CommandLine, a[0])
			}),
			groupsArgsCommand("add-member", "add a user to a group (a local membership)", "GROUP USER", 2, func(ctx context.Context, us *auth.Users, a []string) (string, error) {
				return fmt.Sprintf("added %s to group %s", a[1], a[0]), us.SetMember(ctx, auth.CommandLine, a[0], a[1], true)
			}),
			groupsArgsCommand("remove-member", "remove a user's local membership of a group", "GROUP USER", 2, func(ctx context.Context, us *auth.Users, a []string) (string, error) {
				return fmt.Sprintf("removed %s from group %s", a[1], a[0]), us.SetMember(ctx, auth.CommandLine, a[0], a[1], false)
			}),
		},
		Action: groupAction,
	}
}

// withGroups is withUsers with the configuration's auth.admin_groups,
// which a membership change applies to the member at once.
func withGroups(ctx context.Context, cmd *cli.Command, f func(*auth.Users) error) error {
	inst, err := openInstance(cmd, false)
	if err != nil {
		return err
	}
	cfg, err := inst.Load("")
	if err != nil {
		return err
	}
	return withUsers(ctx, cmd, false, func(us *auth.Users) error {
		if err := us.SetAdminGroups(cfg.Auth.AdminGroups); err != nil {
			return err
		}
		return f(us)
	})
}

func groupsArgsCommand(name, usage, args string, n int, run func(context.Context, *auth.Users, []string) (string, error)) *cli.Command {
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: args,
		Flags:     []cli.Flag{instanceFlag()},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != n {
				return usageError(cmd, "want %s", args)
			}
			return withGroups(ctx, cmd, func(us *auth.Users) error {
				msg, err := run(ctx, us, cmd.Args().Slice())
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.Root().Writer, msg)
				return nil
			})
		},
	}
}

func groupsListCommand() *cli.Command {
	return &cli.Command{
		Name:        "list",
		Usage:       "list the groups and their members",
		Description: "Prints every group with its members and where each membership comes from (local, ldap, oidc).",
		Flags:       []cli.Flag{instanceFlag(), &cli.BoolFlag{Name: "json", Usage: "print the groups as a JSON array"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := noArgs(cmd); err != nil {
				return err
			}
			return withGroups(ctx, cmd, func(us *auth.Users) error {
				gs, err := us.Groups(ctx)
				if err != nil {
					return err
				}
				out := cmd.Root().Writer
				if cmd.Bool("json") {
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					return enc.Encode(gs)
				}
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "GROUP\tMEMBERS")
				for _, g := range gs {
					var ms []string
					for _, m := range g.Members {
						ms = append(ms, m.UserName+" ("+m.Source+")")
					}
					fmt.Fprintf(tw, "%s\t%s\n", g.Name, strings.Join(ms, ", "))
				}
				return tw.Flush()
			})
		},
	}
}
