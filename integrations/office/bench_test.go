package office

import (
	"slices"
	"testing"
	"time"

	"github.com/codumentor/codumentor/integrations/office/officetest"
)

// BenchmarkParse parses a 10k-row workbook and a 100-page document in
// this process, through the sandboxed worker, and through the worker
// without a cgroup (rlimits only: the cgroup's share), in turn within each
// iteration: on a shared machine the load then weighs on the three alike.
// It reports the medians in ms and the median of the per-iteration
// differences worker − in-process, the sandbox's share (target: at most
// 50 ms a document). scripts/bench runs it.
func BenchmarkParse(b *testing.B) {
	files := []struct {
		name string
		data []byte
	}{
		{"xlsx-10k-rows", officetest.BigXLSX(10000)},
		{"docx-100-pages", officetest.BigDOCX(100)},
	}
	for _, f := range files {
		path := write(b, f.name, f.data)
		b.Run(f.name, func(b *testing.B) {
			requireSandbox(b)
			rl := WorkerLimits()
			rl.Pids, rl.Memory, rl.CPU = 0, 0, 0
			runs := []func() error{
				func() error { _, err := parseFile(b.Context(), path, Limits{}); return err },
				func() error { _, err := (&Parser{}).Parse(b.Context(), path); return err },
				func() error { _, err := (&Parser{Worker: &rl}).Parse(b.Context(), path); return err },
			}
			ds := make([][]time.Duration, len(runs)+1)
			for b.Loop() {
				for i, run := range runs {
					start := time.Now()
					if err := run(); err != nil {
						b.Fatal(err)
					}
					ds[i] = append(ds[i], time.Since(start))
				}
				ds[3] = append(ds[3], ds[1][len(ds[1])-1]-ds[0][len(ds[0])-1])
			}
			for i, unit := range []string{"in-process-ms", "worker-ms", "rlimits-only-ms", "overhead-ms"} {
				slices.Sort(ds[i])
				b.ReportMetric(float64(ds[i][len(ds[i])/2])/float64(time.Millisecond), unit)
			}
		})
	}
}
