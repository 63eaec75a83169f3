package sandboxkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// requireAbstractScope skips (fails under CI) where the kernel cannot
// scope abstract sockets, after checking that the Doctor says so.
func requireAbstractScope(t *testing.T) {
	t.Helper()
	if AbstractUnixScoped() {
		return
	}
	if c := landlockCheck(); c.OK || !strings.Contains(c.Detail, "abstract UNIX sockets") {
		t.Errorf("kernel without the scope, yet the landlock check says %+v", c)
	}
	sandboxtest.SkipOrFail(t, "this kernel lacks Landlock's abstract UNIX socket scope (Linux 6.12)")
}

// A one-shot sandbox cannot connect to an abstract socket this test
// listens on, with the network private (the namespace hides it) or
// shared (Landlock's scope refuses it), and its own abstract sockets
// work.
func TestAbstractUnixOneShot(t *testing.T) {
	requireSandbox(t)
	requireAbstractScope(t)
	for _, share := range []bool{false, true} {
		t.Run(map[bool]string{false: "private-net", true: "shared-net"}[share], func(t *testing.T) {
			p, err := netPolicy(Settings{Seccomp: seccomp.Enforce}, share)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range ProbeAbstractUnix(t.Context(), p) {
				if !c.OK {
					t.Errorf("%s: %s", c.Name, c.Detail)
				}
			}
		})
	}
}

// A Session that shares the network: its supervisor and the commands
// it starts are in the scoped domain.
func TestAbstractUnixSession(t *testing.T) {
	requireSandbox(t)
	requireAbstractScope(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := netPolicy(Settings{}, true)
	if err != nil {
		t.Fatal(err)
	}
	p.ReadOnly = []Bind{{Src: exe, Dst: "/opt/probe"}}
	name, accepted, stop, err := hostAbstractListener()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := startSession(t, p, SessionOptions{})
	var out bytes.Buffer
	c := s.Command(t.Context(), "/opt/probe", abstractProbeFlag, name)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("probe in the session: %v: %s", err, out.String())
	}
	var r abstractResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("probe report %q: %v", out.String(), err)
	}
	for _, c := range judgeAbstract(p, r, accepted.Load(), seccomp.ProbeCheck{Name: "host"}, seccomp.ProbeCheck{Name: "inside"}) {
		if !c.OK {
			t.Errorf("%s: %s", c.Name, c.Detail)
		}
	}
}

// The landlock check is a warning: a kernel without the scope still runs
// sandboxes, and the report says what is exposed.
func TestLandlockCheckWarning(t *testing.T) {
	bad := Check{Name: "landlock", OK: true, Detail: "no Landlock", Warning: true}
	r := &Report{Checks: []Check{{Name: "bwrap", OK: true}, bad}}
	if err := r.Err(); err != nil {
		t.Errorf("Err = %v; the landlock check must not make sandboxes unavailable", err)
	}
	r.Checks = append(r.Checks, Check{Name: "userns"})
	var ue *UnavailableError
	if err := r.Err(); !errors.As(err, &ue) || ue.Check.Name != "userns" {
		t.Errorf("Err = %v; want the userns check", err)
	}
	c := landlockCheck()
	if c.Name != "landlock" || !c.OK || c.Warning == AbstractUnixScoped() || c.Detail == "" || (c.Warning && c.Remedy == "") {
		t.Errorf("landlockCheck = %+v (scoped: %v)", c, AbstractUnixScoped())
	}
	// Every kernel, also the ones this machine is not: below ABI 6 the
	// Doctor warns and names the exposure.
	for _, k := range []struct {
		abi  int
		warn bool
		has  string
	}{
		{0, true, "no Landlock"},
		{5, true, "Landlock ABI 5"},
		{6, false, "Landlock ABI 6"},
		{7, false, "Landlock ABI 7"},
	} {
		c := landlockCheckFor(k.abi)
		exposed := strings.Contains(c.Detail, "can connect to the host's abstract UNIX sockets")
		if !c.OK || c.Warning != k.warn || exposed != k.warn || (c.Remedy != "") != k.warn || !strings.Contains(c.Detail, k.has) {
			t.Errorf("ABI %d: %+v", k.abi, c)
		}
	}
}

// Only a shared-network launch goes through the scope step.
func TestScopedLaunch(t *testing.T) {
	args := []string{"/usr/bin/bwrap", "--", "true"}
	if got := scopedLaunch(&Policy{}, args); !slices.Equal(got, args) {
		t.Errorf("private network: %q", got)
	}
	got := scopedLaunch(&Policy{ShareNet: true}, args)
	if AbstractUnixScoped() != (len(got) == len(args)+2 && got[1] == scopeFlag && slices.Equal(got[2:], args)) {
		t.Errorf("shared network (scoped %v): %q", AbstractUnixScoped(), got)
	}
}
