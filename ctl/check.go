package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
	"github.com/urfave/cli/v3"
)

// checkOptions are the inputs of every check source.
type checkOptions struct {
	bwrap         string
	workspaceBase string
	// instance, when set, adds the instance directory's checks.
	instance string
	// limits are the sandbox limits checked ("limits": a delegated
	// cgroup, or rlimits only): the instance's, else the defaults.
	limits sandboxkit.Limits
}

// checkSources produce the checks of `codumentorctl check`, in order.
// Each check is required: one failure fails the command. Later sources
// (seccomp, instance) are appended here.
var checkSources = []func(context.Context, checkOptions, *checkReport){
	sandboxChecks,
	instanceChecks,
	browserChecks,
}

// checkReport is the output of `check --json`: the sandbox Doctor's Report
// (its Checks extended by later sources) plus the overall verdict.
type checkReport struct {
	*sandboxkit.Report
	// Probe is the seccomp probe matrix, with --probe.
	Probe *probeReport `json:"probe,omitempty"`
	OK    bool         `json:"ok"`
}

func sandboxChecks(ctx context.Context, o checkOptions, r *checkReport) {
	// A copy: the Doctor caches its Report, and later sources append.
	rep := *sandboxkit.Doctor(ctx, sandboxkit.DoctorOptions{Bwrap: o.bwrap, ProbeDir: o.workspaceBase, Limits: &o.limits, InstallRemedy: config.InstallRemedy, CgroupRemedy: config.CgroupRemedy()})
	rep.Checks = slices.Clone(rep.Checks)
	r.Report = &rep
}

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "check that this machine can run Codumentor's sandbox",
		Description: "Runs the sandbox pre-flight checks (the same the server runs before starting any\n" +
			"sandbox): bwrap present, version >= " + diag.MinBwrapVersion + ", not setuid, user namespaces,\n" +
			"/proc, an overlay mount in the workspace base dir, loopback in a new network namespace,\n" +
			"and this architecture's seccomp filters (digests verified, the enforce filter loaded),\n" +
			"and the resource limits: a cgroup subtree delegated to this user, or a warning\n" +
			"(\"limits: rlimits only\", not a failure unless sandbox.require_limits is set);\n" +
			"and Landlock's abstract UNIX socket scope, without which sandboxes that share the\n" +
			"host network reach the host's abstract sockets (a warning, not a failure);\n" +
			"and the headless browser (row browser): its binary and whether it starts in Chrome's\n" +
			"sandbox (a warning, a failure only when --instance enables webretrieve or mermaid_render).\n" +
			"Each failed check says how to fix it; checks after a failed one are not run.\n" +
			"With --probe it then runs the seccomp probe suite in a workspace sandbox under each\n" +
			"mode (off, log, enforce) and prints the matrix: every blocklisted call, what must keep\n" +
			"working, real toolchains under enforce, and the host's abstract sockets from a\n" +
			"shared-network sandbox; about two minutes on 2 cores (most of it the Go race check\n" +
			"building the race-instrumented standard library from a cold cache).\n" +
			"With --instance DIR it also checks the server's instance directory (modes,\n" +
			"config.yaml, auth.jwt_secret, the system prompt template in effect and that it parses,\n" +
			"the database in WAL mode), without changing it, and\n" +
			"runs the sandbox checks with its sandbox.bwrap and on its workspaces' filesystem.\n" +
			"Every check is required (a warning is not a failure): exit status 1 when any fails.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.BoolFlag{Name: "probe", Usage: "also run the seccomp probe suite and print its matrix"},
			&cli.StringFlag{Name: "bwrap", Usage: "bubblewrap binary (default: bwrap on PATH)", TakesFile: true},
			&cli.StringFlag{Name: "workspace-base", Usage: "directory that will hold workspace upper dirs; the overlay check mounts one there (default: the temp dir, or DIR/workspaces with --instance)", TakesFile: true},
			// No default, unlike the other commands' --instance: a machine
			// check must not fail over an instance nobody asked about.
			&cli.StringFlag{Name: "instance", Usage: "also check `DIR`, the server's instance directory: modes, config.yaml, auth.jwt_secret, the database and its WAL mode; the sandbox checks then use its sandbox.bwrap and workspaces", TakesFile: true},
		},
		Action: runCheck,
	}
}

func runCheck(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	o := checkOptions{bwrap: cmd.String("bwrap"), workspaceBase: cmd.String("workspace-base"), instance: cmd.String("instance"), limits: config.DefaultSandboxLimits()}
	for _, p := range []*string{&o.instance, &o.workspaceBase} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return exitWith(exitFailure, err)
		}
		*p = abs
	}
	if o.instance != "" {
		// Check the sandbox the server will run: its bwrap, and overlays on
		// the filesystem of its workspaces. A config that does not load is
		// reported by the instance's config check.
		inst := config.Instance{Dir: o.instance}
		if cfg, err := inst.Load(""); err == nil {
			if o.bwrap == "" {
				o.bwrap = cfg.Sandbox.Bwrap
			}
			o.limits = cfg.Sandbox.SandboxLimits()
		}
		if o.workspaceBase == "" {
			o.workspaceBase = inst.WorkspacesDir()
		}
	}
	r := &checkReport{}
	for _, source := range checkSources {
		source(ctx, o, r)
	}
	var failed []string
	for _, c := range r.Checks {
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	r.OK = len(failed) == 0 && len(r.Checks) > 0
	if r.OK && cmd.Bool("probe") {
		p, err := probeSeccomp(ctx, o)
		if err != nil {
			return exitWith(exitFailure, fmt.Errorf("seccomp probe: %w", err))
		}
		r.Probe = p
		if len(p.Failures) > 0 {
			r.OK = false
			failed = append(failed, "seccomp-probe")
		}
	}
	out := cmd.Root().Writer
	if cmd.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		printChecks(out, r)
		if r.Probe != nil {
			printProbe(out, r.Probe)
		}
	}
	if !r.OK {
		return exitWith(exitFailure, fmt.Errorf("check failed: %s", strings.Join(failed, ", ")))
	}
	return nil
}

// printChecks prints one row per check and, under a failed one, its remedy.
func printChecks(out io.Writer, r *checkReport) {
	if r.Bwrap != "" {
		fmt.Fprintf(out, "bwrap %s (version %s)\n\n", r.Bwrap, orDash(r.Version))
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	for _, c := range r.Checks {
		status := "ok"
		switch {
		case !c.OK:
			status = "FAIL"
		case c.Warning:
			status = "WARN"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, status, oneLine(c.Detail))
		if (!c.OK || c.Warning) && c.Remedy != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Remedy)
		}
	}
	tw.Flush()
	if !slices.ContainsFunc(r.Checks, func(c sandboxkit.Check) bool { return !c.OK }) {
		fmt.Fprintln(out, "\nall checks passed")
	} else {
		fmt.Fprintln(out, "\ncheck failed: fix the failed checks above (the sandbox checks after a failed one do not run)")
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
