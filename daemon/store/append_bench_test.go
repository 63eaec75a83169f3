package store

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/store/internal/pgtest"
)

// BenchmarkAppendEvent times AppendEvent, what stands between an event's
// creation and its subscribers, on SQLite and on PostgreSQL (where it
// also announces the event): a text_delta's size, one conversation.
func BenchmarkAppendEvent(b *testing.B) {
	ctx := context.Background()
	for _, backend := range []string{BackendSQLite, BackendPostgres} {
		b.Run(backend, func(b *testing.B) {
			c := Config{Path: filepath.Join(b.TempDir(), FileName)}
			if backend == BackendPostgres {
				c = Config{Backend: BackendPostgres, DSN: pgtest.Database(b)}
			}
			s, err := NewConversations(openTestDB(b, c))
			if err != nil {
				b.Fatal(err)
			}
			conv, err := s.Create(ctx, "usr_a", "appends")
			if err != nil {
				b.Fatal(err)
			}
			data := json.RawMessage(`{"text":"The quick brown fox jumps over the lazy dog. "}`)
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := s.AppendEvent(ctx, agentcore.Event{Type: agentcore.EventTextDelta, Conversation: conv.ID, Turn: "turn_1", Time: t0, Data: data}); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
			}
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(d[len(d)-1].Microseconds()), "max-µs")
		})
	}
}
