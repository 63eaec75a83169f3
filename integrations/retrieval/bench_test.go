package retrieval

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/integrations/git"
)

// cpuTime is the CPU time used so far by this process and its waited-for
// children (git).
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

// relevance is testdata/relevance.json: queries over Go's source tree,
// each with the file that answers it.
type relevance struct {
	Query string `json:"query"`
	File  string `json:"file"`
}

func loadRelevance(b testing.TB) []relevance {
	data, err := os.ReadFile("testdata/relevance.json")
	if err != nil {
		b.Fatal(err)
	}
	var rs []relevance
	if err := json.Unmarshal(data, &rs); err != nil {
		b.Fatal(err)
	}
	return rs
}

// percentile of sorted durations, in milliseconds.
func percentile(d []time.Duration, p float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(len(s)-1, int(float64(len(s))*p))
	return float64(s[i].Microseconds()) / 1000
}

// BenchmarkIngest measures ingesting the Go tree into the embedded
// backend against merely reading the same blobs with git cat-file
// --batch, paired in each iteration (scripts/bench: -benchtime 5x); and
// the same into one database (one-ratio, one-cpu-ratio: the layout
// before the shards, which an index created by an older version keeps).
// The metrics are the medians over the iterations: on a shared 2-core
// machine a single pair's ratio varies by ±15 %.
func BenchmarkIngest(b *testing.B) {
	g := goTreeRepo(b)
	metrics := map[string][]float64{}
	report := func(unit string, v float64) { metrics[unit] = append(metrics[unit], v) }
	run := 0
	for b.Loop() {
		// Each phase starts with nothing left to write back from the one
		// before (an ingestion leaves ~150 MB for the kernel to write,
		// which would slow down whatever runs next).
		syscall.Sync()
		// The baseline: list the tree, read every blob, nothing else.
		start, cpu0 := time.Now(), cpuTime()
		list, err := changes(b.Context(), g.dir, "", g.first, capsFor(Options{MaxFiles: DefaultMaxFiles}))
		if err != nil {
			b.Fatal(err)
		}
		br, err := newBlobReader(b.Context(), g.dir, false)
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]string, len(list))
		for i, c := range list {
			ids[i] = c.blob
		}
		fed := br.feed(ids)
		var buf []byte
		for range ids {
			data, _, _, err := br.next(1<<40, buf)
			if err != nil {
				b.Fatal(err)
			}
			buf = data[:0]
		}
		<-fed
		if err := br.close(); err != nil {
			b.Fatal(err)
		}
		read, readCPU := time.Since(start), cpuTime()-cpu0

		// The server's layout (Shards files, one writer each) and the
		// previous one (the instance database, one writer), in turn
		// first: paired in the same run.
		layouts := []string{"", "one-"}
		if run%2 == 1 {
			slices.Reverse(layouts)
		}
		run++
		for _, layout := range layouts {
			var be *SQLite
			var close func()
			if layout == "" {
				be, close = benchShards(b)
			} else {
				db := openTestDB(b, b.TempDir())
				be, err = NewSQLite(b.Context(), db)
				if err != nil {
					b.Fatal(err)
				}
				close = func() { db.Close() }
			}
			ix, _ := New(Options{Backend: be})
			syscall.Sync()
			start, cpu0 = time.Now(), cpuTime()
			st, err := ix.IngestStats(b.Context(), "go", g.dir, "", g.first, nil)
			if err != nil {
				b.Fatal(err)
			}
			ingest, ingestCPU := time.Since(start), cpuTime()-cpu0
			close()
			if layout == "" {
				report("files/s", float64(st.Files)/ingest.Seconds())
				report("read-files/s", float64(st.Files)/read.Seconds())
				report("chunks", float64(st.Chunks))
			}
			report(layout+"ratio", ingest.Seconds()/read.Seconds())
			// CPU time (this process and the git processes it waited
			// for): the same ratio, less dependent on the machine's load.
			report(layout+"cpu-ratio", ingestCPU.Seconds()/readCPU.Seconds())
		}
	}
	for unit, vs := range metrics {
		slices.Sort(vs)
		b.ReportMetric(vs[len(vs)/2], unit)
	}
}

// benchShards is the embedded index in Shards new files, and what
// closes them.
func benchShards(b *testing.B) (*SQLite, func()) {
	dir := b.TempDir()
	var dbs []*sql.DB
	for i := range Shards {
		db, err := OpenShard(b.Context(), filepath.Join(dir, ShardFile(i)))
		if err != nil {
			b.Fatal(err)
		}
		dbs = append(dbs, db)
	}
	be, err := NewSQLite(b.Context(), dbs...)
	if err != nil {
		b.Fatal(err)
	}
	return be, func() {
		for _, db := range dbs {
			db.Close()
		}
	}
}

// BenchmarkSearch measures search latency (p50/p95 over the relevance
// set's queries) on the embedded backend and on Weaviate against git
// grep for the same words over the same commit, and recall@5 of the
// relevance set: lexical, hybrid (scripted embeddings) and Weaviate
// (hybrid). One run ingests the Go tree three times.
func BenchmarkSearch(b *testing.B) {
	g := goTreeRepo(b)
	rel := loadRelevance(b)
	for b.Loop() {
		type setup struct {
			name     string
			backend  Backend
			embedder Embedder
		}
		emb := scriptedEmbedder(b)
		setups := []setup{
			{"lexical", backends[0].open(b), nil},
			{"hybrid", backends[0].open(b), emb},
			{"weaviate", backends[1].open(b), emb},
		}
		for _, s := range setups {
			ix, _ := New(Options{Backend: s.backend, Embedder: s.embedder})
			if err := ix.Ingest(b.Context(), "go", g.dir, "", g.first, nil); err != nil {
				b.Fatal(err)
			}
			recall, lat := searchRelevance(b, ix, rel)
			b.ReportMetric(recall, s.name+"-recall@5")
			if s.name != "hybrid" {
				b.ReportMetric(percentile(lat, 0.5), s.name+"-p50-ms")
				b.ReportMetric(percentile(lat, 0.95), s.name+"-p95-ms")
			}
		}
		// The brute-force baseline: git grep for the same words
		// (any of them, case-insensitive) in the same commit.
		var lat []time.Duration
		for _, r := range rel {
			args := []string{"grep", "-I", "-i", "-l", "-F"}
			for _, w := range parseQuery(r.Query) {
				args = append(args, "-e", strings.Join(w, ""))
			}
			args = append(args, g.first)
			start := time.Now()
			cmd := exec.Command("git", args...)
			cmd.Env = git.Env(g.dir)
			if err := cmd.Run(); err != nil && cmd.ProcessState.ExitCode() != 1 {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		b.ReportMetric(percentile(lat, 0.5), "grep-p50-ms")
		b.ReportMetric(percentile(lat, 0.95), "grep-p95-ms")
	}
}

// BenchmarkLexical is BenchmarkSearch's embedded lexical search alone
// (no Weaviate, no embeddings): recall@5 of the relevance set and
// latency, to check a change of the index's terms quickly.
func BenchmarkLexical(b *testing.B) {
	g := goTreeRepo(b)
	rel := loadRelevance(b)
	for b.Loop() {
		ix, _ := New(Options{Backend: backends[0].open(b)})
		if err := ix.Ingest(b.Context(), "go", g.dir, "", g.first, nil); err != nil {
			b.Fatal(err)
		}
		recall, lat := searchRelevance(b, ix, rel)
		b.ReportMetric(recall, "lexical-recall@5")
		b.ReportMetric(percentile(lat, 0.5), "lexical-p50-ms")
		b.ReportMetric(percentile(lat, 0.95), "lexical-p95-ms")
	}
}

// searchRelevance searches ix (the Go tree as repository "go") for each
// query of rel: the share whose file is among the first 5 results, and
// each search's latency.
func searchRelevance(b *testing.B, ix *Index, rel []relevance) (recall float64, lat []time.Duration) {
	found := 0
	for _, r := range rel {
		start := time.Now()
		rs, err := ix.Search(b.Context(), Query{Text: r.Query, Repositories: []string{"go"}, Limit: 5})
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if slices.Contains(paths(rs), r.File) {
			found++
		}
	}
	return float64(found) / float64(len(rel)), lat
}

// BenchmarkEval is the evaluation (eval_test.go) of each corpus, Go's
// tree and Python's standard library: recall@1, recall@5 and MRR of the
// naive whole-file BM25 baseline (naive-), the embedded index's words
// (lexical-) and hybrid with llmtest's embeddings over HTTP (hybrid-, at
// vectorWeight; hybrid-wW- at other weights, to choose it), and the
// latency of searches over HTTP (a loopback server answering the
// Searcher's hits as JSON) on the Go tree, for relevance.json's word
// queries (go-http-) and the Go set's sentences (go-http-eval-). Run once (-benchtime 1x): it ingests each
// corpus twice.
func BenchmarkEval(b *testing.B) {
	corpora := evalCorpora(b)
	rel := loadRelevance(b)
	emb := scriptedEmbedder(b)
	for b.Loop() {
		for _, c := range corpora {
			b.ReportMetric(float64(len(c.set.Queries)), c.name+"-queries")
			queries := make([]string, len(c.set.Queries))
			for i, q := range c.set.Queries {
				queries[i] = q.Query
			}
			naive := newNaiveBM25(c.docs, queries)
			var m evalMetrics
			for _, q := range c.set.Queries {
				m.add(naive.rank(q.Query, q.File))
			}
			m.mean(len(queries)).report(b, c.name+"-naive")

			lex, _ := New(Options{Backend: backends[0].open(b)})
			if err := lex.Ingest(b.Context(), c.name, c.gitDir, "", c.first, nil); err != nil {
				b.Fatal(err)
			}
			evalIndex(b, lex, c).report(b, c.name+"-lexical")
			if c.name == "go" {
				var words []string
				for _, r := range rel {
					words = append(words, r.Query)
				}
				lat, cpu := searchHTTP(b, lex, c.name, words)
				b.ReportMetric(percentile(lat, 0.5), "go-http-p50-ms")
				b.ReportMetric(percentile(lat, 0.95), "go-http-p95-ms")
				b.ReportMetric(cpu, "go-http-cpu-ms")
				lat, cpu = searchHTTP(b, lex, c.name, queries)
				b.ReportMetric(percentile(lat, 0.5), "go-http-eval-p50-ms")
				b.ReportMetric(percentile(lat, 0.95), "go-http-eval-p95-ms")
				b.ReportMetric(cpu, "go-http-eval-cpu-ms")
			}

			hyb, _ := New(Options{Backend: backends[0].open(b), Embedder: emb})
			if err := hyb.Ingest(b.Context(), c.name, c.gitDir, "", c.first, nil); err != nil {
				b.Fatal(err)
			}
			evalIndex(b, hyb, c).report(b, c.name+"-hybrid")
			configured := vectorWeight
			for _, w := range []float64{0.1, 0.2, 1} {
				vectorWeight = w
				evalIndex(b, hyb, c).report(b, fmt.Sprintf("%s-hybrid-w%g", c.name, w))
			}
			vectorWeight = configured
		}
	}
}

// searchHTTP serves ix's searches of repository over HTTP on 127.0.0.1
// (the Searcher's hits as JSON, as GET /api/v1/search answers them) and
// sends each query once: the latencies, as the client saw them, and
// the CPU time of a search (server and client: less dependent on the
// machine's load), in milliseconds.
func searchHTTP(b *testing.B, ix *Index, repository string, queries []string) ([]time.Duration, float64) {
	s := &Searcher{Index: ix}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits, err := s.SearchIn(r.Context(), "", repository, r.URL.Query().Get("q"), 10)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"results": hits})
	}))
	defer srv.Close()
	client := srv.Client()
	var lat []time.Duration
	cpu0 := cpuTime()
	for _, q := range queries {
		start := time.Now()
		resp, err := client.Get(srv.URL + "/?q=" + url.QueryEscape(q))
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%q: %v %v", q, resp.Status, err)
		}
		lat = append(lat, time.Since(start))
	}
	return lat, float64((cpuTime() - cpu0).Microseconds()) / 1000 / float64(len(queries))
}
