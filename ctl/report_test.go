package ctl_test

import (
	"strings"
	"testing"
)

func TestExecReport(t *testing.T) {
	requireSandbox(t)
	r := ctl(t, "sandbox", "exec", "--report", "--", "sh", "-c", "unshare -U true; unshare -U true; echo ran; exit 3")
	if r.code != 3 || r.stdout != "ran\n" ||
		!strings.Contains(r.stderr, "seccomp report: 1 blocklisted call(s) ran in log mode") ||
		!strings.Contains(r.stderr, "  unshare by unshare, 2 time(s), first args (0x10000000, ") {
		t.Fatalf("exec --report: %v", r)
	}
	if r := ctl(t, "sandbox", "exec", "--report", "--", "sh", "-c", "ls / >/dev/null"); r.code != 0 || !strings.Contains(r.stderr, "seccomp report: no blocklisted call was made") {
		t.Fatalf("exec --report of ls: %v", r)
	}
	r = ctl(t, "sandbox", "exec", "--report", "--seccomp", "enforce", "--", "sh", "-c", "unshare -U true; echo ran")
	if r.code != 0 || !strings.Contains(r.stderr, "seccomp violations are not observed: the seccomp filter is not in log mode") {
		t.Fatalf("exec --report under enforce: %v", r)
	}
}
