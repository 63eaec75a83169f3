package config

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"720h", 720 * time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{"30d", 720 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"0d", 0, true},
		{"d", 0, false},
		{"-1d", 0, false},
		{"+1d", 0, false},
		{"1.5d", 0, false},
		{"1d-2h", 0, false},
		{"1dd", 0, false},
		{"30 days", 0, false},
		{"", 0, false},
	} {
		got, err := ParseDuration(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
