package retrieval

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procCPU is the CPU time a process has used (utime + stime of
// /proc/PID/stat, in clock ticks of 10 ms).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command is in parentheses and may hold spaces: the fields
	// after it, from the state (field 3) on.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

// BenchmarkWeaviateEval is the evaluation (eval_test.go) against both
// backends in one run: recall@1, recall@5 and MRR of the embedded index
// (sqlite-) and of Weaviate (weaviate-) over each corpus (Go's tree,
// Python's standard library), each corpus ingested into both; and, on
// the Go tree, the latency of a search (Index.Search, as the API calls
// it) for the Go set's sentences (-eval-) and relevance.json's word
// queries (-words-), the two backends taking turns query by query so
// that the machine's load weighs on both alike; and the CPU time a
// Weaviate search costs the server and this process together
// (weaviate-eval-cpu-ms: less dependent on the load). Run once (-benchtime
// 1x): it ingests each corpus into a real Weaviate (minutes).
func BenchmarkWeaviateEval(b *testing.B) {
	corpora := evalCorpora(b)
	rel := loadRelevance(b)
	for b.Loop() {
		for _, c := range corpora {
			var ixs [2]*Index
			for i, bk := range backends {
				ix, _ := New(Options{Backend: bk.open(b)})
				start := time.Now()
				if err := ix.Ingest(b.Context(), c.name, c.gitDir, "", c.first, nil); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(time.Since(start).Seconds(), c.name+"-"+bk.name+"-ingest-s")
				ixs[i] = ix
			}
			for i, bk := range backends {
				evalIndex(b, ixs[i], c).report(b, c.name+"-"+bk.name)
			}
			if c.name != "go" {
				continue
			}
			sets := map[string][]string{}
			for _, q := range c.set.Queries {
				sets["eval"] = append(sets["eval"], q.Query)
			}
			for _, r := range rel {
				sets["words"] = append(sets["words"], r.Query)
			}
			for name, qs := range sets {
				var lat [2][]time.Duration
				var cpu time.Duration // of Weaviate's searches
				for _, q := range qs {
					for i := range ixs {
						start := time.Now()
						var srv0, self0 time.Duration
						if i == 1 {
							srv0, self0 = weaviateCPU(b), cpuTime()
						}
						if _, err := ixs[i].Search(b.Context(), Query{Text: q, Repositories: []string{c.name}, Limit: 10}); err != nil {
							b.Fatalf("%s: %q: %v", backends[i].name, q, err)
						}
						lat[i] = append(lat[i], time.Since(start))
						if i == 1 {
							cpu += weaviateCPU(b) - srv0 + cpuTime() - self0
						}
					}
				}
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(qs)), "weaviate-"+name+"-cpu-ms")
				for i, bk := range backends {
					b.ReportMetric(percentile(lat[i], 0.5), bk.name+"-"+name+"-p50-ms")
					b.ReportMetric(percentile(lat[i], 0.95), bk.name+"-"+name+"-p95-ms")
				}
			}
		}
	}
}

// weaviateCPU is the CPU time the test binary's Weaviate server has
// used.
func weaviateCPU(b *testing.B) time.Duration {
	d, err := procCPU(weaviateSrv.Pid())
	if err != nil {
		b.Fatal(err)
	}
	return d
}
