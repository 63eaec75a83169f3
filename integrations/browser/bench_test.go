package browser

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

const benchDiagram = "graph TD\n  A[Client] --> B[Server]\n  B --> C[(Database)]\n"

// p50 reports the median of the timings, in milliseconds.
func p50(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(ds[len(ds)-1])/float64(time.Millisecond), "max-ms")
}

// waitSpare waits until the browser has a spare page of kind k, as a
// server between requests has: warm requests are measured as they
// arrive at a warm server, not back to back.
func waitSpare(b testing.TB, br *Browser, k pageKind) {
	b.Helper()
	sandboxtest.Eventually(b, 20*time.Second, func() error {
		br.mu.Lock()
		defer br.mu.Unlock()
		if br.spares[k] == nil {
			return errors.New("no spare page")
		}
		return nil
	})
}

// BenchmarkRenderDiagram: cold is a new browser process per render (its
// launch, the sandbox verdict included); warm renders in a running one
// (each render still in a fresh incognito context). Targets: cold ≤ 2 s,
// warm p50 ≤ 150 ms.
func BenchmarkRenderDiagram(b *testing.B) {
	for _, f := range []Format{SVG, PNG} {
		b.Run("cold-"+string(f), func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				br, _ := newBrowser(b, Options{})
				start := time.Now()
				if _, err := br.RenderDiagram(context.Background(), benchDiagram, f); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
				br.Close()
			}
			p50(b, ds)
		})
		b.Run("warm-"+string(f), func(b *testing.B) {
			br, _ := newBrowser(b, Options{})
			if _, err := br.RenderDiagram(context.Background(), benchDiagram, f); err != nil {
				b.Fatal(err)
			}
			var ds []time.Duration
			for b.Loop() {
				waitSpare(b, br, renderPage)
				start := time.Now()
				if _, err := br.RenderDiagram(context.Background(), benchDiagram, f); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
			}
			p50(b, ds)
		})
	}
}

// BenchmarkFetchURLs: fetch_urls of a local page in a running browser.
// Target: p50 ≤ 200 ms.
func BenchmarkFetchURLs(b *testing.B) {
	br, _ := newBrowser(b, Options{Policy: Policy{AllowPrivate: true}})
	srv := site(b, "")
	var ds []time.Duration
	for i := 0; b.Loop(); i++ {
		if i > 0 {
			waitSpare(b, br, fetchPage)
		}
		start := time.Now()
		pages, err := br.FetchURLs(context.Background(), []string{srv.URL + "/"})
		if err != nil || pages[0].Error != "" {
			b.Fatal(err, pages)
		}
		if i > 0 { // the first starts the browser
			ds = append(ds, time.Since(start))
		}
	}
	if len(ds) > 0 {
		p50(b, ds)
	}
}
