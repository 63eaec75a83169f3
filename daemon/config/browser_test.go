package config

import (
	"strings"
	"testing"
	"time"
)

func TestBrowserKeys(t *testing.T) {
	c, err := Parse([]byte("plugins: [webretrieve, mermaid_render]\nbrowser:\n  path: /opt/chrome/chrome\n  idle_timeout: 30s\nwebretrieve:\n  allow_private: true\nmermaid_render:\n  script: /srv/mermaid.min.js\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled(PluginWebRetrieve) || !c.Enabled(PluginMermaidRender) || c.Browser.Path != "/opt/chrome/chrome" ||
		c.Browser.IdleTimeout.Std() != 30*time.Second || !c.WebRetrieve.AllowPrivate || c.MermaidRender.Script != "/srv/mermaid.min.js" {
		t.Errorf("parsed %+v %+v %+v %v", c.Browser, c.WebRetrieve, c.MermaidRender, c.Plugins)
	}
	c, err = Parse([]byte("browser:\n  require_sandbox: true\n  memory: 512MiB\n"))
	if err != nil || !c.Browser.RequireSandbox || c.Browser.Memory != 512<<20 {
		t.Errorf("require_sandbox, memory: %+v %v", c.Browser, err)
	}
	d, _ := Parse(nil)
	if d.Browser.IdleTimeout.Std() != 2*time.Minute || d.WebRetrieve.AllowPrivate || d.Browser.RequireSandbox || d.Browser.Memory != 2<<30 {
		t.Errorf("defaults: %+v %+v", d.Browser, d.WebRetrieve)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"plugins: [webretreive]", `unknown plugin "webretreive" (known: workspace_isolation, external_agent, mcp, office, webretrieve, mermaid_render)`},
		{"browser:\n  idle_timeout: -1s", "browser.idle_timeout must not be negative"},
		{"browser:\n  memory: 64MiB", "browser.memory must be 0 (no cgroup) or at least 256MiB"},
		{"webretrieve:\n  allow_privat: true", "allow_privat"},
	} {
		if _, err := Parse([]byte(bad.yaml)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.yaml, err, bad.want)
		}
	}
}
