package retrieval

import (
	"cmp"
	"maps"
	"os"
	"slices"
	"testing"
	"time"
)

// languageQueries are queries of the language over Go's tree, by kind:
// what people and models type (signatures, identifiers in part, error
// texts, definitions), not hostile ones (TestHostileQueries).
var languageQueries = map[string][]string{
	"regex": {
		`/func \(\w+ \*Reader\) Read\w*\(/`,
		`/func New\w+\(ctx context\.Context/`,
		`/errors\.New\("[^"]*not supported/`,
		`/(?i)deadline ?exceeded/`,
		`/Listen(AndServe)?TLS\(/`,
		`/\bsync\.(RW)?Mutex\b/`,
		`/^\s*defer \w+\.Close\(\)$/`,
		`/x509\.Parse\w+PrivateKey/`,
		`/fmt\.Errorf\("[^"]*: %w"/`,
		`/type \w+Error struct/`,
		`/utf8\.(RuneError|MaxRune)/`,
		`/hash\/(crc32|adler32|fnv)/`,
		`/0x[0-9a-f]{8}\b/`,
		`/case syscall\.E[A-Z]+:/`,
		`/TODO\(\w+\)/`,
		`/strconv\.(Parse|Format)(Int|Uint)\(/`,
		`/http\.Status\w+Error/`,
		`/func Test\w*Race\w*\(t \*testing\.T\)/`,
		`/runtime\.(Gosched|GC|KeepAlive)\(\)/`,
		`/binary\.(Big|Little)Endian\.PutUint(16|32|64)/`,
	},
	"regex+filter": {
		`/func \(\w+ \*Server\) \w+\(/ path:net/http`,
		`/errors\.Is\(err, \w+\)/ lang:go -path:_test`,
		`/\.Lock\(\)/ path:sync/`,
		`/return nil, &\w+Error\{/ path:os/`,
	},
	"phrase": {
		`"unexpected EOF"`,
		`"context canceled"`,
		`"use of closed network connection"`,
		`"invalid UTF-8"`,
		`read "short buffer"`,
	},
	"sym": {
		`sym:ListenAndServe`,
		`sym:NewReader`,
		`sym:Unmarshal`,
		`sym:ParseDuration`,
		`sym:Mutex`,
		`sym:WithCancel`,
	},
}

// BenchmarkQueryLanguage measures the language's searches over the Go
// tree in the embedded index (p50/p95 per kind, each query run once an
// iteration), next to the relevance set's word queries in the same
// index (words-p95-ms: unchanged by the language). QL_KIND=regex (a
// key of languageQueries) runs one kind, to profile it; the five
// slowest queries are logged.
func BenchmarkQueryLanguage(b *testing.B) {
	g := goTreeRepo(b)
	rel := loadRelevance(b)
	ix, _ := New(Options{Backend: backends[0].open(b)})
	if err := ix.Ingest(b.Context(), "go", g.dir, "", g.first, nil); err != nil {
		b.Fatal(err)
	}
	lat := map[string][]time.Duration{}
	empty := map[string]int{}
	slowest := map[string]time.Duration{}
	for b.Loop() {
		for kind, qs := range languageQueries {
			if k := os.Getenv("QL_KIND"); k != "" && k != kind {
				continue
			}
			for _, q := range qs {
				start := time.Now()
				rs, err := ix.Search(b.Context(), Query{Text: q, Repositories: []string{"go"}, Limit: 10})
				if err != nil {
					b.Fatalf("%s: %v", q, err)
				}
				d := time.Since(start)
				lat[kind] = append(lat[kind], d)
				slowest[q] = max(slowest[q], d)
				if len(rs) == 0 {
					empty[q]++
				}
			}
		}
		_, words := searchRelevance(b, ix, rel)
		lat["words"] = append(lat["words"], words...)
	}
	qs := slices.Collect(maps.Keys(slowest))
	slices.SortFunc(qs, func(a, b string) int { return cmp.Compare(slowest[b], slowest[a]) })
	for _, q := range qs[:5] {
		b.Logf("slowest: %s %v", q, slowest[q])
	}
	for q := range empty {
		b.Errorf("%s found nothing", q)
	}
	for kind, ds := range lat {
		b.ReportMetric(percentile(ds, 0.5), kind+"-p50-ms")
		b.ReportMetric(percentile(ds, 0.95), kind+"-p95-ms")
	}
}
