package sandboxkit

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// requireAbstractScope skips (fails under CI) where the kernel cannot
// scope abstract sockets, after checking that the Doctor says so.
func requireAbstractScope(t *testing.T) {
	t.Helper()
	if supervisor.Scoped() {
		return
	}
	if c := landlockCheck(); c.OK || !strings.Contains(c.Detail, "abstract UNIX sockets") {
		t.Errorf("kernel without the scope, yet the landlock check says %+v", c)
	}
	sandboxtest.SkipOrFail(t, "this kernel lacks Landlock's abstract UNIX socket scope (Linux 6.12)")
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
	if c.Name != "landlock" || !c.OK || c.Warning == supervisor.Scoped() || c.Detail == "" || (c.Warning && c.Remedy == "") {
		t.Errorf("landlockCheck = %+v (scoped: %v)", c, supervisor.Scoped())
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
	if supervisor.Scoped() != (len(got) == len(args)+2 && got[1] == supervisor.ScopeFlag && slices.Equal(got[2:], args)) {
		t.Errorf("shared network (scoped %v): %q", supervisor.Scoped(), got)
	}
}
