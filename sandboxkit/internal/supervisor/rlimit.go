package supervisor

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sandboxkit.Limits.AddressSpace and CPUTime are rlimits of one sandbox, not
// of the spawner: the spawner lives as long as the server, and its own
// CPU time and mappings would count against them. So the spawner runs
// this binary with RlimitFlag in front of the sandbox's command line; it
// sets the two limits on itself (hard, beyond the sandbox's reach) and
// executes the rest (bwrap, or the Landlock scope step), which inherits
// them. RLIMIT_FSIZE, RLIMIT_NOFILE and RLIMIT_CORE stay the spawner's
// (see spawner.go): they do not accumulate.

// RlimitFlag is os.Args[1] of the re-executed binary that sets a
// sandbox's address-space and CPU-time limits and executes the command
// line that follows.
const RlimitFlag = "--sandboxkit-rlimit"

// cpuSeconds is RLIMIT_CPU for d: whole seconds, at least one.
func cpuSeconds(d time.Duration) uint64 {
	return uint64(max(1, (d+time.Second-1)/time.Second))
}

// StepRlimits returns the command line the spawner executes for args
// (bwrap's, or a launch step's) under the address-space limit as (bytes)
// and the CPU-time limit cpu: args itself, or this binary with
// RlimitFlag in front of it when either is set.
func StepRlimits(as int64, cpu time.Duration, args []string) []string {
	// Executed by the spawner, a fork of this very binary.
	return withRlimits(as, cpu, args, "/proc/self/exe", RlimitFlag)
}

// SelfRlimits returns the arguments of a sandboxed run of this program
// (sandboxkit.SelfCommand) under the two limits: args, or
// SelfRlimitFlag and the limits in front of them when either is set. The
// command is this program, whose Main sets them (hard, TakeSelfRlimits)
// before main runs anything that reads the sandbox's input; executed by
// bwrap directly, it saves the launch the start of a whole second copy
// of this binary (a server's package inits included), which the rlimit
// step costs.
func SelfRlimits(as int64, cpu time.Duration, args []string) []string {
	return withRlimits(as, cpu, args, SelfRlimitFlag)
}

// withRlimits puts prefix and the address space in bytes and CPU seconds
// (0: unchanged; setRlimits reads them) in front of args, or returns
// args when neither limit is set.
func withRlimits(as int64, cpuTime time.Duration, args []string, prefix ...string) []string {
	if as == 0 && cpuTime == 0 {
		return args
	}
	cpu := uint64(0)
	if cpuTime > 0 {
		cpu = cpuSeconds(cpuTime)
	}
	return append(append(prefix, strconv.FormatInt(as, 10), strconv.FormatUint(cpu, 10)), args...)
}

// runRlimited is the rlimit step (see RlimitFlag): args are the address
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

// SelfRlimitFlag is os.Args[1] of a SelfCommand under a Policy with an
// address-space or CPU-time limit: the command sets the two on itself in
// Main (see SelfRlimits) instead of a rlimit step.
const SelfRlimitFlag = "--sandboxkit-self-rlimit"

// TakeSelfRlimits is Main's part of SelfRlimits: in a SelfCommand that
// carries the flag, it sets the limits and removes the flag and them
// from os.Args; on failure the process exits, having run nothing.
func TakeSelfRlimits() {
	if len(os.Args) < 2 || os.Args[1] != SelfRlimitFlag {
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
