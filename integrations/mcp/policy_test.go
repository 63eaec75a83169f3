package mcp

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/diag"
	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// TestServerPolicy: a server's sandbox has the network its config says
// (none, the host's, or only its allow-list through the proxy under the
// settings' caps), its command and read_only paths read-only, no
// workspace, and every setting; a server with mode off gets none.
func TestServerPolicy(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "server")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	lim := sandboxkit.DefaultLimits()
	lim.Pids = 11
	caps := egress.Caps{MaxConns: 2}
	launched := false
	s := sandboxkit.Settings{Bwrap: "/opt/bwrap", Limits: &lim, EgressCaps: caps, Launching: func(context.Context, sandboxkit.LaunchRecord) error { launched = true; return nil }}
	for _, tc := range []struct {
		name     string
		c        ServerConfig
		shareNet bool
		allow    []string
	}{
		{"none", ServerConfig{Name: "a", Command: bin, ReadOnly: []string{dir}}, false, nil},
		{"host", ServerConfig{Name: "b", Command: bin, Network: NetworkHost}, true, nil},
		{"allowlist", ServerConfig{Name: "c", Command: "/usr/bin/env", EgressAllowlist: []string{"api.example.com"}}, false, []string{"api.example.com"}},
	} {
		p, err := ServerPolicy(s, tc.c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Limits != lim || p.Bwrap != "/opt/bwrap" || p.Profile != "mcp" || p.Seccomp == nil {
			t.Errorf("%s: a setting is lost: %+v", tc.name, p)
		}
		launched = false
		if p.Launching(t.Context(), sandboxkit.LaunchRecord{}); !launched {
			t.Errorf("%s: the settings' Launching is not the server's", tc.name)
		}
		if p.ShareNet != tc.shareNet || p.Workspace != nil || p.HostView || len(p.ReadWrite) > 0 {
			t.Errorf("%s: %+v", tc.name, p)
		}
		if (p.Egress != nil) != (tc.allow != nil) || p.Egress != nil && (!slices.Equal(p.Egress.Allow, tc.allow) || p.Egress.Caps != caps) {
			t.Errorf("%s: egress %+v, want allow %v with the settings' caps", tc.name, p.Egress, tc.allow)
		}
		if tc.name == "none" && !slices.Equal(p.ReadOnly, []sandboxkit.Bind{{Src: bin}, {Src: dir}}) {
			t.Errorf("read-only binds %v", p.ReadOnly)
		}
		if _, err := diag.Build(p, "server"); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := ServerPolicy(s, ServerConfig{Name: "off", Command: bin, Mode: ModeOff}); err == nil {
		t.Error("a server with mode off got a sandbox")
	}
	if _, err := ServerPolicy(s, ServerConfig{Name: "gone", Command: filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing command was bound")
	}
}
