package llm

import (
	"net/http"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	c := &Client{minBackoff: 100 * time.Millisecond, maxBackoff: time.Second}
	for _, tt := range []struct {
		attempt    int
		retryAfter string
		lo, hi     time.Duration
	}{
		{1, "", 50 * time.Millisecond, 100 * time.Millisecond},
		{2, "", 100 * time.Millisecond, 200 * time.Millisecond},
		{3, "", 200 * time.Millisecond, 400 * time.Millisecond},
		{10, "", 500 * time.Millisecond, time.Second}, // capped
		{1, "0", 0, 0},
		{1, "1", time.Second, time.Second},
		{1, "3600", time.Second, time.Second}, // Retry-After capped too
		{2, "soon", 100 * time.Millisecond, 200 * time.Millisecond},
	} {
		for range 20 { // jitter
			if d := c.backoff(tt.attempt, tt.retryAfter); d < tt.lo || d > tt.hi {
				t.Errorf("backoff(%d, %q) = %v, want in [%v, %v]", tt.attempt, tt.retryAfter, d, tt.lo, tt.hi)
			}
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"7", 7 * time.Second, true},
		{"-1", 0, false},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"tomorrow", 0, false},
	} {
		if d, ok := parseRetryAfter(tt.in, now); d != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, d, ok, tt.want, tt.ok)
		}
	}
}
