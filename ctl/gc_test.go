package ctl_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

func TestGC(t *testing.T) {
	dir := initInstance(t)
	base := filepath.Join(config.Instance{Dir: dir}.WorkspacesDir(), "layers")
	layers, err := overlay.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for id, age := range map[string]time.Duration{
		"old":    40 * 24 * time.Hour, // beyond the default TTL of 30 days
		"locked": 40 * 24 * time.Hour,
		"mid":    2 * time.Hour,
		"fresh":  0,
	} {
		l, err := layers.Create(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Touch(now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	// A running sandbox holds the lock of its layer.
	l, err := layers.Get("locked")
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := overlay.Lock(l.Upper)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	all := "[fresh locked mid old]"

	r := ctl(t, "gc", "--instance", dir, "--dry-run")
	if r.code != 0 || r.stdout != "would remove old\n" {
		t.Errorf("gc --dry-run: %v", r)
	}
	if got := fmt.Sprint(listDir(t, base)); got != all {
		t.Errorf("gc --dry-run removed layers: %s left", got)
	}

	// Days, as operators write them: 30d is the default's 720h.
	r = ctl(t, "gc", "--instance", dir, "--dry-run", "--ttl", "30d")
	if r.code != 0 || r.stdout != "would remove old\n" {
		t.Errorf("gc --dry-run --ttl 30d: %v", r)
	}
	r = ctl(t, "gc", "--instance", dir, "--ttl", "30 days")
	if r.code != 2 || !strings.Contains(r.stderr, "not a duration like 30d") {
		t.Errorf("gc --ttl '30 days': want a usage error, got %v", r)
	}

	r = ctl(t, "gc", "--instance", dir)
	if r.code != 0 || r.stdout != "removed old\n" {
		t.Errorf("gc: %v", r)
	}
	if got := fmt.Sprint(listDir(t, base)); got != "[fresh locked mid]" {
		t.Errorf("after gc: %s left, want fresh, locked and mid", got)
	}

	r = ctl(t, "gc", "--instance", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "no layer unused for 720h0m0s") {
		t.Errorf("gc with nothing to do: %v", r)
	}

	r = ctl(t, "gc", "--instance", dir, "--ttl", "1h")
	if r.code != 0 || r.stdout != "removed mid\n" {
		t.Errorf("gc --ttl 1h: %v", r)
	}
	if got := fmt.Sprint(listDir(t, base)); got != "[fresh locked]" {
		t.Errorf("after gc --ttl 1h: %s left", got)
	}

	r = ctl(t, "gc", "--instance", dir, "--ttl", "0s")
	if r.code != 2 || !strings.Contains(r.stderr, "must be positive") {
		t.Errorf("gc --ttl 0s: want a usage error, got %v", r)
	}
}

func TestGCUsesTheConfiguredTTL(t *testing.T) {
	dir := initInstance(t)
	inst := config.Instance{Dir: dir}
	if err := os.WriteFile(inst.ConfigFile(), []byte("sandbox:\n  workspace_ttl: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	layers, err := overlay.Open(filepath.Join(inst.WorkspacesDir(), "layers"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := layers.Create("two-hours")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Touch(time.Now().Add(-2 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r := ctl(t, "gc", "--instance", dir); r.code != 0 || r.stdout != "removed two-hours\n" {
		t.Errorf("gc with workspace_ttl 1h: %v", r)
	}
}
