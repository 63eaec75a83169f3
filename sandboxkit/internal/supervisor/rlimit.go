package sandboxkit

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits.AddressSpace and Limits.CPUTime are rlimits of one sandbox, not
// of the spawner: the spawner lives as long as the server, and its own
// CPU time and mappings would count against them. So the spawner runs
// this binary with rlimitFlag in front of the sandbox's command line; it
// sets the two limits on itself (hard, beyond the sandbox's reach) and
// executes the rest (bwrap, or the Landlock scope step), which inherits
// them. RLIMIT_FSIZE, RLIMIT_NOFILE and RLIMIT_CORE stay the spawner's
// (see spawner.go): they do not accumulate.

// rlimitFlag is os.Args[1] of the re-executed binary that sets a
// sandbox's address-space and CPU-time limits and executes the command
// line that follows.
const rlimitFlag = "--sandboxkit-rlimit"

// cpuSeconds is RLIMIT_CPU for d: whole seconds, at least one.
func cpuSeconds(d time.Duration) uint64 {
	return uint64(max(1, (d+time.Second-1)/time.Second))
}

// rlimitLaunch returns the command line the spawner executes for args
// under p: args itself, or this binary with rlimitFlag in front of it
// when p has an address-space or CPU-time limit.
func rlimitLaunch(p *Policy, args []string) []string {
	// Executed by the spawner, a fork of this very binary.
	return withRlimits(p.Limits, args, "/proc/self/exe", rlimitFlag)
}

// withRlimits puts prefix and l's address space in bytes and CPU seconds
// (0: unchanged; setRlimits reads them) in front of args, or returns
// args when l has neither limit.
func withRlimits(l Limits, args []string, prefix ...string) []string {
	if l.AddressSpace == 0 && l.CPUTime == 0 {
		return args
	}
	cpu := uint64(0)
	if l.CPUTime > 0 {
		cpu = cpuSeconds(l.CPUTime)
	}
	return append(append(prefix, strconv.FormatInt(l.AddressSpace, 10), strconv.FormatUint(cpu, 10)), args...)
}

// runRlimited is the rlimit step (see rlimitFlag): args are the address
// space in bytes and the CPU seconds (0: unchanged), then the command
// line. It returns only on failure, and then nothing has run.
func runRlimited(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "sandboxkit: sandbox rlimits: "+format+"\n", a...)
		return 2
	}
	if len(args) < 3 {
		return fail("want the address space, the CPU seconds and a command, got %q", args)
	}
	if err := ownProc(); err != nil {
		return fail("%v", err)
	}
	if err := setRlimits(args[0], args[1]); err != nil {
		return fail("%v", err)
	}
	err := syscall.Exec(args[2], nameOnly(args[2], args[2:]), os.Environ())
	return fail("exec %s: %v", args[2], err)
}

// setRlimits sets the address space in bytes and the CPU seconds (0:
// unchanged) on this process, hard.
func setRlimits(asArg, cpuArg string) error {
	as, err1 := strconv.ParseUint(asArg, 10, 64)
	cpu, err2 := strconv.ParseUint(cpuArg, 10, 64)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("bad limits %q %q", asArg, cpuArg)
	}
	if as > 0 {
		if err := syscall.Setrlimit(unix.RLIMIT_AS, &syscall.Rlimit{Cur: as, Max: as}); err != nil {
			return fmt.Errorf("RLIMIT_AS %d: %w", as, err)
		}
	}
	if cpu > 0 {
		// SIGXCPU at the limit, which a program may catch to say so;
		// SIGKILL one second later.
		if err := syscall.Setrlimit(unix.RLIMIT_CPU, &syscall.Rlimit{Cur: cpu, Max: cpu + 1}); err != nil {
			return fmt.Errorf("RLIMIT_CPU %d: %w", cpu, err)
		}
	}
	return nil
}

// selfRlimitFlag is os.Args[1] of a SelfCommand under a Policy with an
// address-space or CPU-time limit: the command sets the two on itself in
// Main (see selfRlimits) instead of a rlimit step.
const selfRlimitFlag = "--sandboxkit-self-rlimit"

// selfRlimits returns the arguments of a SelfCommand under p: args, or
// selfRlimitFlag and the two limits in front of them when p has either.
// The command is this program, whose Main sets them (hard) before main
// runs anything that reads the sandbox's input; executed by bwrap
// directly, it saves the launch the start of a whole second copy of this
// binary (a server's package inits included), which the rlimit step
// costs.
func selfRlimits(p *Policy, args []string) []string {
	return withRlimits(p.Limits, args, selfRlimitFlag)
}

// takeSelfRlimits is Main's part of selfRlimits: in a SelfCommand that
// carries the flag, it sets the limits and removes the flag and them
// from os.Args; on failure the process exits, having run nothing.
func takeSelfRlimits() {
	if len(os.Args) < 2 || os.Args[1] != selfRlimitFlag {
		return
	}
	if len(os.Args) < 4 {
		fmt.Fprintf(os.Stderr, "sandboxkit: sandbox rlimits: want the address space and the CPU seconds, got %q\n", os.Args[2:])
		os.Exit(2)
	}
	if err := setRlimits(os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxkit: sandbox rlimits: %v\n", err)
		os.Exit(2)
	}
	os.Args = append(os.Args[:1:1], os.Args[4:]...)
}

// SelfCommand returns a Cmd that runs this program's own binary under p,
// with args after argv[0]: a worker that parses untrusted input with the
// program's own code, as the office worker does. The binary is passed in
// as a descriptor (it need not be under /usr), and, like the spawner, it
// calls Main first; the program's main must recognise args and run the
// worker before doing anything else. There Main sets the Policy's
// AddressSpace and CPUTime limits (hard) before it returns: the worker
// reads its input under them, with no launch step in between.
func SelfCommand(ctx context.Context, p *Policy, args ...string) *Cmd {
	c := Command(ctx, p, args...)
	c.self = true
	return c
}
