package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/integrations/mcp"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// probeModes are the modes `check --probe` runs the suite under, in the
// order of the matrix's columns.
var probeModes = []seccomp.Mode{seccomp.Off, seccomp.Log, seccomp.Enforce}

// probeReport is the seccomp probe matrix of `check --probe`.
type probeReport struct {
	Arch   string `json:"arch"`
	Compat string `json:"compat"`
	// Modes holds the probe program's report for each mode.
	Modes map[seccomp.Mode]*seccomp.ProbeReport `json:"modes"`
	// Toolchains ran under enforce, in a workspace.
	Toolchains []seccomp.ProbeCheck `json:"toolchains"`
	// AbstractUnix ran in a sandbox that shares the network: the
	// host's abstract UNIX sockets out of reach, the sandbox's own working.
	AbstractUnix []seccomp.ProbeCheck `json:"abstract_unix"`
	// Failures lists every result that differs from what its mode
	// promises; empty when the matrix is all-pass.
	Failures []string `json:"failures"`
}

// probeSeccomp runs the probe suite in a workspace sandbox under every
// mode, then the toolchains under enforce.
func probeSeccomp(ctx context.Context, o checkOptions) (*probeReport, error) {
	base := o.workspaceBase
	if base == "" {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "codumentor-probe-")
	if err != nil {
		return nil, fmt.Errorf("probe workspace: %w", err)
	}
	defer overlay.RemoveAll(dir)
	r := &probeReport{Modes: map[seccomp.Mode]*seccomp.ProbeReport{}}
	for _, m := range probeModes {
		w := &sandboxkit.Workspace{Lower: filepath.Join(dir, string(m), "lower"), Upper: filepath.Join(dir, string(m), "upper"), Work: filepath.Join(dir, string(m), "work")}
		for _, d := range []string{w.Lower, w.Upper, w.Work} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return nil, fmt.Errorf("probe workspace: %w", err)
			}
		}
		p, err := agentcore.WorkspacePolicy(sandboxkit.Settings{Bwrap: o.bwrap, Seccomp: m}, w)
		if err != nil {
			return nil, err
		}
		rep, err := diag.Probe(ctx, p)
		if err != nil {
			return nil, err
		}
		r.Modes[m], r.Arch, r.Compat = rep, rep.Arch, rep.Compat
		r.Failures = append(r.Failures, rep.Failures(m)...)
		if m == seccomp.Enforce {
			r.Toolchains = diag.ProbeToolchains(ctx, p)
			for _, t := range r.Toolchains {
				if !t.OK && !t.Skipped {
					r.Failures = append(r.Failures, fmt.Sprintf("enforce: toolchain %s failed: %s", t.Name, t.Detail))
				}
			}
		}
	}
	p, err := mcp.ServerPolicy(sandboxkit.Settings{Bwrap: o.bwrap, Seccomp: seccomp.Enforce}, mcp.ServerConfig{Name: "probe", Network: mcp.NetworkHost})
	if err != nil {
		return nil, err
	}
	r.AbstractUnix = diag.ProbeAbstractUnix(ctx, p)
	for _, c := range r.AbstractUnix {
		// Where the kernel cannot scope them, the exposure is the
		// Doctor's landlock check, a warning (WARN).
		if !c.OK && diag.AbstractUnixScoped() {
			r.Failures = append(r.Failures, fmt.Sprintf("shared network: %s: %s", c.Name, c.Detail))
		}
	}
	return r, nil
}

// printProbe prints the matrix: one row per probed call with its
// outcome under each mode, then what must keep working.
func printProbe(out io.Writer, r *probeReport) {
	fmt.Fprintf(out, "\nseccomp probe matrix (%s; compat table: %s)\n\n", r.Arch, r.Compat)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "CALL\tABI")
	for _, m := range probeModes {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(string(m)))
	}
	fmt.Fprintln(tw, "\tVERDICT")
	first := r.Modes[probeModes[0]]
	for i, c := range first.Calls {
		fmt.Fprintf(tw, "%s\t%s", c.Call, c.ABI)
		verdict := "ok"
		for _, m := range probeModes {
			rep := r.Modes[m]
			if i >= len(rep.Calls) || rep.Calls[i].Call != c.Call || rep.Calls[i].ABI != c.ABI {
				fmt.Fprint(tw, "\t?")
				verdict = "FAIL"
				continue
			}
			fmt.Fprintf(tw, "\t%s", rep.Calls[i].Outcome())
			if rep.Calls[i].Verdict(m) != nil {
				verdict = "FAIL"
			}
		}
		fmt.Fprintf(tw, "\t%s\n", verdict)
	}
	tw.Flush()
	for _, c := range first.Calls {
		if c.ABI == "x32" && c.Reached && c.Errno == int(syscall.ENOSYS) {
			fmt.Fprintln(out, "\nx32: absent from this kernel (with the filter off the call reached the kernel, which answered ENOSYS); enforce refuses every x32 call regardless")
		}
	}

	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "MUST KEEP WORKING")
	for _, m := range probeModes {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(string(m)))
	}
	fmt.Fprintln(tw)
	for i, w := range first.Works {
		fmt.Fprint(tw, w.Name)
		for _, m := range probeModes {
			rep := r.Modes[m]
			fmt.Fprintf(tw, "\t%s", checkStatus(i < len(rep.Works) && rep.Works[i].OK, false))
		}
		fmt.Fprintln(tw)
	}
	for _, t := range r.Toolchains {
		fmt.Fprintf(tw, "%s\t\t\t%s\n", t.Name, checkStatus(t.OK, t.Skipped))
	}
	for _, c := range r.AbstractUnix {
		status := checkStatus(c.OK, false)
		if !c.OK && !diag.AbstractUnixScoped() {
			status = "WARN"
		}
		fmt.Fprintf(tw, "%s\t\t\t%s\n", c.Name, status)
	}
	tw.Flush()
	if len(r.Failures) == 0 {
		fmt.Fprintln(out, "\nprobe: every call behaved as its mode promises")
		return
	}
	fmt.Fprintln(out, "\nprobe FAILED:")
	for _, f := range r.Failures {
		fmt.Fprintln(out, "  "+oneLine(f))
	}
}

func checkStatus(ok, skipped bool) string {
	switch {
	case skipped:
		return "skipped"
	case ok:
		return "ok"
	}
	return "FAIL"
}
