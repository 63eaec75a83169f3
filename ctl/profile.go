package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/setup"
	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/integrations/mcp"
	"github.com/codumentor/codumentor/integrations/office"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/urfave/cli/v3"
)

// Placeholder inputs for `sandbox profile`: the argv shows where real
// paths go; nothing is read or started.
var (
	exampleWorkspace = &sandboxkit.Workspace{
		Lower: "/srv/codumentor/lower",
		Upper: "/srv/codumentor/upper",
		Work:  "/srv/codumentor/work",
	}
	exampleInput = "/srv/codumentor/input/document.docx"
	exampleArgv  = []string{"CMD", "ARG..."}
)

// profileNames are the sandboxes the server starts, by the label its
// audit log and metrics give them; profilePolicy builds each with its
// owner's constructor.
var profileNames = []string{"workspace", "setup", "external-agent", "office", "mcp", "host-readonly", "git"}

// profilePolicy is the example Policy of one profile, under the default
// settings; allow is the egress allow-list of those that take one
// (setup, external-agent, mcp).
func profilePolicy(name string, allow []string) (*sandboxkit.Policy, error) {
	var s sandboxkit.Settings
	switch name {
	case "workspace":
		return agentcore.WorkspacePolicy(s, exampleWorkspace)
	case "setup":
		return setup.Policy(s, 0, exampleWorkspace, false, allow)
	case "external-agent":
		return agentcore.ExternalAgentPolicy(s, exampleWorkspace, allow)
	case "office":
		return office.WorkerPolicy(s, exampleInput)
	case "mcp":
		return mcp.ServerPolicy(s, mcp.ServerConfig{Name: "example", Command: exampleArgv[0], EgressAllowlist: allow})
	case "host-readonly":
		return agentcore.InvestigationPolicy(s, nil, false)
	case "git":
		return git.MirrorPolicy(s, "/srv/codumentor/repos/ID.git", "/srv/codumentor/repos/snapshots/ID-COMMIT")
	}
	return nil, fmt.Errorf("unknown profile %q (known: %s)", name, strings.Join(profileNames, ", "))
}

func profileCommand() *cli.Command {
	return &cli.Command{
		Name:      "profile",
		Usage:     "print the bwrap command line of each sandbox profile",
		ArgsUsage: "[NAME...]",
		Description: "Prints, for each named profile (default: all of " + strings.Join(profileNames, ", ") + "),\n" +
			"the bwrap argv that sandboxkit builds for it, one option per line. The workspace\n" +
			"dirs (" + exampleWorkspace.Lower + ", …), the office input (" + exampleInput + ") and\n" +
			"the command (" + strings.Join(exampleArgv, " ") + ") are placeholders; the network is not shared\n" +
			"(sharing adds --share-net and a read-only /etc/resolv.conf). Numbers after --file are\n" +
			"descriptors bwrap reads the listed contents from.\n" +
			"With --allow-host, the profiles that take an egress allow-list (setup,\n" +
			"external-agent, mcp) show it: the proxy's socket bound in (" + diag.EgressSocketPlaceholder + "\n" +
			"stands for the one each sandbox gets) and the *_PROXY variables.\n" +
			"With --json: an object {profile name: argv}.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print {name: argv} as JSON"},
			&cli.StringSliceFlag{Name: "allow-host", Usage: "show the profiles with this egress allow-list entry `HOST[:PORT]` (repeatable)"},
		},
		Action: runProfile,
	}
}

// profileLaunch builds the example launch of one profile.
func profileLaunch(name string, allow []string) (*diag.Launch, error) {
	p, err := profilePolicy(name, allow)
	if err != nil {
		return nil, err
	}
	return diag.Build(p, exampleArgv...)
}

func runProfile(_ context.Context, cmd *cli.Command) error {
	names := cmd.Args().Slice()
	if len(names) == 0 {
		names = profileNames
	}
	for _, n := range names {
		if !slices.Contains(profileNames, n) {
			return usageError(cmd, "unknown profile %q (known: %s)", n, strings.Join(profileNames, ", "))
		}
	}
	allow := cmd.StringSlice("allow-host")
	if err := egress.ParseAllow(allow); err != nil {
		return usageError(cmd, "--allow-host: %v", err)
	}
	launches := make([]*diag.Launch, len(names))
	for i, n := range names {
		l, err := profileLaunch(n, allow)
		if err != nil {
			return fmt.Errorf("profile %s: %w", n, err)
		}
		launches[i] = l
	}
	out := cmd.Root().Writer
	if cmd.Bool("json") {
		m := map[string][]string{}
		for i, n := range names {
			m[n] = launches[i].Args
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	fmt.Fprintf(out, "# Paths under /srv/codumentor and %q are placeholders.\n", strings.Join(exampleArgv, " "))
	// What the argv does not show: how bwrap itself is started.
	fmt.Fprint(out, "# Each bwrap is started with an empty environment and only the descriptors listed,\n"+
		"# by sandboxkit's spawner, as pid 1 of a pid namespace of its own: when bwrap dies,\n"+
		"# at any moment, the kernel kills everything in its sandbox.\n")
	d := sandboxkit.DefaultLimits()
	// Nor the limits outside the argv (defaults; the server's sandbox.limits).
	fmt.Fprintf(out, "# Each runs in a cgroup of its own (pids %d, memory %d MiB without swap, cpu %g) when\n"+
		"# one is delegated, with hard rlimits set by the spawner (file size %d MiB, open files %d,\n"+
		"# no core dumps) and a disk budget of %d MiB on its workspace's changes.\n",
		d.Pids, d.Memory>>20, d.CPU, d.FileSize>>20, d.OpenFiles, d.Disk>>20)
	w := office.WorkerLimits()
	fmt.Fprintf(out, "# The office worker's limits are its own (pids %d, memory %d MiB, cpu %g, file size %d MiB,\n"+
		"# open files %d), and per sandbox: address space %d MiB, CPU time %s (RLIMIT_AS, RLIMIT_CPU).\n",
		w.Pids, w.Memory>>20, w.CPU, w.FileSize>>20, w.OpenFiles, w.AddressSpace>>20, w.CPUTime)
	if len(allow) > 0 {
		fmt.Fprintf(out, "# Egress allow-list of setup, external-agent and mcp: %s. Those sandboxes keep their own\n"+
			"# network (only lo) and reach these destinations only through the egress proxy on the host.\n", strings.Join(allow, ", "))
	}
	for i, n := range names {
		fmt.Fprintf(out, "\n# profile %s\n", n)
		printArgv(out, launches[i])
	}
	return nil
}

// bwrapArity is how many arguments each bwrap option takes, so the argv
// can be shown one option per line.
var bwrapArity = map[string]int{
	"--overlay": 3,
	"--bind":    2, "--bind-try": 2, "--ro-bind": 2, "--ro-bind-try": 2, "--dev-bind": 2,
	"--symlink": 2, "--file": 2, "--setenv": 2, "--bind-data": 2, "--ro-bind-data": 2,
	"--cap-drop": 1, "--cap-add": 1, "--hostname": 1, "--proc": 1, "--dev": 1, "--tmpfs": 1,
	"--dir": 1, "--chdir": 1, "--overlay-src": 1, "--tmp-overlay": 1, "--ro-overlay": 1,
	"--seccomp": 1, "--add-seccomp-fd": 1, "--json-status-fd": 1, "--info-fd": 1,
	"--sync-fd": 1, "--block-fd": 1, "--unsetenv": 1, "--uid": 1, "--gid": 1,
	"--remount-ro": 1, "--chmod": 2, "--perms": 1, "--size": 1, "--userns": 1, "--pidns": 1,
}

// printArgv prints l.Args one option per line, the command last, and the
// contents bwrap reads from inherited descriptors.
func printArgv(out io.Writer, l *diag.Launch) {
	args := l.Args
	fmt.Fprintln(out, shellQuote(args[0]))
	for i := 1; i < len(args); {
		if args[i] == "--" {
			fmt.Fprintf(out, "  -- %s\n", quoteAll(args[i+1:]))
			break
		}
		n := bwrapArity[args[i]]
		end := min(i+1+n, len(args))
		fmt.Fprintf(out, "  %s\n", quoteAll(args[i:end]))
		i = end
	}
	// Launch.Files[k] is read from descriptor 3+k (see diag.Launch);
	// name each by the option that reads it.
	for k, data := range l.Files {
		fd := strconv.Itoa(3 + k)
		what := ""
		for i := 1; i+1 < len(args) && args[i] != "--"; i++ {
			switch {
			case args[i] == "--file" && args[i+1] == fd && i+2 < len(args):
				what = " (" + args[i+2] + ")"
			case args[i] == "--seccomp" && args[i+1] == fd:
				what = " (seccomp filter)"
			}
		}
		if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
			fmt.Fprintf(out, "  # fd %s%s: %d bytes\n", fd, what, len(data))
			continue
		}
		fmt.Fprintf(out, "  # fd %s%s:\n", fd, what)
		for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			fmt.Fprintf(out, "  #   %s\n", line)
		}
	}
}

func quoteAll(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it, so a reviewer
// can read each argument's bounds.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
