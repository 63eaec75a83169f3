package auth

import (
	"slices"
	"strings"
	"testing"
)

func TestOIDCName(t *testing.T) {
	for claim, want := range map[string]string{
		"alice":                 "alice",
		"Alice@Example.org":     "alice-example.org",
		"  -bob":                "bob",
		"ünï":                   "n-",
		"":                      "",
		"@@@":                   "",
		strings.Repeat("a", 80): strings.Repeat("a", MaxNameLength),
	} {
		got := oidcName(claim)
		if got != want {
			t.Errorf("oidcName(%q) = %q, want %q", claim, got, want)
		}
		if got != "" && ValidateName(got) != nil {
			t.Errorf("oidcName(%q) = %q, not a valid name", claim, got)
		}
	}
}

func TestClaimStrings(t *testing.T) {
	many := make([]any, maxGroups+1)
	for i := range many {
		many[i] = "g"
	}
	for _, tc := range []struct {
		v    any
		want []string
		ok   bool
	}{
		{nil, nil, true},
		{"dev", []string{"dev"}, true},
		{[]any{"dev", "ops"}, []string{"dev", "ops"}, true},
		{[]any{"dev", 1}, nil, false},
		{map[string]any{"dev": true}, nil, false},
		{many, nil, false},
	} {
		got, ok := claimStrings(map[string]any{"groups": tc.v}, "groups")
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("claimStrings(%v) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
	if got, ok := claimStrings(map[string]any{"groups": []any{"dev"}}, ""); got != nil || !ok {
		t.Errorf("no groups claim configured: %v %v", got, ok)
	}
}
