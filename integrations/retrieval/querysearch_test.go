package retrieval

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// languageRepo is a small repository in several languages for the
// query language's tests, ingested as "app" and (its lib/ only) "lib".
func languageRepo(t *testing.T, be Backend) *Index {
	t.Helper()
	files := []repoFile{
		{path: "server/http.go", content: "package server\n\n// ListenAndServe listens on addr.\nfunc ListenAndServe(addr string) error {\n\treturn serve(addr) // TODO: retries\n}\n\ntype Handler struct{}\n\nfunc (h *Handler) ServeHTTP() {}\n"},
		{path: "server/http_test.go", content: "package server\n\nfunc TestListen(t *testing.T) {\n\tListenAndServe(\":0\")\n}\n"},
		{path: "client/fetch.py", content: "import os\n\ndef fetch_page(url):\n    \"\"\"Fetch a page over http.\"\"\"\n    return os.get(url)  # retries: none\n\nclass PageCache:\n    pass\n"},
		{path: "web/app.ts", content: "export function renderPage(el: Element) {\n  el.innerHTML = \"<p>server says hi</p>\";\n}\n"},
		{path: "native/buf.c", content: "#define BUF_SIZE 4096\n\nstatic int buf_alloc(int n)\n{\n\treturn n * BUF_SIZE;\n}\n"},
		{path: "README.md", content: "# App\n\nThe server listens and serves pages over http.\n"},
	}
	dir, commit := makeRepo(t, files)
	ix, err := New(Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Ingest(t.Context(), "app", dir, "", commit, nil); err != nil {
		t.Fatal(err)
	}
	ldir, lcommit := makeRepo(t, []repoFile{{path: "lib/util.go", content: "package lib\n\n// ListenAndServe is the library's own.\nfunc ListenAndServe() {}\n"}})
	if err := ix.Ingest(t.Context(), "lib", ldir, "", lcommit, nil); err != nil {
		t.Fatal(err)
	}
	return ix
}

// hitLines are the results as "repo:path:firstLine" of their snippets.
func hitLines(rs []Result, q string) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		h := r.Hit(q)
		out[i] = fmt.Sprintf("%s:%s:%d", h.Repository, h.Path, h.StartLine)
	}
	return out
}

// TestQueryLanguage: every form of the language finds what it says and
// only that, on the embedded index.
func TestQueryLanguage(t *testing.T) {
	ix := languageRepo(t, backends[0].open(t))
	for _, tc := range []struct {
		q         string
		repos     []string
		want      []string // each must be among the results (repo:path, or repo:path:line of the snippet's first line)
		only      bool     // and nothing else
		notWanted []string // paths that must not be there
	}{
		// Words: today's ranking.
		{q: "listen serve", want: []string{"app:server/http.go"}},
		// Phrases are verbatim, smart-case.
		{q: `"return serve(addr)"`, want: []string{"app:server/http.go"}, only: true},
		{q: `"Return Serve"`, want: nil, only: true},
		{q: `"server says hi"`, want: []string{"app:web/app.ts"}, only: true},
		// Regular expressions, with and without words.
		{q: `/func \(h \*Handler\) \w+HTTP/`, want: []string{"app:server/http.go"}, only: true},
		{q: `/BUF_[A-Z]+ \d+/`, want: []string{"app:native/buf.c"}, only: true},
		{q: `/retries:? ?(none)?$/`, want: []string{"app:server/http.go", "app:client/fetch.py"}, only: true},
		{q: `http /TODO/`, want: []string{"app:server/http.go"}, only: true},
		{q: `http "server says hi"`, want: []string{"app:web/app.ts"}, only: true}, // the phrase's words rank too
		// sym: definitions, exact name first, any language.
		{q: `sym:ListenAndServe`, want: []string{"app:server/http.go", "lib:lib/util.go"}, only: true},
		{q: `sym:listenandserve repo:lib`, want: []string{"lib:lib/util.go"}, only: true},
		{q: `sym:fetch_page`, want: []string{"app:client/fetch.py"}, only: true},
		{q: `sym:PageCache`, want: []string{"app:client/fetch.py"}, only: true},
		{q: `sym:renderPage`, want: []string{"app:web/app.ts"}, only: true},
		{q: `sym:buf_alloc`, want: []string{"app:native/buf.c"}, only: true},
		{q: `sym:ServeHTTP serve`, want: []string{"app:server/http.go"}, only: true},
		{q: `sym:NoSuchThing`, only: true},
		// Filters.
		{q: `serve path:server/`, want: []string{"app:server/http.go", "app:server/http_test.go"}, only: true},
		{q: `serve path:server -path:_test`, want: []string{"app:server/http.go"}, only: true},
		{q: `lang:python`, want: []string{"app:client/fetch.py"}, only: true},
		{q: `http lang:go -repo:lib`, want: []string{"app:server/http.go"}, notWanted: []string{"lib:lib/util.go"}},
		{q: `ListenAndServe repo:lib`, want: []string{"lib:lib/util.go"}, only: true},
		{q: `path:README`, want: []string{"app:README.md"}, only: true},
		// Exclusions.
		{q: `listen -retries`, want: []string{"lib:lib/util.go"}, notWanted: []string{"app:server/http.go"}},
		{q: `serve -"TODO"`, notWanted: []string{"app:server/http.go"}},
		{q: `serve -/TO+DO/ path:server`, want: []string{"app:server/http_test.go"}, only: true},
		// Scoped by the caller: repo: cannot widen it.
		{q: `sym:ListenAndServe`, repos: []string{"app"}, want: []string{"app:server/http.go"}, only: true},
		{q: `sym:ListenAndServe repo:lib`, repos: []string{"app"}, only: true},
	} {
		rs, err := ix.Search(t.Context(), Query{Text: tc.q, Repositories: tc.repos, Limit: 20})
		if err != nil {
			t.Errorf("%q: %v", tc.q, err)
			continue
		}
		got := hitLines(rs, tc.q)
		for _, w := range tc.want {
			if !slices.ContainsFunc(got, func(g string) bool { return g == w || strings.HasPrefix(g, w+":") }) {
				t.Errorf("%q: %s not in %v", tc.q, w, got)
			}
		}
		for _, g := range got {
			for _, n := range tc.notWanted {
				if strings.HasPrefix(g, n+":") {
					t.Errorf("%q: %s in %v", tc.q, n, got)
				}
			}
		}
		if tc.only && len(got) != len(tc.want) {
			t.Errorf("%q: got %v, want only %v", tc.q, got, tc.want)
		}
	}
}

// TestQueryLanguageWeaviate: on Weaviate, words with filters and
// patterns are checked on the chunks it ranks; what needs the embedded
// index (sym:, no words) is refused as a bad query, not a failure.
func TestQueryLanguageWeaviate(t *testing.T) {
	ix := languageRepo(t, backends[1].open(t))
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{`serve path:server -path:_test`, []string{"app:server/http.go"}},
		{`http "server says hi"`, []string{"app:web/app.ts"}},
		{`listen /TODO: \w+/`, []string{"app:server/http.go"}},
		{`listen -retries lang:go`, []string{"app:server/http_test.go", "lib:lib/util.go"}},
	} {
		rs, err := ix.Search(t.Context(), Query{Text: tc.q, Limit: 20})
		if err != nil {
			t.Errorf("%q: %v", tc.q, err)
			continue
		}
		got := paths(rs)
		slices.Sort(got)
		var want []string
		for _, w := range tc.want {
			want = append(want, w[strings.IndexByte(w, ':')+1:])
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", tc.q, got, want)
		}
	}
	for _, q := range []string{`sym:ListenAndServe`, `/TODO/`} {
		if _, err := ix.Search(t.Context(), Query{Text: q}); !errors.Is(err, ErrBadQuery) {
			t.Errorf("%q: %v, want ErrBadQuery", q, err)
		}
	}
}

// hostileQueries are queries meant to hurt: long, catastrophic or
// huge regular expressions, ones that match everything, FTS5 syntax,
// NUL and invalid UTF-8. Each must be answered (results or ErrBadQuery)
// in bounded time.
var hostileQueries = []string{
	strings.Repeat("a", 10<<10),
	strings.Repeat("listen ", 10<<10/7),
	strings.Repeat(`/(a+)+$/ `, 4),
	`/(a+)+$/`,
	`/(x+x+)+y/`,
	`/(.*a){20}/`,
	`/a{1000}{1000}/`,
	`/((((((((((a{100}){100}){100}){100})))))))/`,
	`/(?:a{0,1000}){0,1000}/`,
	`/./`,
	`/.*/`,
	`/[\s\S]/`,
	`/^/`,
	`/\b/`,
	`/(?i)[a-z]{3}/`,
	`""`,
	`"`,
	`"a`,
	`/`,
	`NEAR(listen serve, 2)`,
	`listen*`,
	`*`,
	`"listen" OR "serve" AND NOT x`,
	`^listen`,
	`path : listen`,
	`path:listen`,
	`body:listen`,
	`repo:*`,
	`{path body}: listen`,
	`listen\x00serve`,
	"listen\x00serve",
	"\x00",
	"listen \xff\xfe serve",
	"\xc3\x28",
	`-`,
	`--listen`,
	`- - -`,
	`sym:`,
	`sym:%`,
	`sym:_`,
	`sym:'; DROP TABLE retrieval_chunks; --`,
	`path:%' OR 1=1 --`,
	`lang:`,
	`"` + strings.Repeat(`\"`, 400) + `"`,
	strings.Repeat("/a/ ", 100),
	strings.Repeat("-x ", 300),
}

// TestHostileQueries: every hostile query is answered (results or
// ErrBadQuery, never another error or a panic) within a bound, on the
// Go tree; and the index is intact after them.
func TestHostileQueries(t *testing.T) {
	g := goTreeRepo(t)
	ix, _ := New(Options{Backend: backends[0].open(t)})
	if err := ix.Ingest(t.Context(), "go", g.dir, "", g.first, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range hostileQueries {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // stuck, not slow
		start := time.Now()
		rs, err := ix.Search(ctx, Query{Text: q, Limit: 10})
		cancel()
		d := time.Since(start)
		short := q[:min(len(q), 40)]
		if err != nil && !errors.Is(err, ErrBadQuery) {
			t.Errorf("%q: %v", short, err)
		}
		// The work bound: queryTime verifying, plus the passes around it.
		if d > queryTime+20*time.Second {
			t.Errorf("%q: %v", short, d)
		}
		t.Logf("%q: %d results, err %v, %v", short, len(rs), err, d)
	}
	rs, err := ix.Search(t.Context(), Query{Text: "sym:ListenAndServe path:net/http", Limit: 5})
	if err != nil || len(rs) == 0 || rs[0].Path != "net/http/server.go" {
		t.Errorf("after the hostile queries: %v %v", paths(rs), err)
	}
}

// TestRegexOverGoTree: a regular expression finds every file of the Go
// tree it matches (the trigram prefilter skips none), each result
// matches, and its snippet starts at the match.
func TestRegexOverGoTree(t *testing.T) {
	g := goTreeRepo(t)
	be := backends[0].open(t).(*SQLite)
	ix, _ := New(Options{Backend: be})
	if err := ix.Ingest(t.Context(), "go", g.dir, "", g.first, nil); err != nil {
		t.Fatal(err)
	}
	for _, expr := range []string{`func \(\w+ \*Reader\) ReadRune\(`, `(?i)errshortwrite`, `Deadline(Exceeded|Excess)`, `func \(\w+ \*Regexp\) Find\w*Index\(`} {
		// The files it matches, by brute force over every stored chunk.
		re := regexp.MustCompile("(?m)" + expr)
		want := map[string]bool{}
		for _, sh := range be.shards {
			rows, err := sh.db.QueryContext(t.Context(), `SELECT path, text FROM retrieval_chunks`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var p, text string
				if err := rows.Scan(&p, &text); err != nil {
					t.Fatal(err)
				}
				if re.MatchString(text) {
					want[p] = true
				}
			}
			rows.Close()
		}
		if len(want) == 0 || len(want) > MaxLimit {
			t.Fatalf("%s matches %d files: choose another", expr, len(want))
		}
		q := "/" + expr + "/"
		rs, err := ix.Search(t.Context(), Query{Text: q, Limit: MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, r := range rs {
			got[r.Path] = true
			h := r.Hit(q)
			if !re.MatchString(strings.SplitN(h.Snippet, "\n", 4)[min(2, strings.Count(h.Snippet, "\n"))]) && !re.MatchString(h.Snippet) {
				t.Errorf("%s: %s:%d does not match: %q", expr, h.Path, h.StartLine, h.Snippet)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: found %d files, %d match: %v", expr, len(got), len(want), want)
		}
	}
}

// TestQueryFilesFilledOnOpen: an index made before retrieval_query_files
// (chunks, no rows there, no version) gets them from its stored chunks
// when opened: sym:, regexps and lang: find what they found after an
// ingestion.
func TestQueryFilesFilledOnOpen(t *testing.T) {
	dir := t.TempDir()
	be, dbs := openShards(t, dir)
	ix := languageRepo(t, be)
	queries := []string{`sym:ListenAndServe`, `sym:fetch_page`, `/BUF_[A-Z]+ \d+/`, `lang:python`, `"server says hi"`}
	before := map[string][]string{}
	for _, q := range queries {
		rs, err := ix.Search(t.Context(), Query{Text: q, Limit: 20})
		if err != nil || len(rs) == 0 {
			t.Fatalf("%s: %v %v", q, paths(rs), err)
		}
		before[q] = hitLines(rs, q)
	}
	for _, db := range dbs {
		for _, stmt := range []string{`DROP TABLE retrieval_query_files`, `DELETE FROM retrieval_meta WHERE name = 'query'`} {
			if _, err := db.ExecContext(t.Context(), stmt); err != nil {
				t.Fatal(err)
			}
		}
	}
	again, err := NewSQLite(t.Context(), dbs...)
	if err != nil {
		t.Fatal(err)
	}
	ix2, _ := New(Options{Backend: again})
	for _, q := range queries {
		rs, err := ix2.Search(t.Context(), Query{Text: q, Limit: 20})
		if err != nil {
			t.Fatal(err)
		}
		if got := hitLines(rs, q); !slices.Equal(got, before[q]) {
			t.Errorf("%s: %v after filling, %v before", q, got, before[q])
		}
	}
	// Filled once: a second open leaves the rows alone.
	var n int
	if err := dbs[0].QueryRowContext(t.Context(), `SELECT count(*) FROM retrieval_query_files`).Scan(&n); err != nil || n == 0 {
		t.Fatalf("rows %d, %v", n, err)
	}
}

// TestQueryLanguageHybrid: with an embedding model, words with filters
// are ranked hybrid and filtered as without one.
func TestQueryLanguageHybrid(t *testing.T) {
	be := backends[0].open(t)
	languageRepo(t, be)
	ix, _ := New(Options{Backend: be, Embedder: scriptedEmbedder(t)})
	for q, want := range map[string][]string{
		`serve path:server -path:_test`: {"server/http.go"},
		`page lang:python`:              {"client/fetch.py"},
		`says "server says"`:            {"web/app.ts"},
	} {
		rs, err := ix.Search(t.Context(), Query{Text: q, Limit: 20})
		if err != nil {
			t.Fatal(err)
		}
		if got := paths(rs); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}
}
