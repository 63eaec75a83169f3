package ctl_test

import (
	"os"
	"strings"
	"testing"
)

// TestSystemdUnit pins what the shipped unit needs for per-sandbox
// cgroups on v2 (Delegate=yes, a User=, the instance dir) and what would
// break the sandboxes if someone "hardened" it further.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("../scripts/codumentor.service")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			set[k] = v
		}
	}
	for k, want := range map[string]string{
		"Delegate": "yes", "User": "codumentor", "StateDirectory": "codumentor", "StateDirectoryMode": "0700",
		"ExecStart": "/var/lib/codumentor/bin/codumentor api --instance /var/lib/codumentor/instance", "NoNewPrivileges": "yes",
	} {
		if set[k] != want {
			t.Errorf("%s=%q, want %q", k, set[k], want)
		}
	}
	for _, k := range []string{"ProtectControlGroups", "ProtectKernelTunables", "ProtectKernelLogs", "ProtectProc", "RestrictNamespaces", "PrivateUsers", "CapabilityBoundingSet", "MemoryDenyWriteExecute", "SystemCallFilter"} {
		if _, ok := set[k]; ok {
			t.Errorf("%s is set: it breaks the sandboxes (see the unit's comment)", k)
		}
	}
	if !strings.Contains(set["RestrictAddressFamilies"], "AF_NETLINK") {
		t.Errorf("RestrictAddressFamilies=%q lacks AF_NETLINK (loopback in each sandbox)", set["RestrictAddressFamilies"])
	}
}
