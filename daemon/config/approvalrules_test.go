package config

import (
	"strings"
	"testing"
)

func TestApprovalRules(t *testing.T) {
	c, err := Parse([]byte("sandbox:\n  default_rules: true\n  approval_rules:\n    - command: make lint\n    - prefix: [go, test]\n      except: [-exec]\n  user_rules:\n    - prefix: [go]\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Sandbox
	if !s.DefaultRules || len(s.ApprovalRules) != 2 || s.ApprovalRules[0].Command != "make lint" || s.ApprovalRules[1].Except[0] != "-exec" || s.UserRules[0].Prefix[0] != "go" {
		t.Fatalf("%+v", s)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"sandbox:\n  approval_rules:\n    - command: \"ls; id\"\n", "sandbox.approval_rules[0]: command"},
		{"sandbox:\n  approval_rules:\n    - command: ls\n      prefix: [ls]\n", "not both"},
		{"sandbox:\n  user_rules:\n    - {}\n", "sandbox.user_rules[0]"},
		{"sandbox:\n  approval_rules:\n    - prefx: [ls]\n", "prefx"},
		{"sandbox:\n  default_rules: maybe\n", "into bool"},
	} {
		if _, err := Parse([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
