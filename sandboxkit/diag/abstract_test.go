package diag

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/internal/probe"
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
	for _, c := range sandboxkit.Doctor(t.Context(), sandboxkit.DoctorOptions{}).Checks {
		if c.Name == "landlock" && (!c.Warning || !strings.Contains(c.Detail, "abstract UNIX sockets")) {
			t.Errorf("kernel without the scope, yet the landlock check says %+v", c)
		}
	}
	sandboxtest.SkipOrFail(t, "this kernel lacks Landlock's abstract UNIX socket scope (Linux 6.12)")
}

// mcpPolicy is a long-lived server's sandbox: no workspace, HOME empty,
// the network shared or not, the blocklist in mode m.
func mcpPolicy(t *testing.T, shareNet bool, m seccomp.Mode) *sandboxkit.Policy {
	t.Helper()
	f, err := seccomp.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	p := &sandboxkit.Policy{ShareNet: shareNet, UID: os.Getuid(), GID: os.Getgid(), Limits: sandboxkit.DefaultLimits()}
	if f != nil {
		p.Seccomp = f.Program
	}
	return p
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
			p := mcpPolicy(t, share, seccomp.Enforce)
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
	p := mcpPolicy(t, true, seccomp.Log)
	p.ReadOnly = []sandboxkit.Bind{{Src: exe, Dst: "/opt/probe"}}
	name, accepted, stop, err := hostAbstractListener()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s, err := sandboxkit.StartSession(t.Context(), p, sandboxkit.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var out bytes.Buffer
	c := s.Command(t.Context(), "/opt/probe", probe.AbstractFlag, name)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		t.Fatalf("probe in the session: %v: %s", err, out.String())
	}
	var r probe.AbstractResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("probe report %q: %v", out.String(), err)
	}
	for _, c := range judgeAbstract(p, r, accepted.Load(), seccomp.ProbeCheck{Name: "host"}, seccomp.ProbeCheck{Name: "inside"}) {
		if !c.OK {
			t.Errorf("%s: %s", c.Name, c.Detail)
		}
	}
}
