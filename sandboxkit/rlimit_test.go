package sandboxkit

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRlimitLaunch: the rlimit step runs only for a Policy that has an
// address-space or CPU-time limit, in front of the rest.
func TestRlimitLaunch(t *testing.T) {
	args := []string{"/usr/bin/bwrap", "--", "true"}
	if got := rlimitLaunch(&Policy{}, args); !slices.Equal(got, args) {
		t.Errorf("no limits: %q", got)
	}
	got := rlimitLaunch(&Policy{Limits: Limits{AddressSpace: 256 << 20, CPUTime: 1500 * time.Millisecond}}, args)
	want := append([]string{"/proc/self/exe", rlimitFlag, "268435456", "2"}, args...)
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
