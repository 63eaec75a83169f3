package ctl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// users quota shows a user's daily token quota, sets their own, removes
// it (quotas.daily_tokens applies again), and refuses a bad command line.
func TestUsersQuota(t *testing.T) {
	dir := newInstance(t)
	if r := ctl(t, "users", "add", "--instance", dir, "--password", "alice password", "alice"); r.code != 0 {
		t.Fatalf("users add: %v", r)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("quotas:\n  daily_tokens: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "user alice: quota 100 tokens a day (quotas.daily_tokens); used today"},
		{[]string{"--daily-tokens", "500"}, "user alice: quota 500 tokens a day (the user's own)"},
		{nil, "quota 500 tokens a day (the user's own)"},
		{[]string{"--daily-tokens", "0"}, "user alice: quota none (the user's own)"},
		{[]string{"--default"}, "user alice: quota 100 tokens a day (quotas.daily_tokens)"},
	} {
		r := ctl(t, append(append([]string{"users", "quota", "--instance", dir}, c.args...), "alice")...)
		if r.code != 0 || !strings.Contains(r.stdout, c.want) || !strings.Contains(r.stdout, ": 0 tokens; resets at ") {
			t.Errorf("users quota %v: %v; want %q", c.args, r, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--daily-tokens", "-5", "alice"}, 2, "--daily-tokens must be 0"},
		{[]string{"--daily-tokens", "5", "--default", "alice"}, 2, "not both"},
		{[]string{}, 2, "missing the user's NAME"},
		{[]string{"nobody"}, 1, "there is no user nobody"},
	} {
		r := ctl(t, append([]string{"users", "quota", "--instance", dir}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("users quota %v: %v; want exit %d saying %q", c.args, r, c.code, c.want)
		}
	}
}
