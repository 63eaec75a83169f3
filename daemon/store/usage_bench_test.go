package store

import (
	"context"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
)

// BenchmarkUsagePerCall is what accounting adds to each model call with
// a quota on: Allow (the user's quota and today's use) and Record, for a
// user who already made 5,000 calls today among 50,000 of others.
func BenchmarkUsagePerCall(b *testing.B) {
	ctx := context.Background()
	db, err := Open(ctx, b.TempDir()+"/"+FileName)
	if err != nil {
		b.Fatal(err)
	}
	defer Close(db)
	u, err := NewUsage(db)
	if err != nil {
		b.Fatal(err)
	}
	u.SetDefaultQuota(1 << 40)
	now := time.Now().UTC()
	r := agentcore.UsageRecord{User: "usr_me", Conversation: "conv_1", Turn: "turn_1", Endpoint: "http://127.0.0.1:8000/v1",
		Usage: agentcore.Usage{Model: "qwen2.5-coder", PromptTokens: 9000, CompletionTokens: 300, Reported: true}, Time: now}
	// Seeded in batches, as Record would have written them.
	rows := make([]usageRow, 0, 55000)
	days := map[string]int64{}
	for i := range 55000 {
		user := "usr_me"
		if i%11 != 0 {
			user = "usr_other" + string(rune('a'+i%7))
		}
		rows = append(rows, usageRow{UserID: user, Day: now.Format(dayFormat), Time: now.Format(usageTimeFormat), ConversationID: r.Conversation, Turn: r.Turn,
			Model: r.Model, Endpoint: r.Endpoint, PromptTokens: 9000, CompletionTokens: 300, Reported: true})
		days[user] += 9300
	}
	if err := db.CreateInBatches(rows, 500).Error; err != nil {
		b.Fatal(err)
	}
	for user, n := range days {
		if err := db.Create(&usageDayRow{UserID: user, Day: now.Format(dayFormat), Tokens: n}).Error; err != nil {
			b.Fatal(err)
		}
	}
	measure := func(name string, f func() error) {
		b.Run(name, func(b *testing.B) {
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := f(); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
			}
			b.ReportMetric(float64(p50(d).Microseconds()), "p50-µs")
		})
	}
	measure("allow", func() error { return u.Allow(ctx, "usr_me", now) })
	measure("record", func() error { return u.Record(ctx, r) })
	measure("allow+record", func() error {
		if err := u.Allow(ctx, "usr_me", now); err != nil {
			return err
		}
		return u.Record(ctx, r)
	})
}

func p50(d []time.Duration) time.Duration {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
	return d[len(d)/2]
}
