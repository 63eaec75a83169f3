package retrieval

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"hash/fnv"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The evaluation: queries with known answers derived from a corpus, a
// doc comment (its first sentence, without the name it documents) whose
// answer is the file that holds it. Over Go's tree: package doc
// comments and exported types' doc comments (go/parser); over Python's
// standard library: module and class docstrings (Python's own ast
// module). A query that two files would answer is dropped, and of the
// rest evalPerKind of each kind are kept, chosen by a hash of file and
// name. testdata/eval/*.json are the sets derived on this project's
// reference machine (the corpus's version is in each); -update-eval
// writes them again.

var updateEval = flag.Bool("update-eval", false, "write testdata/eval/*.json from the corpora")

// evalPerKind is how many queries of each kind a set keeps.
const evalPerKind = 100

// evalQuery is one query of an evaluation set.
type evalQuery struct {
	Query string `json:"query"`
	File  string `json:"file"`
	Kind  string `json:"kind"` // package, type (Go); module, class (Python)
	Name  string `json:"name"` // what the comment documents
}

// evalSet is a file of testdata/eval.
type evalSet struct {
	Corpus  string      `json:"corpus"`
	Version string      `json:"version"` // the corpus's: Go's or Python's
	Queries []evalQuery `json:"queries"`
}

// evalQueryWords caps a derived query's words.
const evalQueryWords = 24

// docQuery is the query made of a doc comment: its first sentence
// (or paragraph), without the words naming name (and "Package"), or ""
// when fewer than 4 searchable words remain.
func docQuery(doc, name string) string {
	doc = strings.TrimSpace(doc)
	if i := strings.Index(doc, "\n\n"); i >= 0 {
		doc = doc[:i]
	}
	doc = strings.Join(strings.Fields(doc), " ")
	if i := strings.Index(doc, ". "); i >= 0 {
		doc = doc[:i+1]
	}
	var kept []string
	for _, w := range strings.Fields(doc) {
		// "io.Reader", "sync/atomic", "'hp_roman8.txt'": a word with the
		// name in it goes.
		if w == "Package" || slices.Contains(evalWords(w), name) {
			continue
		}
		kept = append(kept, w)
		if len(kept) == evalQueryWords {
			break
		}
	}
	q := strings.Join(kept, " ")
	if len(parseQuery(q)) < 4 {
		return ""
	}
	return q
}

// evalWords are the runs of letters, digits and '_' of s.
func evalWords(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' })
}

// evalSample keeps evalPerKind candidates of each kind, by hash, after
// dropping the queries that more than one file would answer.
func evalSample(cands []evalQuery) []evalQuery {
	files := map[string]map[string]bool{}
	for _, c := range cands {
		if files[c.Query] == nil {
			files[c.Query] = map[string]bool{}
		}
		files[c.Query][c.File] = true
	}
	hash := func(c evalQuery) uint64 {
		h := fnv.New64a()
		h.Write([]byte(c.Kind + "\x00" + c.File + "\x00" + c.Name))
		return h.Sum64()
	}
	byKind := map[string][]evalQuery{}
	seen := map[string]bool{}
	for _, c := range cands {
		if len(files[c.Query]) > 1 || seen[c.Query] {
			continue
		}
		seen[c.Query] = true
		byKind[c.Kind] = append(byKind[c.Kind], c)
	}
	var out []evalQuery
	for _, kind := range slices.Sorted(func(yield func(string) bool) {
		for k := range byKind {
			if !yield(k) {
				return
			}
		}
	}) {
		cs := byKind[kind]
		slices.SortFunc(cs, func(a, b evalQuery) int {
			if c := cmp.Compare(hash(a), hash(b)); c != 0 {
				return c
			}
			return cmp.Compare(a.File, b.File)
		})
		out = append(out, cs[:min(len(cs), evalPerKind)]...)
	}
	return out
}

// indexable reports whether the index holds the corpus file rel (of
// content data): what an ingestion skips is no answer.
func indexable(rel string, data []byte) bool {
	return int64(len(data)) <= DefaultMaxFileBytes && skipReason(rel, data) == ""
}

// deriveGo derives the Go set from the tree at src (GOROOT/src): package
// and exported type doc comments of files that are not tests, test data
// or commands' internals.
func deriveGo(src string) ([]evalQuery, error) {
	var cands []evalQuery
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, src+string(filepath.Separator)))
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil || !indexable(rel, data) {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), rel, data, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil
		}
		if f.Doc != nil {
			if q := docQuery(f.Doc.Text(), f.Name.Name); q != "" {
				cands = append(cands, evalQuery{Query: q, File: rel, Kind: "package", Name: f.Name.Name})
			}
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(g.Specs) == 1 {
					doc = g.Doc
				}
				if doc == nil || !ts.Name.IsExported() {
					continue
				}
				if q := docQuery(doc.Text(), ts.Name.Name); q != "" {
					cands = append(cands, evalQuery{Query: q, File: rel, Kind: "type", Name: ts.Name.Name})
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evalSample(cands), nil
}

// pyDocs is run by python3 over the files named on its stdin: a JSON line
// per file with its module docstring and its classes' (name, docstring).
const pyDocs = `
import ast, json, sys
for p in sys.stdin.read().split("\n"):
    if not p:
        continue
    try:
        with open(p, "rb") as f:
            t = ast.parse(f.read())
    except Exception:
        continue
    classes = [[n.name, ast.get_docstring(n) or ""] for n in ast.walk(t) if isinstance(n, ast.ClassDef)]
    print(json.dumps({"path": p, "doc": ast.get_docstring(t) or "", "classes": classes}))
`

// pythonLib is the standard library directory of the test user's
// python3 (scripts/install-prereqs installs python3 when missing) and
// its version.
func pythonLib() (dir, version string, err error) {
	out, err := exec.Command("python3", "-c", `import sys, sysconfig; print(sysconfig.get_paths()["stdlib"]); print("%d.%d.%d" % sys.version_info[:3])`).Output()
	if err != nil {
		return "", "", fmt.Errorf("python3 for the Python corpus: %v", err)
	}
	dir, version, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	return dir, version, nil
}

// pythonFiles are the files of the Python corpus: the standard library
// without installed packages, tests and caches, by path relative to dir.
func pythonFiles(dir string) ([]string, error) {
	var rels []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test", "config-3.11-x86_64-linux-gnu":
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			rels = append(rels, filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator))))
		}
		return nil
	})
	return rels, err
}

// derivePython derives the Python set: module and class docstrings.
func derivePython(dir string, rels []string) ([]evalQuery, error) {
	var in bytes.Buffer
	for _, rel := range rels {
		if !strings.HasSuffix(rel, ".py") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return nil, err
		}
		if indexable(rel, data) {
			in.WriteString(filepath.Join(dir, rel) + "\n")
		}
	}
	cmd := exec.Command("python3", "-c", pyDocs)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("python3 reading docstrings: %v", err)
	}
	var cands []evalQuery
	for line := range bytes.Lines(out) {
		var r struct {
			Path    string     `json:"path"`
			Doc     string     `json:"doc"`
			Classes [][]string `json:"classes"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(r.Path, dir+string(filepath.Separator)))
		module := strings.TrimSuffix(path.Base(rel), ".py")
		if q := docQuery(r.Doc, module); q != "" {
			cands = append(cands, evalQuery{Query: q, File: rel, Kind: "module", Name: module})
		}
		for _, c := range r.Classes {
			if q := docQuery(c[1], c[0]); q != "" && !strings.HasPrefix(c[0], "_") {
				cands = append(cands, evalQuery{Query: q, File: rel, Kind: "class", Name: c[0]})
			}
		}
	}
	return evalSample(cands), nil
}

// loadEvalSet is testdata/eval/name.json, or (-update-eval) derived
// writes it. A set derived from a corpus of the recorded version must
// equal it: the derivation is deterministic.
func checkEvalSet(t testing.TB, name string, derived evalSet) {
	t.Helper()
	file := filepath.Join("testdata", "eval", name+".json")
	if *updateEval {
		data, _ := json.MarshalIndent(derived, "", " ")
		os.MkdirAll(filepath.Dir(file), 0o755)
		if err := os.WriteFile(file, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var kept evalSet
	if err := json.Unmarshal(data, &kept); err != nil {
		t.Fatal(err)
	}
	if kept.Version != derived.Version {
		t.Logf("%s: the corpus is version %s, %s holds version %s's set: the derived set is used", name, derived.Version, file, kept.Version)
		return
	}
	if !slices.Equal(kept.Queries, derived.Queries) {
		t.Fatalf("%s: the set derived from %s %s differs from %s (run with -update-eval if the procedure changed)", name, name, derived.Version, file)
	}
}

// evalMetrics are a ranking's scores over a set: recall@1, recall@5 and
// the mean reciprocal rank of the answer within the first 10.
type evalMetrics struct{ r1, r5, mrr float64 }

// score adds the rank (1-based; 0 = not in the first 10) of one query.
func (m *evalMetrics) add(rank int) {
	if rank == 1 {
		m.r1++
	}
	if rank >= 1 && rank <= 5 {
		m.r5++
	}
	if rank >= 1 && rank <= 10 {
		m.mrr += 1 / float64(rank)
	}
}

func (m evalMetrics) mean(n int) evalMetrics {
	return evalMetrics{m.r1 / float64(n), m.r5 / float64(n), m.mrr / float64(n)}
}

func (m evalMetrics) report(b *testing.B, prefix string) {
	b.ReportMetric(m.r1, prefix+"-r@1")
	b.ReportMetric(m.r5, prefix+"-r@5")
	b.ReportMetric(m.mrr, prefix+"-mrr")
}

// rankOf is the 1-based rank of file among the distinct paths of rs (0
// if absent).
func rankOf(rs []Result, file string) int {
	if i := slices.Index(paths(rs), file); i >= 0 {
		return i + 1
	}
	return 0
}

// naiveBM25 is the baseline: each file one document of its plain tokens
// (lower-cased runs of letters and digits: no identifier splitting, no
// stop words, no path), ranked by Okapi BM25 (k1 1.2, b 0.75). Only the
// queries' words are counted, so its memory is the queries'.
type naiveBM25 struct {
	files []string
	lens  []int
	tf    map[string]map[int]int // word → file → count
	avg   float64
}

func plainTokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// newNaiveBM25 indexes the documents (path → content) for the words of
// queries.
func newNaiveBM25(docs func(yield func(path string, content []byte) bool), queries []string) *naiveBM25 {
	n := &naiveBM25{tf: map[string]map[int]int{}}
	for _, q := range queries {
		for _, w := range plainTokens(q) {
			n.tf[w] = map[int]int{}
		}
	}
	total := 0
	for p, content := range docs {
		id := len(n.files)
		n.files = append(n.files, p)
		toks := plainTokens(string(content))
		n.lens = append(n.lens, len(toks))
		total += len(toks)
		for _, w := range toks {
			if m, ok := n.tf[w]; ok {
				m[id]++
			}
		}
	}
	n.avg = float64(total) / float64(max(1, len(n.files)))
	return n
}

// rank is the 1-based rank of file for query among the first 10 (0 if
// not there).
func (n *naiveBM25) rank(query, file string) int {
	const k1, b = 1.2, 0.75
	score := map[int]float64{}
	N := float64(len(n.files))
	for _, w := range plainTokens(query) {
		m := n.tf[w]
		df := float64(len(m))
		idf := math.Log(1 + (N-df+0.5)/(df+0.5))
		for id, tf := range m {
			f := float64(tf)
			score[id] += idf * f * (k1 + 1) / (f + k1*(1-b+b*float64(n.lens[id])/n.avg))
		}
	}
	type hit struct {
		id int
		s  float64
	}
	hits := make([]hit, 0, len(score))
	for id, s := range score {
		hits = append(hits, hit{id, s})
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if c := cmp.Compare(b.s, a.s); c != 0 {
			return c
		}
		return cmp.Compare(n.files[a.id], n.files[b.id])
	})
	for i, h := range hits[:min(10, len(hits))] {
		if n.files[h.id] == file {
			return i + 1
		}
	}
	return 0
}

// corpusRepo is a bare repository of one commit holding the files rels
// of dir, built by git fast-import.
func corpusRepo(t testing.TB, dir string, rels []string) (gitDir, commit string) {
	t.Helper()
	gitDir = filepath.Join(t.TempDir(), "corpus.git")
	if _, err := gitT(gitDir, nil, "init", "-q", "--bare", gitDir); err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	stream.WriteString("commit refs/heads/main\ncommitter t <t@example.org> 1700000000 +0000\ndata 6\ncorpus\n")
	for _, rel := range rels {
		data, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&stream, "M 100644 inline %s\ndata %d\n", rel, len(data))
		stream.Write(data)
		stream.WriteByte('\n')
	}
	if _, err := gitT(gitDir, &stream, "-c", "pack.compression=1", "fast-import", "--quiet"); err != nil {
		t.Fatal(err)
	}
	commit, err := gitT(gitDir, nil, "rev-parse", "main")
	if err != nil {
		t.Fatal(err)
	}
	return gitDir, commit
}

// evalCorpus is a corpus of the evaluation, as a repository, with its
// set and its files for the baseline.
type evalCorpus struct {
	name          string
	gitDir, first string
	set           evalSet
	dir           string
	rels          []string // the files of the repository, relative to dir
}

// docs are the corpus's files the index holds, for the baseline.
func (c evalCorpus) docs(yield func(string, []byte) bool) {
	for _, rel := range c.rels {
		data, err := os.ReadFile(filepath.Join(c.dir, rel))
		if err != nil || vendored(rel) || !indexable(rel, data) {
			continue
		}
		if !yield(rel, data) {
			return
		}
	}
}

// evalCorpora are the Go tree (the test binary's goTree) and Python's
// standard library, each with its set (checked against testdata/eval).
func evalCorpora(t testing.TB) []evalCorpus {
	t.Helper()
	g := goTreeRepo(t)
	root, err := goRoot()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "src")
	version, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	goSet, err := deriveGo(src)
	if err != nil {
		t.Fatal(err)
	}
	var goRels []string
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			goRels = append(goRels, filepath.ToSlash(strings.TrimPrefix(p, src+string(filepath.Separator))))
		}
		return err
	})
	goVersion, _, _ := strings.Cut(string(version), "\n")
	corpora := []evalCorpus{{name: "go", gitDir: g.dir, first: g.first, set: evalSet{Corpus: "go", Version: goVersion, Queries: goSet}, dir: src, rels: goRels}}

	pyDir, pyVersion, err := pythonLib()
	if err != nil {
		t.Fatal(err)
	}
	rels, err := pythonFiles(pyDir)
	if err != nil {
		t.Fatal(err)
	}
	pySet, err := derivePython(pyDir, rels)
	if err != nil {
		t.Fatal(err)
	}
	gitDir, first := corpusRepo(t, pyDir, rels)
	corpora = append(corpora, evalCorpus{name: "python", gitDir: gitDir, first: first, set: evalSet{Corpus: "python", Version: "python" + pyVersion, Queries: pySet}, dir: pyDir, rels: rels})
	for _, c := range corpora {
		checkEvalSet(t, c.name, c.set)
	}
	return corpora
}

// evalIndex scores ix (corpus c ingested as repository c.name) over c's
// set, searching with limit 10.
func evalIndex(t testing.TB, ix *Index, c evalCorpus) evalMetrics {
	t.Helper()
	var m evalMetrics
	for _, q := range c.set.Queries {
		rs, err := ix.Search(t.Context(), Query{Text: q.Query, Repositories: []string{c.name}, Limit: 10})
		if err != nil {
			t.Fatalf("%q: %v", q.Query, err)
		}
		m.add(rankOf(rs, q.File))
	}
	return m.mean(len(c.set.Queries))
}

// TestEvalSets: the evaluation sets derived from this machine's corpora
// are testdata/eval's when the corpora are of the versions recorded
// there (the procedure is deterministic), and each has both kinds of
// queries, every answer a file of the corpus.
func TestEvalSets(t *testing.T) {
	for _, c := range evalCorpora(t) {
		kinds := map[string]int{}
		for _, q := range c.set.Queries {
			kinds[q.Kind]++
			if !slices.Contains(c.rels, q.File) {
				t.Errorf("%s: %q answers %s, not a file of the corpus", c.name, q.Query, q.File)
			}
			if slices.Contains(evalWords(q.Query), q.Name) {
				t.Errorf("%s: %q names what it documents, %s", c.name, q.Query, q.Name)
			}
		}
		if len(kinds) != 2 || len(c.set.Queries) < evalPerKind {
			t.Errorf("%s: %d queries of kinds %v, want 2 kinds, %d at least", c.name, len(c.set.Queries), kinds, evalPerKind)
		}
	}
}
