package config

import (
	"strings"
	"testing"
)

func TestIntegrationsValidate(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"plugins: [mcp]\nmcp:\n  servers:\n    - {name: fs, command: node}\n", ""},
		{"mcp:\n  servers:\n    - {name: fs, command: node}\n", "mcp plugin is not enabled"},
		{"plugins: [mcp]\nmcp:\n  servers:\n    - {name: fs, command: node}\n    - {name: fs, command: node}\n", "used twice"},
		{"plugins: [mcp]\nmcp:\n  servers:\n    - {name: fs, command: node, mode: yolo}\n", "mode"},
		{"plugins: [mcp]\nmcp:\n  servers:\n    - {name: fs, command: node, sandbox: none}\n", "sandbox"},
		{"plugins: [nope]\n", "unknown plugin"},
		{"investigation: {enabled: true, users: [carol]}\n", ""},
		{"investigation: {users: [carol]}\n", "investigation.enabled is false"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
