package diag

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/internal/invocation"
	"github.com/codumentor/codumentor/sandboxkit/internal/probe"
	"github.com/codumentor/codumentor/sandboxkit/randid"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// Probe runs the seccomp probe suite in a sandbox built from p, whose
// Seccomp is the filter under test: every call of the blocklist, also
// with high-bit arguments and through the compat table, and what must
// keep working (fork and exec, threads, sockets, prctl, mmap). Judge
// the result with ProbeCall.Verdict for the filter's mode. The probe
// program is this binary, run again inside the sandbox; like every
// sandbox it needs sandboxkit.Main.
func Probe(ctx context.Context, p *sandboxkit.Policy) (*seccomp.ProbeReport, error) {
	var out, errOut bytes.Buffer
	c := sandboxkit.SelfCommand(ctx, p, probe.SeccompFlag)
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
	// One Go check: a cold build of the race-instrumented standard
	// library is the slowest thing here. The race runtime (TSan) maps
	// its shadow memory at fixed addresses and may re-execute itself
	// with a persona: what a filter must not break.
	{name: "go build and test -race", needs: "go", want: "race ok",
		script: `mkdir gorace && cd gorace && printf 'module probe\n\ngo 1.22\n' > go.mod && cat > race_test.go <<'GO'
package probe

import (
	"sync"
	"testing"
)

func TestParallel(t *testing.T) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	n := 0
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); mu.Lock(); n++; mu.Unlock() }()
	}
	wg.Wait()
	if n != 8 {
		t.Fatal(n)
	}
}
GO
go test -race -count=1 . && echo race ok`},
	{name: "gcc and make", needs: "make", want: "sum 42",
		script: `printf 'int add(int a, int b) { return a + b; }\n' > add.c && printf '#include <stdio.h>\nint add(int, int);\nint main(void) { printf("sum %%d\\n", add(40, 2)); return 0; }\n' > main.c &&
printf 'sum: main.o add.o\n\t$(CC) -o $@ main.o add.o\n' > Makefile && make -s -j2 CC=gcc && ./sum`},
	{name: "python multiprocessing and asyncio", needs: "python3", want: "285 285 285 sub",
		script: `cat > mp.py <<'PY'
import asyncio, multiprocessing as mp

def square(x):
    return x * x

async def child():
    p = await asyncio.create_subprocess_exec("echo", "sub", stdout=asyncio.subprocess.PIPE)
    out, _ = await p.communicate()
    return out.decode().strip()

if __name__ == "__main__":
    res = []
    for method in ("fork", "forkserver", "spawn"):
        with mp.get_context(method).Pool(2) as pool:
            res.append(sum(pool.map(square, range(10))))
    res.append(asyncio.run(child()))
    print(*res)
PY
python3 mp.py`},
	{name: "node child_process and workers", needs: "node", want: "child 42",
		script: `cat > w.js <<'JS'
const { execFileSync } = require("child_process");
const { Worker } = require("worker_threads");
const out = execFileSync("sh", ["-c", "echo child"]).toString().trim();
const w = new Worker("require('worker_threads').parentPort.postMessage(6 * 7)", { eval: true });
w.on("message", (m) => { console.log(out + " " + m); w.terminate(); });
JS
node w.js`},
	{name: "git gc and clone", needs: "git", want: "1 2",
		script: `export GIT_AUTHOR_NAME=probe GIT_AUTHOR_EMAIL=probe@localhost GIT_COMMITTER_NAME=probe GIT_COMMITTER_EMAIL=probe@localhost &&
git init -q repo && cd repo && seq 1 2000 > f && git add f && git commit -qm one && seq 2 2001 > f && git commit -qam two &&
git gc -q && cd .. && git clone -q repo clone && echo "$(git -C repo count-objects -v | awk '/^packs:/ {print $2}') $(git -C clone rev-list --count HEAD)"`},
}

// ProbeToolchains runs real toolchains in a sandbox built from p: a sh
// pipeline, git (init, commit, gc, clone), C with a thread and with
// make, a Go build and test under the race detector, Python
// multiprocessing (fork, forkserver, spawn) and asyncio, and Node child
// processes and workers. They run in the workspace when p has one, else
// in a fresh directory under /tmp. A toolchain the host does not have is
// reported as skipped; the sandbox sees the host's /usr, nothing else of
// it.
func ProbeToolchains(ctx context.Context, p *sandboxkit.Policy) []seccomp.ProbeCheck {
	var out []seccomp.ProbeCheck
	dir := "/tmp"
	if p.Workspace != nil {
		dir = sandboxkit.WorkspaceDir
	}
	for _, t := range toolchainChecks {
		path, err := exec.LookPath(t.needs)
		if err != nil {
			out = append(out, seccomp.ProbeCheck{Name: t.name, Skipped: true, Detail: t.needs + " is not installed"})
			continue
		}
		var buf bytes.Buffer
		c := sandboxkit.Command(ctx, p, "sh", "-c", `cd "$(mktemp -d -p "$PROBE_DIR")" && `+t.script)
		c.Env = []string{"PROBE_DIR=" + dir, "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "GOPROXY=off",
			"PATH=" + invocation.DefaultPath + ":" + filepath.Dir(path)}
		c.Stdout, c.Stderr = &buf, &buf
		err = c.Run()
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		last := strings.TrimSpace(lines[len(lines)-1])
		check := seccomp.ProbeCheck{Name: t.name, OK: err == nil && last == t.want}
		if !check.OK {
			var ee *sandboxkit.ExitError
			if err != nil && !errors.As(err, &ee) {
				check.Detail = err.Error() + ": "
			}
			check.Detail += fmt.Sprintf("want %q, got: %s", t.want, strings.TrimSpace(buf.String()))
		}
		out = append(out, check)
	}
	return out
}

// hostAbstractListener listens on a fresh abstract UNIX socket of this
// process (named "@" + name) until close is called, and
// counts the connections it accepts.
func hostAbstractListener() (name string, accepted *atomic.Int64, close func(), err error) {
	name = randid.New("sandboxkit-host-probe-")
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		return "", nil, nil, fmt.Errorf("listen on an abstract socket of the host: %w", err)
	}
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return name, accepted, func() { ln.Close() }, nil
}

// ProbeAbstractUnix checks abstract UNIX sockets in a sandbox built from
// p: one this process listens on (on the host) must be out of reach,
// and one the sandbox listens on itself must work. Without ShareNet the
// network namespace hides the host's; with it, Landlock's scope must (see
// AbstractUnixScoped), and where the kernel lacks it the check fails and
// says so. The probe program is this binary, run again inside the
// sandbox; like every sandbox it needs sandboxkit.Main.
func ProbeAbstractUnix(ctx context.Context, p *sandboxkit.Policy) []seccomp.ProbeCheck {
	host := seccomp.ProbeCheck{Name: "host abstract UNIX socket out of reach"}
	inside := seccomp.ProbeCheck{Name: "abstract UNIX socket inside the sandbox"}
	if p.ShareNet {
		host.Name += " (shared network)"
	}
	fail := func(err error) []seccomp.ProbeCheck {
		host.Detail, inside.Detail = err.Error(), err.Error()
		return []seccomp.ProbeCheck{host, inside}
	}
	name, accepted, stop, err := hostAbstractListener()
	if err != nil {
		return fail(err)
	}
	defer stop()
	var out, errOut bytes.Buffer
	c := sandboxkit.SelfCommand(ctx, p, probe.AbstractFlag, name)
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		return fail(fmt.Errorf("abstract socket probe: %w: %s", err, strings.TrimSpace(errOut.String())))
	}
	var r probe.AbstractResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return fail(fmt.Errorf("abstract socket probe: bad report %q: %w", out.String(), err))
	}
	return judgeAbstract(p, r, accepted.Load(), host, inside)
}

// judgeAbstract turns what the probe program reported, and how many
// connections the host's listener saw, into the two checks.
func judgeAbstract(p *sandboxkit.Policy, r probe.AbstractResult, accepted int64, host, inside seccomp.ProbeCheck) []seccomp.ProbeCheck {
	// Landlock refuses with EPERM; a private network namespace has no
	// such socket (ECONNREFUSED).
	want := "ECONNREFUSED"
	if p.ShareNet {
		want = "EPERM"
	}
	host.OK = r.Host == want && accepted == 0
	host.Detail = fmt.Sprintf("connect: %s (want %s), host listener accepted %d", r.Host, want, accepted)
	if !host.OK && p.ShareNet && !AbstractUnixScoped() {
		host.Detail += "; this kernel lacks Landlock's abstract socket scope (Linux 6.12), so shared-network sandboxes reach the host's abstract sockets"
	}
	inside.OK = r.Inside == "ok"
	inside.Detail = "connect: " + r.Inside
	return []seccomp.ProbeCheck{host, inside}
}
