package ctl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/integrations/browser"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// TestCheckBrowser: check names the browser binary and the sandbox
// verdict of starting it.
func TestCheckBrowser(t *testing.T) {
	requireSandbox(t)
	bin, err := browser.FindChrome("")
	if err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
	r := ctl(t, "check", "--json")
	var rep checkJSON
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%v", err, r)
	}
	want := "Chrome sandbox on"
	if os.Geteuid() == 0 {
		want = "Chrome sandbox off (--no-sandbox): running as root"
	}
	for _, c := range rep.Checks {
		if c.Name == "browser" {
			if !c.OK || !strings.Contains(c.Detail, bin.Path) || !strings.Contains(c.Detail, want) {
				t.Errorf("browser check = %+v, want %s and %q", c, bin.Path, want)
			}
			return
		}
	}
	t.Errorf("no browser check in %+v", rep.Checks)
}

// TestCheckBrowserNoSandbox: a browser that runs without Chrome's sandbox
// (CODUMENTOR_CHROME_SANDBOX=0) is a WARN row whose remedy is
// browser.require_sandbox; with that set, the same environment fails.
func TestCheckBrowserNoSandbox(t *testing.T) {
	requireSandbox(t)
	if _, err := browser.FindChrome(""); err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
	row := func(r result) sandboxkit.Check {
		t.Helper()
		var rep checkJSON
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("not JSON: %v\n%v", err, r)
		}
		for _, c := range rep.Checks {
			if c.Name == "browser" {
				return c
			}
		}
		t.Fatalf("no browser check in %v", r)
		return sandboxkit.Check{}
	}
	off := browser.EnvSandbox + "=0"
	r := run{args: []string{"check", "--json"}, env: []string{off}}.do(t)
	if c := row(r); !c.OK || !c.Warning || !strings.Contains(c.Detail, "Chrome sandbox off") || !strings.Contains(c.Remedy, "browser.require_sandbox: true") {
		t.Errorf("browser row with %s = %+v, want a warning whose remedy is browser.require_sandbox", off, c)
	}
	if r := (run{args: []string{"check"}, env: []string{off}}).do(t); !regexp.MustCompile(`(?m)^\s*browser\s+WARN`).MatchString(r.stdout) {
		t.Errorf("check's table has no browser WARN row:\n%s", r.stdout)
	}

	// An instance that passes the other checks: a secret, a database.
	dir := initInstance(t)
	cfg := "plugins: [mermaid_render]\nauth:\n  jwt_secret: " + strings.Repeat("s", 40) + "\nbrowser:\n  require_sandbox: true\n"
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := ctl(t, "users", "add", "--instance", dir, "--password", "alice password", "alice"); r.code != 0 {
		t.Fatal(r)
	}
	r = run{args: []string{"check", "--json", "--instance", dir}, env: []string{off}}.do(t)
	if c := row(r); c.OK || !strings.Contains(c.Detail, "browser.require_sandbox is set") || r.code == 0 {
		t.Errorf("browser row with require_sandbox and %s = %+v (exit %d), want a failure", off, c, r.code)
	}
	// Where the sandbox starts, require_sandbox passes as the default does.
	r = run{args: []string{"check", "--json", "--instance", dir}}.do(t)
	if c := row(r); !c.OK || c.Warning || !strings.Contains(c.Detail, "Chrome sandbox on") {
		t.Errorf("browser row with require_sandbox = %+v, want the sandbox on", c)
	}
}
