package mcp

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkMCPToolCall measures one tool call round trip (server-
// everything's echo) to the server in its sandbox and to the same server
// run directly (mode off), paired in each iteration; it reports the
// medians and their ratio (target: sandboxed ≤ 1.2× direct).
func BenchmarkMCPToolCall(b *testing.B) {
	requireSandbox(b)
	nm := nodeModules(b)
	ctx := b.Context()
	direct := everything(nm)
	direct.Mode = ModeOff
	sandboxed := newManager(b, Options{Servers: []ServerConfig{everything(nm)}})
	unconfined := newManager(b, Options{Servers: []ServerConfig{direct}})
	echoS := toolsByName(ctx, sandboxed)["mcp__everything__echo"]
	echoD := toolsByName(ctx, unconfined)["mcp__everything__echo"]
	if echoS == nil || echoD == nil {
		b.Fatalf("echo missing: sandboxed %+v, direct %+v", sandboxed.Status(), unconfined.Status())
	}
	args := map[string]string{"message": "ping"}
	for range 20 { // warm both (JIT, page cache)
		call(ctx, echoS, args)
		call(ctx, echoD, args)
	}
	var ts, td []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		order := []struct {
			t   *[]time.Duration
			run func() (string, error)
		}{
			{&ts, func() (string, error) { return call(ctx, echoS, args) }},
			{&td, func() (string, error) { return call(ctx, echoD, args) }},
		}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, o := range order {
			start := time.Now()
			out, err := o.run()
			*o.t = append(*o.t, time.Since(start))
			if err != nil || !strings.Contains(out, "ping") {
				b.Fatalf("echo = %q, %v", out, err)
			}
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	s, d := med(ts), med(td)
	b.ReportMetric(s, "sandboxed-µs")
	b.ReportMetric(d, "direct-µs")
	b.ReportMetric(s/d, "ratio")
}
