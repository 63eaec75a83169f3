package sandboxkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// probeFlag makes Main run the seccomp probe program (inside a sandbox
// Probe started).
const probeFlag = "--sandboxkit-seccomp-probe"

// runProbes is the probe program: it writes its report to stdout.
func runProbes() int {
	rep, err := seccomp.RunProbes()
	if err != nil {
		fmt.Fprintln(os.Stderr, "seccomp probe:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

// Probe runs the seccomp probe suite in a sandbox built from p, whose
// Seccomp is the filter under test: every call of the blocklist, also
// with high-bit arguments and through the compat table, and what must
// keep working (fork and exec, threads, sockets, prctl, mmap). Judge
// the result with ProbeCall.Verdict for the filter's mode. The probe
// program is this binary, run again inside the sandbox; like every
// sandbox it needs Main.
func Probe(ctx context.Context, p *Policy) (*seccomp.ProbeReport, error) {
	var out, errOut bytes.Buffer
	c := Command(ctx, p, probeFlag)
	c.self = true
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("sandboxkit: seccomp probe: %w: %s", err, strings.TrimSpace(errOut.String()))
	}
	var rep seccomp.ProbeReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("sandboxkit: seccomp probe: bad report: %w", err)
	}
	return &rep, nil
}

// A toolchain check is real work a filter must not break.
type toolchainCheck struct {
	name   string
	needs  string // the host command it needs; the sandbox sees the host's /usr
	script string
	want   string // the last line of output
}

var toolchainChecks = []toolchainCheck{
	{name: "sh pipeline", needs: "sh", want: "A B",
		script: `printf 'b\na\nc\n' | sort | head -n 2 | tr a-z A-Z | tr '\n' ' ' | sed 's/ $//'; echo`},
	{name: "git init and commit", needs: "git", want: "1",
		script: `git init -q repo && cd repo && echo hello > f && git add f && git -c user.name=probe -c user.email=probe@localhost commit -qm first && git rev-list --count HEAD`},
	{name: "cc hello.c with a thread", needs: "cc", want: "hello from a thread",
		script: `cat > hello.c <<'C'
#include <pthread.h>
#include <stdio.h>
static void *run(void *arg) { puts("hello from a thread"); return arg; }
int main(void) { pthread_t t; if (pthread_create(&t, 0, run, 0)) return 1; return pthread_join(t, 0); }
C
cc -pthread -o hello hello.c && ./hello`},
	{name: "go build", needs: "go", want: "hello from go",
		script: `mkdir gomod && cd gomod && printf 'module probe\n\ngo 1.21\n' > go.mod && printf 'package main\n\nfunc main() { println("hello from go") }\n' > main.go && go build -o hello . && ./hello 2>&1`},
}

// ProbeToolchains runs real toolchains in a sandbox built from p: a sh
// pipeline, git init and commit, a C program with a thread, and a Go
// build. They run in the workspace when p has one, else in a fresh
// directory under /tmp. A toolchain the host does not have is reported
// as skipped; the sandbox sees the host's /usr, nothing else of it.
func ProbeToolchains(ctx context.Context, p *Policy) []seccomp.ProbeCheck {
	var out []seccomp.ProbeCheck
	dir := "/tmp"
	if p.Workspace != nil {
		dir = WorkspaceDir
	}
	for _, t := range toolchainChecks {
		path, err := exec.LookPath(t.needs)
		if err != nil {
			out = append(out, seccomp.ProbeCheck{Name: t.name, Skipped: true, Detail: t.needs + " is not installed"})
			continue
		}
		var buf bytes.Buffer
		c := Command(ctx, p, "sh", "-c", `cd "$(mktemp -d -p "$PROBE_DIR")" && `+t.script)
		c.Env = []string{"PROBE_DIR=" + dir, "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "GOPROXY=off",
			"PATH=" + DefaultPath + ":" + filepath.Dir(path)}
		c.Stdout, c.Stderr = &buf, &buf
		err = c.Run()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		last := strings.TrimSpace(lines[len(lines)-1])
		check := seccomp.ProbeCheck{Name: t.name, OK: err == nil && last == t.want}
		if !check.OK {
			var ee *ExitError
			if err != nil && !errors.As(err, &ee) {
				check.Detail = err.Error() + ": "
			}
			check.Detail += fmt.Sprintf("want %q, got: %s", t.want, strings.TrimSpace(buf.String()))
		}
		out = append(out, check)
	}
	return out
}
