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

// BenchmarkWeaviateParts is where a Weaviate search's time goes, over
// the Go tree (ingested once) for the Go set's first weaviatePartsQueries
// sentences: the rankings'
// request at Search's depths (rank-1000-500) and at the embedded
// index's (rank-200-100), the chunks' and the files' rankings alone,
// the chunks' without the repository's filter, the second request
// (load: the best chunks of the first 10 files) and Search itself;
// p50/p95 of each request and the server's CPU time per request
// (-srv-cpu-ms). Run once (-benchtime 1x).
func BenchmarkWeaviateParts(b *testing.B) {
	g := goTreeRepo(b)
	set := evalCorpora(b)[0].set
	set.Queries = set.Queries[:min(len(set.Queries), weaviatePartsQueries)]
	ix, _ := New(Options{Backend: backends[1].open(b)})
	if err := ix.Ingest(b.Context(), "go", g.dir, "", g.first, nil); err != nil {
		b.Fatal(err)
	}
	w := ix.o.Backend.(*Weaviate)
	// timed runs f: its latency and the server's CPU time.
	timed := func(f func() error) (time.Duration, time.Duration, error) {
		srv0, start := weaviateCPU(b), time.Now()
		err := f()
		return time.Since(start), weaviateCPU(b) - srv0, err
	}
	// A part times its request for a query.
	type part func(q Query) (lat, cpu time.Duration, err error)
	graphQL := func(chunks, files int, only string, filter bool) part {
		return func(q Query) (time.Duration, time.Duration, error) {
			if !filter {
				q.Repositories = nil
			}
			query, _, err := w.rankingQuery(q, chunks, files)
			if err != nil {
				return 0, 0, err
			}
			if only != "" { // one of the two Gets
				i, j := strings.Index(query, " files: "), len(query)-2
				if only == "chunks" {
					query = query[:i] + "}}"
				} else {
					query = "{Get {" + query[i+1:j] + "}}"
				}
			}
			return timed(func() error { _, err := w.graphQL(b.Context(), query); return err })
		}
	}
	parts := map[string]part{
		"rank-1000-500":          graphQL(weaviateChunkDepth, weaviateFilesDepth, "", true),
		"rank-200-100":           graphQL(chunkDepth, filesDepth, "", true),
		"chunks-1000":            graphQL(weaviateChunkDepth, weaviateFilesDepth, "chunks", true),
		"chunks-1000-unfiltered": graphQL(weaviateChunkDepth, weaviateFilesDepth, "chunks", false),
		"files-500":              graphQL(weaviateChunkDepth, weaviateFilesDepth, "files", true),
		"load": func(q Query) (time.Duration, time.Duration, error) {
			query, bm25, err := w.rankingQuery(q, weaviateChunkDepth, weaviateFilesDepth)
			if err != nil {
				return 0, 0, err
			}
			got, err := w.graphQL(b.Context(), query)
			if err != nil {
				return 0, 0, err
			}
			ranked := w.rankFiles(got["chunks"], got["files"])
			ranked = ranked[:min(len(ranked), q.Limit)]
			return timed(func() error { _, err := w.load(b.Context(), bm25, ranked); return err })
		},
		"search": func(q Query) (time.Duration, time.Duration, error) {
			return timed(func() error { _, err := w.Search(b.Context(), q); return err })
		},
	}
	lat := map[string][]time.Duration{}
	cpu := map[string]time.Duration{}
	for b.Loop() {
		// In turns, query by query: the machine's load weighs on every
		// part alike.
		for _, eq := range set.Queries {
			q := Query{Text: eq.Query, Repositories: []string{"go"}, Limit: 10}
			if err := checkQuery(&q); err != nil {
				b.Fatal(err)
			}
			for name, p := range parts {
				d, c, err := p(q)
				if err != nil {
					b.Fatalf("%s: %q: %v", name, q.Text, err)
				}
				lat[name] = append(lat[name], d)
				cpu[name] += c
			}
		}
	}
	for name, ds := range lat {
		b.ReportMetric(percentile(ds, 0.5), name+"-p50-ms")
		b.ReportMetric(percentile(ds, 0.95), name+"-p95-ms")
		b.ReportMetric(float64(cpu[name].Microseconds())/1000/float64(len(ds)), name+"-srv-cpu-ms")
	}
}

// weaviatePartsQueries is how many of the Go set's queries
// BenchmarkWeaviateParts times each part for (the set's are ordered by
// a hash: any prefix is a sample).
const weaviatePartsQueries = 60
