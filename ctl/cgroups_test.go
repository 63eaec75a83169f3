package ctl_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// TestCheckLimits: without a delegated cgroup the limits check warns
// ("rlimits only", with the remedy) and passes; with
// sandbox.require_limits it fails.
func TestCheckLimits(t *testing.T) {
	requireSandbox(t)
	dir := initInstance(t)
	cfg := "sandbox:\n  limits:\n    cgroup: codumentor/no-such-user\n"
	write := func(extra string) {
		if err := os.WriteFile(config.Instance{Dir: dir}.ConfigFile(), []byte(cfg+extra), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	checks, _, _ := instanceChecks(t, dir)
	if c := checks["limits"]; !c.OK || !c.Warning || !strings.HasPrefix(c.Detail, "rlimits only") || !strings.Contains(c.Remedy, "setup-cgroups --user") {
		t.Fatalf("limits check without delegation: %+v", c)
	}
	r := ctl(t, "check", "--instance", dir)
	if !regexp.MustCompile(`\nlimits +WARN +rlimits only`).MatchString(r.stdout) || !strings.Contains(r.stdout, "fix: delegate a cgroup subtree") {
		t.Errorf("table without delegation:\n%s", r.stdout)
	}
	write("  require_limits: true\n")
	checks, _, r = instanceChecks(t, dir)
	if c := checks["limits"]; c.OK || !strings.Contains(c.Detail, "require_limits") || r.code != 1 {
		t.Fatalf("limits check with require_limits: %+v (exit %d)", c, r.code)
	}
}

func TestSetupCgroupsRefusals(t *testing.T) {
	if r := ctl(t, "setup-cgroups", "--user", "no-such-user-here"); r.code != 2 || !strings.Contains(r.stderr, "no-such-user-here") {
		t.Errorf("unknown user: %v", r)
	}
	if os.Geteuid() == 0 {
		sandboxtest.SkipOrFail(t, "the refusal needs an unprivileged user")
	}
	r := ctl(t, "setup-cgroups", "--user", "root", "--mount", filepath.Join(t.TempDir(), "cg"))
	if r.code != 1 || !strings.Contains(r.stderr, "must run as root") {
		t.Errorf("as a user: %v", r)
	}
}
