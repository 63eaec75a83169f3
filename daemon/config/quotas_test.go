package config

import (
	"strings"
	"testing"
)

// quotas.daily_tokens: none by default, a number of tokens, and a
// negative, non-numeric or misspelt setting refused at load.
func TestQuotas(t *testing.T) {
	if c, err := Parse(nil); err != nil || c.Quotas.DailyTokens != 0 {
		t.Fatalf("default: %+v, %v; want no quota", c.Quotas, err)
	}
	if c, err := Parse([]byte("quotas:\n  daily_tokens: 2000000\n")); err != nil || c.Quotas.DailyTokens != 2000000 {
		t.Errorf("2000000: %+v, %v", c.Quotas, err)
	}
	for bad, want := range map[string]string{
		"quotas:\n  daily_tokens: -1\n":   "quotas.daily_tokens must be 0",
		"quotas:\n  daily_tokens: lots\n": `"lots" is not a whole number of tokens`,
		"quotas:\n  daily_tokens: 1.5\n":  `"1.5" is not a whole number of tokens`,
		"quotas:\n  daily_tokens: [1]\n":  "is not a whole number of tokens",
		"quotas:\n  daily_token: 5\n":     "field daily_token not found",
	} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want an error saying %s", bad, err, want)
		}
	}
}
