package ctl_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// checkJSON is the output of `check --json`.
type checkJSON struct {
	OK      bool               `json:"ok"`
	Bwrap   string             `json:"bwrap"`
	Version string             `json:"version"`
	Checks  []sandboxkit.Check `json:"checks"`
}

func TestCheckPassesHere(t *testing.T) {
	requireSandbox(t)
	r := ctl(t, "check", "--json")
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	var rep checkJSON
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if !rep.OK || rep.Bwrap == "" || rep.Version == "" {
		t.Errorf("report: %+v", rep)
	}
	got := map[string]bool{}
	for _, c := range rep.Checks {
		got[c.Name] = c.OK
		if !c.OK {
			t.Errorf("check %s failed: %s", c.Name, c.Detail)
		}
	}
	for _, name := range []string{"bwrap", "bwrap-version", "bwrap-not-setuid", "userns", "proc", "overlay", "loopback", "seccomp", "limits"} {
		if !got[name] {
			t.Errorf("check %s missing or failed", name)
		}
	}

	// The table: one row per check, and the verdict.
	r = ctl(t, "check", "--workspace-base", t.TempDir())
	if r.code != 0 || !strings.Contains(r.stdout, "all checks passed") {
		t.Errorf("want exit 0 and all checks passed, got %v", r)
	}
	for _, c := range rep.Checks {
		if !strings.Contains(r.stdout, "\n"+c.Name+" ") {
			t.Errorf("table lacks a row for %s:\n%s", c.Name, r.stdout)
		}
	}
}

func TestCheckFailsWithoutBwrap(t *testing.T) {
	r := ctl(t, "check", "--bwrap", "/nonexistent")
	if r.code != 1 {
		t.Errorf("want exit 1, got %v", r)
	}
	for _, want := range []string{"bwrap", "FAIL", "fix: install bubblewrap 0.12.0 or newer"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "codumentorctl: check failed: bwrap") {
		t.Errorf("stderr: %q", r.stderr)
	}

	r = ctl(t, "check", "--json", "--bwrap", "/nonexistent")
	var rep checkJSON
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if r.code != 1 || rep.OK || len(rep.Checks) != 1 || rep.Checks[0].Name != "bwrap" || rep.Checks[0].OK || rep.Checks[0].Remedy == "" {
		t.Errorf("want exit 1 and one failed bwrap check with a remedy, got %v\n%+v", r, rep)
	}
}

func TestCheckOldBwrap(t *testing.T) {
	r := ctl(t, "check", "--bwrap", sandboxtest.OldBwrap(t))
	if r.code != 1 || !strings.Contains(r.stdout, "bwrap-version") || !strings.Contains(r.stdout, "older than 0.12.0") {
		t.Errorf("want exit 1 and a failed version check, got %v", r)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"no-such-command"},
		{"sandbox", "no-such-command"},
		{"check", "--no-such-flag"},
		{"check", "extra"},
	} {
		r := ctl(t, args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "codumentorctl: ") || !strings.Contains(r.stderr, "--help' for usage") {
			t.Errorf("%v: want exit 2 and a usage message, got %v", args, r)
		}
	}
	// Help is no error.
	r := ctl(t, "sandbox", "exec", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Exit status") || !strings.Contains(r.stdout, "--seccomp") {
		t.Errorf("sandbox exec --help: %v", r)
	}
}
