package sandboxkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
	"golang.org/x/sys/unix"
)

// TestRlimitLaunch: the rlimit step runs only for a Policy that has an
// address-space or CPU-time limit, in front of the rest.
func TestRlimitLaunch(t *testing.T) {
	args := []string{"/usr/bin/bwrap", "--", "true"}
	if got := rlimitLaunch(&Policy{}, args); !slices.Equal(got, args) {
		t.Errorf("no limits: %q", got)
	}
	got := rlimitLaunch(&Policy{Limits: Limits{AddressSpace: 256 << 20, CPUTime: 1500 * time.Millisecond}}, args)
	want := append([]string{"/proc/self/exe", supervisor.RlimitFlag, "268435456", "2"}, args...)
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := (Limits{AddressSpace: 1 << 20}).Validate(); err == nil {
		t.Error("a 1 MiB address space validated")
	}
	if err := (Limits{CPUTime: -time.Second}).Validate(); err == nil {
		t.Error("a negative CPU time validated")
	}
}

// TestLimitsAddressSpaceAndCPU: inside the sandbox the two limits hold,
// hard; a process that spins is killed at its CPU time, one that maps
// more than its address space is refused the mapping.
func TestLimitsAddressSpaceAndCPU(t *testing.T) {
	requireSandbox(t)
	l := DefaultLimits()
	l.AddressSpace, l.CPUTime = 512<<20, time.Second
	p := enforcePolicy(t, l)
	out, err := sh(t, p, "echo $(ulimit -Hv) $(ulimit -St) $(ulimit -Ht); ulimit -Hv unlimited 2>/dev/null || echo cannot-raise")
	if err != nil || !strings.HasPrefix(out, "524288 1 2\n") || !strings.Contains(out, "cannot-raise") {
		t.Fatalf("inside: %q, %v", out, err)
	}
	out, err = sh(t, p, "python3 -c 'b = bytearray(700 << 20)' 2>&1; echo rc=$?")
	if err != nil || !strings.Contains(out, "MemoryError") || strings.Contains(out, "rc=0") {
		t.Errorf("python allocating 700 MiB under a 512 MiB address space: %q, %v", out, err)
	}
	var buf bytes.Buffer
	c := Command(t.Context(), p, "sh", "-c", "while :; do :; done")
	c.Stdout, c.Stderr = &buf, &buf
	c.Timeout = 20 * time.Second
	err = c.Run()
	var ee *ExitError
	if !errors.As(err, &ee) || c.State.ExitCode != 128+24 {
		t.Fatalf("spinning: %v, state %+v, %q; want SIGXCPU (exit 152)", err, c.State, buf.String())
	}
}

// testRlimitsFlag makes the test binary, run as a SelfCommand, print its
// arguments and rlimits (printRlimits).
const testRlimitsFlag = "--sandboxkit-test-rlimits"

func printRlimits() {
	var as, cpu unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &as); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if err := unix.Getrlimit(unix.RLIMIT_CPU, &cpu); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	raise := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: as.Max + 1<<20, Max: as.Max + 1<<20})
	fmt.Printf("args %q as %d %d cpu %d %d raise %v\n", os.Args[1:], as.Cur, as.Max, cpu.Cur, cpu.Max, raise != nil)
	os.Exit(0)
}

// TestSelfRlimits: a SelfCommand gets the sandbox's address-space and
// CPU-time limits (hard: it cannot raise them) from its own Main rather
// than from a rlimit step, which would start a second copy of the binary;
// main sees its own arguments only.
func TestSelfRlimits(t *testing.T) {
	args := []string{"--worker", "x"}
	if got := selfRlimits(&Policy{}, args); !slices.Equal(got, args) {
		t.Errorf("no limits: %q", got)
	}
	p := &Policy{Limits: Limits{AddressSpace: 1 << 30, CPUTime: 1500 * time.Millisecond}}
	if got, want := selfRlimits(p, args), append([]string{supervisor.SelfRlimitFlag, "1073741824", "2"}, args...); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}

	requireSandbox(t)
	l := DefaultLimits()
	l.AddressSpace, l.CPUTime = 3<<30, 3*time.Second
	var out bytes.Buffer
	c := SelfCommand(t.Context(), enforcePolicy(t, l), testRlimitsFlag, "a b")
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if want := fmt.Sprintf("args %q as %d %d cpu 3 4 raise true\n", []string{testRlimitsFlag, "a b"}, 3<<30, 3<<30); out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}
