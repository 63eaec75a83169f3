package config

import (
	"strings"
	"testing"
)

func TestSandboxLimits(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Sandbox.SandboxLimits(), DefaultSandboxLimits(); got != want {
		t.Errorf("defaults: %+v, want sandboxkit's %+v", got, want)
	}
	c, err = Parse([]byte("sandbox:\n  require_limits: true\n  limits:\n    processes: 100\n    memory: 1GiB\n    cpu: 0.5\n    tmp_size: 64MiB\n    disk: \"1.5GiB\"\n    file_size: 1048576\n    cgroup: codumentor/alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := c.Sandbox.SandboxLimits()
	want := DefaultSandboxLimits()
	want.Pids, want.Memory, want.CPU, want.TmpSize, want.Disk, want.FileSize = 100, 1<<30, 0.5, 64<<20, 3<<29, 1<<20
	want.Cgroup, want.Require = "codumentor/alice", true
	if l != want {
		t.Errorf("parsed %+v\nwant   %+v", l, want)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"memory: lots", `"lots" is not a size`},
		{"processes: -1", "sandbox.limits.processes must not be negative"},
		{"open_files: 10", "below 64"},
		{"cpu: -1", "sandbox.limits.cpu"},
		{"memory: 1MiB", "below 16 MiB"},
		{"bogus: 1", "field bogus not found"},
	} {
		_, err := Parse([]byte("sandbox:\n  limits:\n    " + bad.yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.yaml, err, bad.want)
		}
	}
	if s, _ := Size(2 << 30).MarshalYAML(); s != "2GiB" {
		t.Errorf("marshal: %v", s)
	}
}
