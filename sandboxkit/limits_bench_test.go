package sandboxkit

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// BenchmarkLimitsLaunch measures what the limits add to a start: a
// one-shot Run of /bin/true, and a Session's start and close, each
// with DefaultLimits (a cgroup made, joined and removed; tmpfs sizes;
// the rlimits' spawner) and without. Each iteration runs the pair, so
// load weighs on both alike; it reports medians of each and of the
// paired differences (target: at most 2000 µs added per start). The
// order within a pair alternates: the first of a pair pays for cold
// caches.
func BenchmarkLimitsLaunch(b *testing.B) {
	requireCgroups(b)
	base := sessionPolicy(b)
	limited := *base
	limited.Limits = DefaultLimits()
	limited.Limits.CgroupParent = sandboxtest.CgroupParent(b)
	for _, kind := range []string{"run", "session"} {
		b.Run(kind, func(b *testing.B) {
			var offT, onT, diff []float64
			n := 0
			for b.Loop() {
				var d [2]time.Duration
				order := []int{0, 1}
				if n++; n%2 == 0 {
					order = []int{1, 0}
				}
				for _, i := range order {
					p := []*Policy{base, &limited}[i]
					start := time.Now()
					if kind == "run" {
						if err := Command(b.Context(), p, "true").Run(); err != nil {
							b.Fatal(err)
						}
					} else {
						s, err := StartSession(b.Context(), p, SessionOptions{})
						if err != nil {
							b.Fatal(err)
						}
						if err := s.Close(); err != nil {
							b.Fatal(err)
						}
					}
					d[i] = time.Since(start)
				}
				offT = append(offT, float64(d[0].Microseconds()))
				onT = append(onT, float64(d[1].Microseconds()))
				diff = append(diff, float64((d[1] - d[0]).Microseconds()))
			}
			b.ReportMetric(median(offT), "off-µs")
			b.ReportMetric(median(onT), "limits-µs")
			b.ReportMetric(median(diff), "delta-µs")
		})
	}
}

// BenchmarkLimitsCPULatency measures an HTTP server's request latency in
// this process (the server's stand-in) idle, then while two sandboxes
// spin on every CPU they may use (two busy loops each, under the default
// 1-core quota). Target: p50 under load within 2× of idle.
func BenchmarkLimitsCPULatency(b *testing.B) {
	requireCgroups(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	c := &http.Client{Transport: &http.Transport{}}
	sample := func(n int) []float64 {
		var v []float64
		for range n {
			start := time.Now()
			res, err := c.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			res.Body.Close()
			v = append(v, float64(time.Since(start).Microseconds()))
			time.Sleep(2 * time.Millisecond)
		}
		return v
	}
	var idle, busy []float64
	for b.Loop() {
		idle = append(idle, median(sample(200)))
		var sessions []*Session
		for range 2 {
			p := *sessionPolicy(b)
			p.Limits = DefaultLimits()
			p.Limits.CgroupParent = sandboxtest.CgroupParent(b)
			s, err := StartSession(b.Context(), &p, SessionOptions{})
			if err != nil {
				b.Fatal(err)
			}
			sessions = append(sessions, s)
			for range 2 {
				if _, err := s.StartBackground(b.Context(), []string{"sh", "-c", "while :; do :; done"}, nil, ""); err != nil {
					b.Fatal(err)
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
		busy = append(busy, median(sample(200)))
		for _, s := range sessions {
			s.Close()
		}
	}
	b.ReportMetric(median(idle), "idle-p50-µs")
	b.ReportMetric(median(busy), "spinning-p50-µs")
	b.ReportMetric(median(busy)/median(idle), "ratio")
}
