package supervisor

import "testing"

func TestIsLaunchStep(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want bool
	}{
		{[]string{"/proc/self/exe", ScopeFlag, "/usr/bin/bwrap"}, true},
		{[]string{"/proc/self/exe", RlimitFlag, "0", "0", "/usr/bin/bwrap"}, true},
		{[]string{"/usr/bin/bwrap", "--", "true"}, false},
		{[]string{"/proc/self/exe", SpawnerFlag}, false},
		{[]string{"/proc/self/exe"}, false},
	} {
		if got := IsLaunchStep(tc.argv); got != tc.want {
			t.Errorf("IsLaunchStep(%q) = %v", tc.argv, got)
		}
	}
}
