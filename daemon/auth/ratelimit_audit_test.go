package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
)

// TestRateLimitedLoginsAudited: logins the limiter refuses are in the
// audit log, but a flood of them is one record per key per RecordEvery
// with its count, not a record each.
func TestRateLimitedLoginsAudited(t *testing.T) {
	ctx := context.Background()
	us := newUsers(t)
	if _, err := us.Add(ctx, auth.AddUser{Name: "alice", Password: "alice-password"}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	l := limiterOn(t, us.DB(), auth.LimitOptions{UserFailures: 2, UserDelay: time.Hour, MaxUserDelay: time.Hour, Window: 3 * time.Hour, IPFailures: 1000, Now: clock})
	a := newAuthenticator(t, us, nil, l)
	login := func() error {
		_, err := a.Login(ctx, auth.LoginRequest{Username: "alice", Password: "wrong-password", IP: "192.0.2.7"})
		return err
	}
	limited := func() []map[string]any {
		t.Helper()
		rs, err := audit.List(ctx, us.DB(), audit.Filter{Kind: audit.KindLoginRateLimited})
		if err != nil {
			t.Fatal(err)
		}
		var out []map[string]any
		for _, r := range rs {
			var d map[string]any
			if err := json.Unmarshal(r.Data, &d); err != nil {
				t.Fatal(err)
			}
			if r.Source != "192.0.2.7" {
				t.Errorf("record %d: source %q", r.Seq, r.Source)
			}
			out = append(out, d)
		}
		return out
	}
	for range 2 {
		if err := login(); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("login = %v, want ErrInvalidCredentials", err)
		}
	}
	for range 50 {
		if err := login(); !errors.Is(err, auth.ErrRateLimited) {
			t.Fatalf("login = %v, want ErrRateLimited", err)
		}
	}
	got := limited()
	if len(got) != 1 || got[0]["count"] != 1.0 || got[0]["limit"] != "name" || got[0]["name"] != "alice" {
		t.Fatalf("after a flood of 50: records %v, want one with count 1 (the first)", got)
	}
	// The next refusal after RecordEvery carries the count since.
	advance(time.Minute)
	if err := login(); !errors.Is(err, auth.ErrRateLimited) {
		t.Fatal(err)
	}
	if got = limited(); len(got) != 2 || got[1]["count"] != 50.0 {
		t.Fatalf("records %v, want a second one with count 50", got)
	}
	// A flood that stops is recorded by the sweep.
	for range 10 {
		if err := login(); !errors.Is(err, auth.ErrRateLimited) {
			t.Fatal(err)
		}
	}
	if err := l.RecordRefusals(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got = limited(); len(got) != 2 {
		t.Fatalf("swept before RecordEvery: %v", got)
	}
	advance(time.Minute)
	if err := l.RecordRefusals(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got = limited(); len(got) != 3 || got[2]["count"] != 10.0 {
		t.Fatalf("records %v, want a third one with count 10", got)
	}
	if n, err := audit.Verify(ctx, us.DB()); err != nil || n == 0 {
		t.Fatalf("Verify = %d, %v", n, err)
	}
}

// TestRateLimitedLoginsBounded: refusals from more addresses than the
// limiter tracks share one overflow record, so the records a flood
// writes are bounded by MaxKeys+1 per RecordEvery.
func TestRateLimitedLoginsBounded(t *testing.T) {
	ctx := context.Background()
	us := newUsers(t)
	l := limiterOn(t, us.DB(), auth.LimitOptions{IPFailures: 1, MaxKeys: 2})
	a := newAuthenticator(t, us, nil, l)
	for i := range 12 {
		ip := fmt.Sprintf("192.0.2.%d", i+1)
		if _, err := a.Login(ctx, auth.LoginRequest{Username: fmt.Sprintf("u%d", i), Password: "wrong-password", IP: ip}); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Fatalf("first login from %s: %v", ip, err)
		}
		for range 3 {
			if _, err := a.Login(ctx, auth.LoginRequest{Username: fmt.Sprintf("v%d", i), Password: "wrong-password", IP: ip}); !errors.Is(err, auth.ErrRateLimited) {
				t.Fatalf("login from %s: %v, want ErrRateLimited", ip, err)
			}
		}
	}
	rs, err := audit.List(ctx, us.DB(), audit.Filter{Kind: audit.KindLoginRateLimited})
	if err != nil {
		t.Fatal(err)
	}
	var limits []string
	for _, r := range rs {
		var d map[string]any
		json.Unmarshal(r.Data, &d)
		limits = append(limits, d["limit"].(string))
	}
	if strings.Join(limits, ",") != "address,address,overflow" {
		t.Fatalf("records for 36 refusals from 12 addresses: %v, want two addresses and one overflow", limits)
	}
	if err := l.RecordRefusals(ctx, true); err != nil {
		t.Fatal(err)
	}
	rs, _ = audit.List(ctx, us.DB(), audit.Filter{Kind: audit.KindLoginRateLimited})
	var total float64
	for _, r := range rs {
		var d map[string]any
		json.Unmarshal(r.Data, &d)
		total += d["count"].(float64)
	}
	if len(rs) != 6 || total != 36 {
		t.Fatalf("after the flush: %d records counting %v refusals, want 6 counting 36", len(rs), total)
	}
}
