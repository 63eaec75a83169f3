package config

import (
	"strings"
	"testing"
	"time"
)

func TestOfficeConfig(t *testing.T) {
	c, err := Parse([]byte("plugins: [office]\noffice:\n  max_bytes: 1048576\n  timeout: 5s\n"))
	if err != nil || !c.Enabled(PluginOffice) || c.Office.MaxBytes != 1<<20 || c.Office.Timeout.Std() != 5*time.Second || c.Office.Parallel != 2 {
		t.Fatalf("%+v %v", c.Office, err)
	}
	for yaml, want := range map[string]string{
		"office:\n  max_bytes: 0\n": "office.max_bytes",
		"office:\n  timeout: -1s\n": "office.timeout",
		"office:\n  parallel: 0\n":  "office.parallel",
		"plugins: [offices]\n":      "known: workspace_isolation, external_agent, mcp, office, webretrieve, mermaid_render",
		"office:\n  max_byte: 10\n": "max_byte",
	} {
		if _, err := Parse([]byte(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", yaml, err, want)
		}
	}
}
