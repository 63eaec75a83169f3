package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/headtail"

	"golang.org/x/sys/unix"
)

// The spawner starts every bwrap. It is this same binary, re-executed
// (see Main) as pid 1 of a pid namespace of its own, and runs the
// supervisor's loop; each bwrap it starts is in turn pid 1 of its own pid
// namespace, nested in the spawner's.
//
// Why: bwrap arms its child's --die-with-parent only just before exec,
// after setting up the sandbox. If bwrap dies during set-up (the server
// was killed, a context cancelled the run), its child would finish and
// run the command tied to nothing. When a namespace's pid 1 dies, the
// kernel kills everything in it and in the namespaces below, at any
// moment: killing bwrap kills its sandbox, and the death of the spawner
// (its control socket closed because the server died, or its Pdeathsig)
// kills every sandbox. A pid namespace needs CAP_SYS_ADMIN, so the
// spawner is in a user namespace that maps only the server's ids; paying
// for that namespace once per server, not once per sandbox, is what keeps
// a launch as cheap as starting bwrap directly.

// SpawnerFlag is os.Args[1] of the re-executed binary.
const SpawnerFlag = "--sandboxkit-spawner"

// ErrSpawnerDied is wrapped by the errors of sandboxes whose spawner
// died; the next launch starts a new spawner.
var ErrSpawnerDied = errors.New("sandboxkit: the sandbox spawner died")

// ErrNoMain is the error of every way to start a sandbox (Run, Session,
// the Doctor's probes) when the program did not call Main.
var ErrNoMain = errors.New("sandboxkit: starting a sandbox needs the spawner (and a Session its supervisor): call sandboxkit.Main() first in main (and in TestMain)")

// MainCalled records that the program called sandboxkit.Main, so a
// launch can count on the binary turning into the spawner or the
// supervisor when re-executed.
var MainCalled atomic.Bool

// spawners holds the process-wide spawners, started on first use: one
// per set of rlimits, which a spawner sets on itself once (hard and soft,
// beyond the sandbox's reach) and every bwrap it starts inherits. In
// practice one or two: the profiles' and the Doctor's (none).
var spawners struct {
	mu sync.Mutex
	m  map[Rlimits]*Spawner
}

// Spawner is a running spawner.
type Spawner struct {
	Client *Client
	Pid    int // host pid
}

// Rlimits are the resource limits a spawner passes on (0: inherited):
// RLIMIT_FSIZE and RLIMIT_NOFILE. RLIMIT_CORE is always 0.
type Rlimits struct {
	FileSize, OpenFiles int64
}

// Get returns the running spawner for rl, or starts one.
func Get(rl Rlimits) (*Spawner, error) {
	if !MainCalled.Load() {
		return nil, ErrNoMain
	}
	spawners.mu.Lock()
	defer spawners.mu.Unlock()
	if sp := spawners.m[rl]; sp != nil && sp.Client.Closed() == nil {
		return sp, nil
	}
	sp, err := startSpawner(rl)
	if err != nil {
		return nil, err
	}
	if spawners.m == nil {
		spawners.m = map[Rlimits]*Spawner{}
	}
	spawners.m[rl] = sp
	return sp, nil
}

// Current returns the running spawner for rl, or nil.
func Current(rl Rlimits) *Spawner {
	spawners.mu.Lock()
	defer spawners.mu.Unlock()
	return spawners.m[rl]
}

func startSpawner(rl Rlimits) (*Spawner, error) {
	host, child, err := Pair()
	if err != nil {
		return nil, err
	}
	defer child.Close()
	cmd := exec.Command("/proc/self/exe", SpawnerFlag, "3", strconv.FormatInt(rl.FileSize, 10), strconv.FormatInt(rl.OpenFiles, 10))
	cmd.Env = []string{}
	// Keep the head: it says why a spawner failed.
	out := headtail.New(4096, 0)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{child}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		// To create the pid namespaces of the bwraps; the spawner drops
		// it from what it passes on, so bwrap starts with none.
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := startProcess(cmd); err != nil {
		host.Close()
		return nil, fmt.Errorf("sandboxkit: start the sandbox spawner: %w", err)
	}
	sp := &Spawner{Client: NewClient(host, ErrSpawnerDied), Pid: cmd.Process.Pid}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	go sp.Client.Run(func() error {
		var werr error
		select {
		case werr = <-exited:
		case <-time.After(5 * time.Second):
			// It closed the socket but lives on: it must not.
			cmd.Process.Kill()
			werr = <-exited
		}
		why := strings.TrimSpace(out.String())
		if why == "" {
			why = fmt.Sprint(werr)
		}
		return fmt.Errorf("%w (pid %d): %s", ErrSpawnerDied, sp.Pid, why)
	})
	return sp, nil
}
