package config

import (
	"strings"
	"testing"
)

func TestCheckpointsConfig(t *testing.T) {
	c, err := Parse([]byte("sandbox:\n  checkpoints:\n    max_count: 7\n    max_bytes: 2MiB\n"))
	if err != nil || c.Sandbox.Checkpoints.MaxCount != 7 || c.Sandbox.Checkpoints.MaxBytes != 2<<20 {
		t.Fatalf("%+v %v", c.Sandbox.Checkpoints, err)
	}
	if c, err := Parse(nil); err != nil || c.Sandbox.Checkpoints.MaxCount != 50 || c.Sandbox.Checkpoints.MaxBytes != 1<<30 {
		t.Fatalf("defaults %+v %v", c.Sandbox.Checkpoints, err)
	}
	for yaml, want := range map[string]string{
		"sandbox:\n  checkpoints:\n    max_count: 0\n":    "sandbox.checkpoints.max_count",
		"sandbox:\n  checkpoints:\n    max_count: 1001\n": "sandbox.checkpoints.max_count",
		"sandbox:\n  checkpoints:\n    max_bytes: 0\n":    "sandbox.checkpoints.max_bytes",
		"sandbox:\n  checkpoints:\n    max_counts: 3\n":   "max_counts",
	} {
		if _, err := Parse([]byte(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", yaml, err, want)
		}
	}
}
