package retrieval

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// vocab is the index's terms with their document and occurrence counts,
// shard by shard ("i term doc cnt"), then the files' index's ("i f term
// doc cnt").
func vocab(t *testing.T, dbs []*sql.DB) []string {
	t.Helper()
	var out []string
	for i, db := range dbs {
		rows, err := db.QueryContext(t.Context(), `SELECT term, doc, cnt FROM retrieval_vocab UNION ALL SELECT 'f ' || term, doc, cnt FROM retrieval_files_vocab ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var term string
			var doc, cnt int64
			if err := rows.Scan(&term, &doc, &cnt); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%d %s %d %d", i, term, doc, cnt))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestIndexAfterChanges: a chunk leaves the full-text index exactly (a
// contentless index removes it with the terms recomputed from its text,
// which must be the ones it was indexed with): after a re-sync that
// changes, deletes and adds files, the index holds what a fresh index of
// the new commit holds, and after DeleteRepository nothing of that
// repository. For the server's index (in Shards files) and in the
// instance database (as an older version created it).
func TestIndexAfterChanges(t *testing.T) {
	long := strings.Repeat("func padding() {}\n", 600) // past the binary probe
	// Over 512 chunks: DeleteRepository reads them in pages.
	var many strings.Builder
	for i := range 36000 {
		fmt.Fprintf(&many, "func f%d() {}\n", i)
	}
	files := []repoFile{
		{path: "pkg/server.go", content: "package pkg\n\n// ServeHTTP answers.\nfunc (s *Server) ServeHTTP() {}\n\nfunc parseConfig() {}\n"},
		{path: "docs/guide.md", content: "# Guide\n\nHow to parse config files.\n\n## Más\n\nÜber naïve café.\n"},
		{path: "odd.txt", content: long + "bytes \xff\xfe invalid UTF-8, a NUL \x00 late\n"},
		{path: "gone.go", content: "package pkg\n\nfunc goneSoon() {}\n"},
		{path: "same.go", content: "package pkg\n\nfunc unchangedFunc() {}\n"},
		{path: "many.go", content: many.String()},
	}
	// More paths than one query looks up when a sync over the index
	// replaces them all (removeLookup).
	for i := range removeLookup + 44 {
		files = append(files, repoFile{path: fmt.Sprintf("small/f%d.go", i), content: fmt.Sprintf("package small\n\nfunc small%d() {}\n", i)})
	}
	dir, first := makeRepo(t, files)
	second := commitOn(t, dir, first, []repoFile{
		{path: "pkg/server.go", content: "package pkg\n\n// ServeHTTP answers differently.\nfunc (s *Server) ServeHTTP() { handleRequest() }\n"},
		{path: "odd.txt", content: long + "other \xff bytes \x00 here\n"},
		{path: "new/added.py", content: "def added_later():\n    return parse_config()\n"},
	}, "gone.go")

	for _, tc := range []struct {
		name    string
		sharded bool
	}{
		{"sharded", true},
		{"one database", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open := func() ([]*sql.DB, *Index) {
				if tc.sharded {
					be, dbs := openShards(t, t.TempDir())
					ix, _ := New(Options{Backend: be})
					return dbs, ix
				}
				db := openTestDB(t, t.TempDir())
				t.Cleanup(func() { db.Close() })
				be, err := NewSQLite(t.Context(), db)
				if err != nil {
					t.Fatal(err)
				}
				ix, _ := New(Options{Backend: be})
				return []*sql.DB{db}, ix
			}
			synced, ix := open()
			// The last step syncs from nothing over what is indexed (as
			// after a failed sync): every path replaced.
			for _, step := range [][2]string{{"", first}, {first, second}, {"", second}} {
				if err := ix.Ingest(t.Context(), "r", dir, step[0], step[1], nil); err != nil {
					t.Fatal(err)
				}
			}
			fresh, ixFresh := open()
			if err := ixFresh.Ingest(t.Context(), "r", dir, "", second, nil); err != nil {
				t.Fatal(err)
			}
			got, want := vocab(t, synced), vocab(t, fresh)
			if !slices.Equal(got, want) {
				t.Fatalf("index after the re-sync:\n%s\nwant (a fresh index of the commit):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			has := func(term string) bool {
				return slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, " "+term+" ") })
			}
			if !has(repoToken("r")) || !has("added") {
				t.Fatalf("r and its new file are not in the index:\n%s", strings.Join(got, "\n"))
			}
			for i, db := range synced {
				if _, err := db.ExecContext(t.Context(), `INSERT INTO retrieval_fts (retrieval_fts) VALUES ('integrity-check')`); err != nil {
					t.Fatalf("integrity-check of shard %d: %v", i, err)
				}
				if _, err := db.ExecContext(t.Context(), `INSERT INTO retrieval_files_fts (retrieval_files_fts) VALUES ('integrity-check')`); err != nil {
					t.Fatalf("integrity-check of shard %d's files: %v", i, err)
				}
			}
			if tc.sharded { // both shards hold chunks of r
				for i, db := range synced {
					var n int
					if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM retrieval_chunks WHERE repository = 'r'`).Scan(&n); err != nil || n == 0 {
						t.Fatalf("shard %d holds %d chunks of r (%v)", i, n, err)
					}
				}
			}

			// Another repository stays when r is deleted.
			if err := ix.Ingest(t.Context(), "other", dir, "", first, nil); err != nil {
				t.Fatal(err)
			}
			if err := ix.DeleteRepository(t.Context(), "r"); err != nil {
				t.Fatal(err)
			}
			onlyOther, ixOther := open()
			if err := ixOther.Ingest(t.Context(), "other", dir, "", first, nil); err != nil {
				t.Fatal(err)
			}
			if got, want := vocab(t, synced), vocab(t, onlyOther); !slices.Equal(got, want) {
				t.Fatalf("index after deleting r:\n%s\nwant only other's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, db := range synced {
				var n int
				if err := db.QueryRowContext(t.Context(), `SELECT (SELECT count(*) FROM retrieval_chunks WHERE repository = 'r') + (SELECT count(*) FROM retrieval_files WHERE repository = 'r')`).Scan(&n); err != nil || n != 0 {
					t.Fatalf("%d chunks and files of r left (%v)", n, err)
				}
			}
			rs, err := ix.Search(t.Context(), Query{Text: "goneSoon parseConfig", Repositories: []string{"other"}})
			if got := paths(rs); err != nil || !slices.Equal(slices.Sorted(slices.Values(got)), []string{"docs/guide.md", "gone.go", "pkg/server.go"}) {
				t.Fatalf("search in other: %v %v, want its 3 files", got, err)
			}
		})
	}
}

// commitOn adds a commit on parent to the bare repository dir (branch
// main) that writes files and deletes the paths in del; its ID.
func commitOn(t *testing.T, dir, parent string, files []repoFile, del ...string) string {
	t.Helper()
	var s strings.Builder
	fmt.Fprintf(&s, "commit refs/heads/main\ncommitter t <t@example.org> 1700000100 +0000\ndata 2\nc\nfrom %s\n", parent)
	for _, f := range files {
		fmt.Fprintf(&s, "M 100644 inline %s\ndata %d\n%s\n", f.path, len(f.content), f.content)
	}
	for _, p := range del {
		fmt.Fprintf(&s, "D %s\n", p)
	}
	if _, err := gitT(dir, strings.NewReader(s.String()), "fast-import", "--quiet", "--force"); err != nil {
		t.Fatal(err)
	}
	c, err := gitT(dir, nil, "rev-parse", "main")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// termsV1 is terms as termsVersion 1 made them: every word, the joined
// form of an identifier of several parts first.
func termsV1(s string) string {
	var ws []string
	identifiers(s, func(id string) {
		if len(id) > maxToken {
			return
		}
		parts := splitIdent(nil, id)
		if len(parts) > 1 {
			ws = append(ws, strings.Join(parts, ""))
		}
		ws = append(ws, parts...)
	})
	return strings.Join(ws, " ")
}

// TestRebuildOlderIndex: an index that an older version built, with the
// terms of version 1, contentless or with a content table, is rebuilt
// when it is opened: it then holds what a fresh index holds and passes
// FTS5's integrity check, and a re-sync replaces and removes its chunks
// exactly.
func TestRebuildOlderIndex(t *testing.T) {
	dir, first := makeRepo(t, []repoFile{
		{path: "pkg/config.go", content: "package pkg\n\n// The parser is here.\nfunc parseConfig(x int) {\n\tfor i := 0; i < x; i++ {\n\t}\n}\n"},
		{path: "docs/guide.md", content: "# Guide\n\nHow to use the café, a naïve one.\n"},
		{path: "gone.go", content: "package pkg\n\nfunc goneSoon(s string) {}\n"},
	})
	second := commitOn(t, dir, first, []repoFile{
		{path: "pkg/config.go", content: "package pkg\n\n// It is changed.\nfunc parseConfig(y int) { handle(y) }\n"},
	}, "gone.go")
	ingest := func(db *sql.DB, r, from, to string) {
		be, err := NewSQLite(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		ix, _ := New(Options{Backend: be})
		if err := ix.Ingest(t.Context(), r, dir, from, to, nil); err != nil {
			t.Fatal(err)
		}
	}
	fresh := func(rSync string) []string { // r at rSync, other at first
		db := openTestDB(t, t.TempDir())
		defer db.Close()
		ingest(db, "r", "", rSync)
		ingest(db, "other", "", first)
		return vocab(t, []*sql.DB{db})
	}
	atFirst, atSecond := fresh(first), fresh(second)

	for _, ddl := range []string{
		`CREATE VIRTUAL TABLE retrieval_fts USING fts5(path, body, repo, tokenize = 'ascii', content = '')`,
		`CREATE VIRTUAL TABLE retrieval_fts USING fts5(path, body, repo, tokenize = 'ascii')`,
	} {
		db := openTestDB(t, t.TempDir())
		defer db.Close()
		ingest(db, "r", "", first)
		ingest(db, "other", "", first)
		// As version 1 left it: no version, its table, its terms.
		for _, q := range []string{`DROP TABLE retrieval_vocab`, `DROP TABLE retrieval_fts`, `DROP TABLE retrieval_meta`, ddl,
			`CREATE VIRTUAL TABLE retrieval_vocab USING fts5vocab(retrieval_fts, row)`} {
			if _, err := db.ExecContext(t.Context(), q); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := db.QueryContext(t.Context(), `SELECT id, repository, path, text FROM retrieval_chunks`)
		if err != nil {
			t.Fatal(err)
		}
		var old [][4]any
		for rows.Next() {
			var id int64
			var repo, path, text string
			if err := rows.Scan(&id, &repo, &path, &text); err != nil {
				t.Fatal(err)
			}
			old = append(old, [4]any{id, termsV1(path), termsV1(text), repoToken(repo)})
		}
		rows.Close()
		for _, o := range old {
			if _, err := db.ExecContext(t.Context(), `INSERT INTO retrieval_fts (rowid, path, body, repo) VALUES (?, ?, ?, ?)`, o[:]...); err != nil {
				t.Fatal(err)
			}
		}
		has := func(v []string, term string) bool {
			return slices.ContainsFunc(v, func(e string) bool { return strings.HasPrefix(e, "0 "+term+" ") })
		}
		if v := vocab(t, []*sql.DB{db}); !has(v, "the") || !has(v, "x") || slices.Equal(v, atFirst) {
			t.Fatalf("the version-1 index lacks its unindexed words:\n%s", strings.Join(v, "\n"))
		}

		if _, err := NewSQLite(t.Context(), db); err != nil { // rebuilds
			t.Fatal(err)
		}
		if got := vocab(t, []*sql.DB{db}); !slices.Equal(got, atFirst) {
			t.Fatalf("%s: after the rebuild:\n%s\nwant (a fresh index):\n%s", ddl, strings.Join(got, "\n"), strings.Join(atFirst, "\n"))
		}
		var version, hashsize int
		var newDDL string
		if err := db.QueryRowContext(t.Context(), `SELECT (SELECT value FROM retrieval_meta WHERE name = 'terms'),
			(SELECT v FROM retrieval_fts_config WHERE k = 'hashsize'), (SELECT sql FROM sqlite_master WHERE name = 'retrieval_fts')`).Scan(&version, &hashsize, &newDDL); err != nil {
			t.Fatal(err)
		}
		if version != termsVersion || hashsize != 16<<20 || !strings.Contains(newDDL, "content = ''") {
			t.Fatalf("after the rebuild: terms version %d, hashsize %d, %s", version, hashsize, newDDL)
		}
		ingest(db, "r", first, second)
		if got := vocab(t, []*sql.DB{db}); !slices.Equal(got, atSecond) {
			t.Fatalf("%s: after a re-sync:\n%s\nwant (a fresh index):\n%s", ddl, strings.Join(got, "\n"), strings.Join(atSecond, "\n"))
		}
		if _, err := db.ExecContext(t.Context(), `INSERT INTO retrieval_fts (retrieval_fts) VALUES ('integrity-check')`); err != nil {
			t.Fatalf("integrity-check: %v", err)
		}
	}
}

// TestRebuildFiles: an index built before files were ranked (no
// retrieval_files, no 'files' version) gets its files' rows from its
// stored chunks when it is opened, as a fresh index has them.
func TestRebuildFiles(t *testing.T) {
	dir, first := makeRepo(t, []repoFile{
		{path: "pkg/config.go", content: "// Package pkg loads settings.\npackage pkg\n\n// Loader reads files.\ntype Loader struct{}\n\n" + strings.Repeat("func (l *Loader) pad() {\n\tl.pad()\n}\n\n", 60) + "func parseConfig() {}\n"},
		{path: "lib/mod.py", content: "\"\"\"Module of helpers.\"\"\"\n\nclass Helper:\n    \"\"\"Helps.\"\"\"\n"},
		{path: "README.md", content: "# Read me\n"},
	})
	open := func(db *sql.DB) *Index {
		be, err := NewSQLite(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		ix, _ := New(Options{Backend: be})
		return ix
	}
	fresh := openTestDB(t, t.TempDir())
	defer fresh.Close()
	if err := open(fresh).Ingest(t.Context(), "r", dir, "", first, nil); err != nil {
		t.Fatal(err)
	}
	want := vocab(t, []*sql.DB{fresh})
	if !slices.Contains(want, "0 f loader 1 2") || !slices.Contains(want, "0 f helpers 1 1") {
		t.Fatalf("the files' index lacks the symbols and doc comments:\n%s", strings.Join(want, "\n"))
	}

	db := openTestDB(t, t.TempDir())
	defer db.Close()
	if err := open(db).Ingest(t.Context(), "r", dir, "", first, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE retrieval_files_vocab`, `DROP TABLE retrieval_files_fts`, `DROP TABLE retrieval_files`, `DELETE FROM retrieval_meta WHERE name = 'files'`} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	ix := open(db) // rebuilds
	if got := vocab(t, []*sql.DB{db}); !slices.Equal(got, want) {
		t.Fatalf("after the rebuild:\n%s\nwant (a fresh index):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := db.ExecContext(t.Context(), `INSERT INTO retrieval_files_fts (retrieval_files_fts) VALUES ('integrity-check')`); err != nil {
		t.Fatalf("integrity-check: %v", err)
	}
	rs, err := ix.Search(t.Context(), Query{Text: "module helpers"})
	if err != nil || len(rs) == 0 || rs[0].Path != "lib/mod.py" {
		t.Fatalf("search after the rebuild: %v %v", paths(rs), err)
	}
}

// TestFileRanking: results are files, each once, with its best chunk;
// a file's own fields (name, symbols, doc comments) rank it.
func TestFileRanking(t *testing.T) {
	pad := strings.Repeat("func pad() {\n\tpad()\n}\n\n", 40)
	dir, commit := makeRepo(t, []repoFile{
		// Many chunks that mention settings: still one result.
		{path: "pkg/settings.go", content: "package pkg\n\n" + strings.Repeat("// settings settings\nfunc s() {}\n\n", 200)},
		// The words are in its third chunk.
		{path: "pkg/loader.go", content: "package pkg\n\n" + pad + pad + "// LoadSettings reads the settings file from disk.\nfunc LoadSettings() {}\n"},
		// Found by its name only: no chunk has the word.
		{path: "httputil/reverseproxy.go", content: "package httputil\n\nfunc forward() {}\n"},
		{path: "other.go", content: "package other\n\nfunc unrelated() {}\n"},
	})
	for _, bk := range backends {
		ix, _ := New(Options{Backend: bk.open(t)})
		if err := ix.Ingest(t.Context(), "r", dir, "", commit, nil); err != nil {
			t.Fatal(err)
		}
		rs, err := ix.Search(t.Context(), Query{Text: "load settings from disk", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if got := paths(rs); len(got) != len(rs) || len(rs) < 2 || rs[0].Path != "pkg/loader.go" {
			t.Fatalf("load settings: %v (%d results), want pkg/loader.go first, each file once", got, len(rs))
		}
		if !strings.Contains(rs[0].Text, "func LoadSettings") {
			t.Errorf("pkg/loader.go's chunk is lines %d-%d, not its best", rs[0].StartLine, rs[0].EndLine)
		}
		rs, err = ix.Search(t.Context(), Query{Text: "reverseproxy"})
		if err != nil || len(rs) != 1 || rs[0].Path != "httputil/reverseproxy.go" || rs[0].StartLine != 1 {
			t.Fatalf("reverseproxy: %+v %v, want its file's first chunk", rs, err)
		}
	}
}

// TestHybridKeepsLexical: with an embedder, the files the words find
// keep the lexical ranking's order, first; the vectors only add files
// after them (vectorWeight).
func TestHybridKeepsLexical(t *testing.T) {
	var files []repoFile
	for i, w := range []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"} {
		// Each file has the query's words a different number of times,
		// and words of its own that the vectors see.
		files = append(files, repoFile{path: fmt.Sprintf("f%d_%s.go", i, w), content: fmt.Sprintf("package p\n\n// %s\nfunc %s() {}\n", strings.Repeat("parse config settings ", i+1)+strings.Repeat(w+" ", 20), w)})
	}
	files = append(files, repoFile{path: "vectors_only.go", content: "package p\n\n// " + strings.Repeat("parsing configs ", 30) + "\n"})
	dir, commit := makeRepo(t, files)
	lex, _ := New(Options{Backend: backends[0].open(t)})
	hyb, _ := New(Options{Backend: backends[0].open(t), Embedder: scriptedEmbedder(t)})
	for _, ix := range []*Index{lex, hyb} {
		if err := ix.Ingest(t.Context(), "r", dir, "", commit, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"parse config", "settings alpha", "zeta config", "parsing configs settings"} {
		l, err := lex.Search(t.Context(), Query{Text: q, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		h, err := hyb.Search(t.Context(), Query{Text: q, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		lp, hp := paths(l), paths(h)
		if len(hp) < len(lp) || !slices.Equal(hp[:len(lp)], lp) {
			t.Errorf("%q: hybrid %v, want the lexical %v first", q, hp, lp)
		}
	}
}

// A search restricted to repositories finds theirs only, however many
// of those it names are not in the index (or in a shard), and nothing
// when none of them is: a filter left with no repository is never no
// filter.
func TestRepositoryFilter(t *testing.T) {
	var files []repoFile
	for i := range 12 {
		files = append(files, repoFile{path: fmt.Sprintf("p/f%d.go", i), content: fmt.Sprintf("package p\n\n// loadSettings%d reads the settings.\nfunc loadSettings%d() {}\n", i, i)})
	}
	dir, commit := makeRepo(t, files)
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			ix, _ := New(Options{Backend: bk.open(t)})
			for _, r := range []string{"a", "b"} {
				if err := ix.Ingest(t.Context(), r, dir, "", commit, nil); err != nil {
					t.Fatal(err)
				}
			}
			absent := []string{"x", "y", "z", "w"}
			for _, tt := range []struct {
				repos []string
				want  []string
			}{
				{nil, []string{"a", "b"}},
				{[]string{"a"}, []string{"a"}},
				{append([]string{"a"}, absent...), []string{"a"}},
				{append(slices.Clone(absent), "b"), []string{"b"}},
				{[]string{"a", "b"}, []string{"a", "b"}},
				{absent, nil},
				{[]string{"x"}, nil},
			} {
				rs, err := ix.Search(t.Context(), Query{Text: "load settings", Repositories: tt.repos, Limit: 20})
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, r := range rs {
					if !slices.Contains(got, r.Repository) {
						got = append(got, r.Repository)
					}
				}
				slices.Sort(got)
				if n := min(20, 12*len(tt.want)); !slices.Equal(got, tt.want) || len(rs) != n {
					t.Errorf("repositories %v: %d results from %v, want %d from %v", tt.repos, len(rs), got, n, tt.want)
				}
			}
		})
	}
}
