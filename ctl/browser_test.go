package ctl_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/integrations/browser"
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
