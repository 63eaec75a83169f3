package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
)

func openUsage(t *testing.T) *Usage {
	t.Helper()
	u, err := NewUsage(openTestDB(t, testConfig(t)))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Totals select by time (since= compares times, not their text: a
// record at since is in, one a nanosecond before is out), group by model,
// UTC day and user, and count estimates; the quota counts today's tokens
// only, and refuses at the quota, not only past it.
func TestUsageTotalsAndQuota(t *testing.T) {
	ctx := context.Background()
	u := openUsage(t)
	midnight := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rec := func(user, model string, at time.Time, prompt, completion int, reported bool) {
		t.Helper()
		err := u.Record(ctx, agentcore.UsageRecord{User: user, Conversation: "conv_1", Turn: "turn_1", Endpoint: "http://127.0.0.1:1/v1",
			Usage: agentcore.Usage{Model: model, PromptTokens: prompt, CompletionTokens: completion, Reported: reported}, Time: at})
		if err != nil {
			t.Fatal(err)
		}
	}
	rec("usr_a", "m1", midnight.Add(-time.Nanosecond), 1000, 100, true) // yesterday, 23:59:59.999999999
	rec("usr_a", "m1", midnight, 10, 1, true)
	rec("usr_a", "m2", midnight.Add(90*time.Minute+5*time.Millisecond), 20, 2, false)
	rec("usr_b", "m1", midnight.Add(2*time.Hour), 40, 4, true)

	totals := func(f UsageFilter) map[string]UsageTotals {
		t.Helper()
		gs, err := u.Totals(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]UsageTotals{}
		for _, g := range gs {
			m[g.Key] = g.UsageTotals
		}
		return m
	}
	got := totals(UsageFilter{GroupBy: GroupByDay})
	if got["2026-11-30"] != (UsageTotals{1, 1000, 100, 1100, 0}) || got["2026-12-01"] != (UsageTotals{3, 70, 7, 77, 1}) || len(got) != 2 {
		t.Errorf("by day: %+v", got)
	}
	got = totals(UsageFilter{GroupBy: GroupByModel, User: "usr_a", Since: midnight})
	if got["m1"] != (UsageTotals{1, 10, 1, 11, 0}) || got["m2"] != (UsageTotals{1, 20, 2, 22, 1}) || len(got) != 2 {
		t.Errorf("usr_a's by model since midnight: %+v", got)
	}
	got = totals(UsageFilter{GroupBy: GroupByUser, Since: midnight.Add(time.Nanosecond)})
	if got["usr_a"].Calls != 1 || got["usr_b"].Calls != 1 {
		t.Errorf("by user since just after midnight: %+v", got)
	}
	if _, err := u.Totals(ctx, UsageFilter{GroupBy: "conversation"}); err == nil {
		t.Error("grouping by conversation: no error")
	}

	u.SetDefaultQuota(33)
	q, err := u.Quota(ctx, "usr_a", midnight.Add(3*time.Hour))
	if err != nil || q.UsedToday != 33 || q.DailyTokens != 33 || q.Source != QuotaDefault || q.Day != "2026-12-01" || !q.Resets.Equal(midnight.Add(24*time.Hour)) {
		t.Errorf("usr_a's quota: %+v, %v; want 33 of 33 used today", q, err)
	}
	var qe *QuotaError
	if err := u.Allow(ctx, "usr_a", midnight.Add(3*time.Hour)); !errors.As(err, &qe) || !errors.Is(err, agentcore.ErrQuotaExceeded) {
		t.Errorf("Allow at the quota: %v; want a QuotaError", err)
	}
	if err := u.Allow(ctx, "usr_a", midnight.Add(-time.Hour)); err == nil {
		t.Error("Allow yesterday, 1100 used of 33: nil")
	}
	if err := u.Allow(ctx, "usr_c", midnight.Add(3*time.Hour)); err != nil {
		t.Errorf("usr_c, nothing used: %v", err)
	}
	if err := u.Allow(ctx, "usr_a", midnight.Add(24*time.Hour)); err != nil {
		t.Errorf("the next day: %v; want the quota reset", err)
	}
	for _, n := range []int64{100, 0} {
		if err := u.SetQuota(ctx, "usr_admin", "usr_a", &n); err != nil {
			t.Fatal(err)
		}
		if err := u.Allow(ctx, "usr_a", midnight.Add(3*time.Hour)); err != nil {
			t.Errorf("usr_a's own quota %d: %v", n, err)
		}
	}
	if err := u.SetQuota(ctx, "usr_admin", "usr_a", nil); err != nil {
		t.Fatal(err)
	}
	if q, _ := u.Quota(ctx, "usr_a", midnight); q.Source != QuotaDefault || q.DailyTokens != 33 {
		t.Errorf("after removing usr_a's own: %+v", q)
	}
	if err := u.SetQuota(ctx, "usr_admin", "usr_a", new(int64(-1))); !errors.Is(err, ErrBadQuota) {
		t.Errorf("a negative quota: %v", err)
	}
}
