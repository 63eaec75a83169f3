package retrieval

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// The query language's side of the embedded index: a row per file with
// its language, the Bloom filter of its trigrams (grams.go) and the
// definitions it holds (symbols.go), written with its chunks.
var querySchema = []string{
	`CREATE TABLE IF NOT EXISTS retrieval_query_files (
		id INTEGER PRIMARY KEY,
		repository TEXT NOT NULL,
		path TEXT NOT NULL,
		language TEXT NOT NULL,
		grams BLOB NOT NULL,
		symbols TEXT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS retrieval_query_files_path ON retrieval_query_files(repository, path)`,
}

// queryVersion numbers what retrieval_query_files holds for a file; an
// index without it (made before the table, or of another version) is
// filled from its stored chunks when opened (fillQueryFiles).
const queryVersion = 1

// Bounds of the work of one query beyond words.
const (
	// queryScanBytes caps the chunk text one search verifies phrases and
	// regular expressions against.
	queryScanBytes = 32 << 20
	// queryGramBytes caps the trigram filters one search reads.
	queryGramBytes = 128 << 20
	// queryCandidates caps the files one search verifies.
	queryCandidates = 20_000
	// queryTime caps the time spent verifying: what was found by then is
	// the answer.
	queryTime = 2 * time.Second
	// queryDepths are the depths of the word rankings filtered, in turn
	// until enough results pass.
	queryDepth1, queryDepth2 = 200, 2000
)

// fileQuery is what the query language stores of one file, computed
// beside the chunker at ingestion (Chunk.query of its first chunk).
type fileQuery struct {
	grams   []byte
	symbols []Symbol
}

// newFileQuery computes the row of a file with content that defines
// syms (extractSymbols).
func newFileQuery(content []byte, syms []Symbol) *fileQuery {
	return &fileQuery{grams: fileGrams(unsafe.String(unsafe.SliceData(content), len(content))), symbols: syms}
}

// encodeSymbols is the symbols column: "kind\tname\tline\n" per symbol.
func encodeSymbols(syms []Symbol) string {
	var b strings.Builder
	for _, s := range syms {
		b.WriteString(s.Kind)
		b.WriteByte('\t')
		b.WriteString(s.Name)
		b.WriteByte('\t')
		b.WriteString(strconv.Itoa(s.Line))
		b.WriteByte('\n')
	}
	return b.String()
}

// decodeSymbols is encodeSymbols' inverse.
func decodeSymbols(s string) []Symbol {
	var out []Symbol
	for line := range strings.Lines(s) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 3 {
			continue
		}
		n, _ := strconv.Atoi(f[2])
		out = append(out, Symbol{Kind: f[0], Name: f[1], Line: n})
	}
	return out
}

// fileContent is a file's text put together from its chunks (which
// overlap), as far as they cover it.
func fileContent(chunks []Chunk) string {
	cs := slices.Clone(chunks)
	slices.SortFunc(cs, func(a, b Chunk) int { return cmp.Compare(a.StartLine, b.StartLine) })
	var b strings.Builder
	next := 1 // the first line not written yet
	for _, c := range cs {
		lines := strings.SplitAfter(c.Text, "\n")
		for i, l := range lines {
			if n := c.StartLine + i; n >= next && l != "" {
				b.WriteString(l)
				next = n + 1
			}
		}
	}
	return b.String()
}

// openQueryTables creates the query language's table in a shard and
// fills it for an index made without it.
func (s *shard) openQueryTables(ctx context.Context) error {
	for _, q := range querySchema {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("retrieval: creating the index tables: %w", err)
		}
	}
	version, err := metaValue(ctx, s.db, "query")
	if err != nil {
		return fmt.Errorf("retrieval: reading the index's schema: %w", err)
	}
	if version == queryVersion {
		return nil
	}
	return s.fillQueryFiles(ctx)
}

// fillQueryFiles makes retrieval_query_files again from the stored
// chunks, in one transaction.
func (s *shard) fillQueryFiles(ctx context.Context) error {
	s.writing.Lock()
	defer s.writing.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("retrieval: filling the query index: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM retrieval_query_files`); err != nil {
		return fmt.Errorf("retrieval: filling the query index: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT repository, path, start_line, language, text FROM retrieval_chunks ORDER BY repository, path, start_line`)
	if err != nil {
		return fmt.Errorf("retrieval: filling the query index: %w", err)
	}
	var (
		repo  string
		file  []Chunk
		batch []queryRow
	)
	flushFile := func() {
		if len(file) > 0 {
			content := fileContent(file)
			batch = append(batch, queryRow{repo, file[0].Path, file[0].Language, newFileQuery([]byte(content), extractSymbols(file[0].Path, []byte(content)))})
		}
		file = nil
	}
	for rows.Next() {
		var c Chunk
		var r string
		if err := rows.Scan(&r, &c.Path, &c.StartLine, &c.Language, &c.Text); err != nil {
			rows.Close()
			return fmt.Errorf("retrieval: filling the query index: %w", err)
		}
		if len(file) > 0 && (r != repo || c.Path != file[0].Path) {
			flushFile()
		}
		repo = r
		file = append(file, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("retrieval: filling the query index: %w", err)
	}
	flushFile()
	if err := insertQueryRows(ctx, tx, batch); err != nil {
		return err
	}
	if err := setMeta(ctx, tx, "query", queryVersion); err != nil {
		return fmt.Errorf("retrieval: filling the query index: %w", err)
	}
	return tx.Commit()
}

type queryRow struct {
	repository, path, language string
	q                          *fileQuery
}

func insertQueryRows(ctx context.Context, tx *sql.Tx, rows []queryRow) error {
	args := make([]any, 0, 5*insertRows)
	for i := 0; i < len(rows); i += insertRows {
		part := rows[i:min(len(rows), i+insertRows)]
		args = args[:0]
		for _, r := range part {
			args = append(args, r.repository, r.path, r.language, r.q.grams, encodeSymbols(r.q.symbols))
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO retrieval_query_files (repository, path, language, grams, symbols) VALUES `+placeholders(len(part), 5), args...); err != nil {
			return fmt.Errorf("retrieval: storing files: %w", err)
		}
	}
	return nil
}

// replaceQueryFiles is replace's part for the query language, in its
// transaction and before the full-text index is written to (a statement
// after that would make FTS5 write its pending terms out).
func replaceQueryFiles(ctx context.Context, tx *sql.Tx, repository string, remove []string, chunks []Chunk) error {
	remove = slices.Clone(remove)
	for _, c := range chunks { // a file stored again without being removed first has one row still
		remove = append(remove, c.Path)
	}
	slices.Sort(remove)
	remove = slices.Compact(remove)
	err := inPaths(repository, remove, func(cond string, args []any) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM retrieval_query_files WHERE `+cond, args...); err != nil {
			return fmt.Errorf("retrieval: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var rows []queryRow
	for i := 0; i < len(chunks); {
		j := i + 1
		for j < len(chunks) && chunks[j].Path == chunks[i].Path {
			j++
		}
		fq := chunks[i].query
		if fq == nil { // not from an Index: from the chunks
			content := []byte(fileContent(chunks[i:j]))
			fq = newFileQuery(content, extractSymbols(chunks[i].Path, content))
		}
		rows = append(rows, queryRow{repository, chunks[i].Path, chunks[i].Language, fq})
		i = j
	}
	return insertQueryRows(ctx, tx, rows)
}

// deleteQueryFiles is deleteRepository's part.
func deleteQueryFiles(ctx context.Context, tx *sql.Tx, repository string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM retrieval_query_files WHERE repository = ?`, repository); err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	return nil
}

// parseSearch reads q's text in the query language.
func parseSearch(q Query) (*parsedQuery, error) {
	if len(q.Text) > MaxQueryBytes {
		return nil, fmt.Errorf("%w: the query is longer than %d bytes", ErrBadQuery, MaxQueryBytes)
	}
	return parseQueryLanguage(q.Text)
}

// searchLanguage is Index.Search for a query beyond words.
func (ix *Index) searchLanguage(ctx context.Context, q Query, pq *parsedQuery) ([]Result, error) {
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	q.Limit = min(q.Limit, MaxLimit)
	words := pq.rankWords()
	if len(parseQuery(words)) == 0 {
		words = ""
	}
	if ix.o.Embedder != nil && q.Vector == nil && words != "" {
		vs, err := ix.o.Embedder.Embed(ctx, []string{words})
		if err != nil {
			return nil, fmt.Errorf("retrieval: embedding the query: %w", err)
		}
		if len(vs) == 1 {
			q.Vector = vs[0]
		}
	}
	if s, ok := ix.o.Backend.(*SQLite); ok {
		return s.searchLanguage(ctx, q, pq, words)
	}
	// Another backend ranks the words; what the language adds is checked
	// on the best chunks of the files it ranks, deeper until enough pass
	// (as filterRanked does).
	if len(pq.syms) > 0 || words == "" {
		return nil, fmt.Errorf("%w: this index answers sym:, and regular expressions or filters without words, only in the embedded backend: add words to search for", ErrBadQuery)
	}
	v := newVerifier(pq)
	var out []Result
	for _, depth := range []int{queryDepth1, queryDepth2} {
		rs, err := ix.o.Backend.Search(ctx, Query{Text: words, Vector: q.Vector, Repositories: q.Repositories, Limit: q.Limit, depth: depth})
		if err != nil {
			return nil, err
		}
		out = out[:0]
		for _, r := range rs {
			if len(out) == q.Limit || v.spent() {
				break
			}
			if v.file(r.Repository, r.Path, r.Language) && v.chunk(&r) {
				out = append(out, r)
			}
		}
		if len(out) == q.Limit || len(rs) < depth || v.spent() {
			break
		}
	}
	return out, nil
}

// verifier checks files and chunks against a query, within the bounds
// of one search.
type verifier struct {
	pq       *parsedQuery
	deadline time.Time
	scanned  int
	lower    []byte // scratch: a chunk's text, lower-cased
}

func newVerifier(pq *parsedQuery) *verifier {
	return &verifier{pq: pq, deadline: time.Now().Add(queryTime)}
}

// spent reports whether the search's bounds are reached.
func (v *verifier) spent() bool {
	return v.scanned >= queryScanBytes || time.Now().After(v.deadline)
}

// file reports whether a file passes path:, lang: and repo: (and their
// exclusions); repo: looks at the repository's ID, not at the branch of
// its index key.
func (v *verifier) file(key, path, lang string) bool {
	pq := v.pq
	repository, _ := splitKey(key)
	for _, p := range pq.paths {
		if !smartContains(path, p) {
			return false
		}
	}
	for _, p := range pq.notPaths {
		if smartContains(path, p) {
			return false
		}
	}
	if len(pq.langs) > 0 && !slices.Contains(pq.langs, lang) || slices.Contains(pq.notLangs, lang) {
		return false
	}
	if len(pq.repos) > 0 && !slices.ContainsFunc(pq.repos, func(r string) bool { return smartContains(repository, r) }) {
		return false
	}
	for _, r := range pq.notRepos {
		if smartContains(repository, r) {
			return false
		}
	}
	return true
}

// chunk reports whether a chunk matches the query's phrases and regular
// expressions and none of its exclusions, setting r.line to the first
// line matched.
func (v *verifier) chunk(r *Result) bool {
	pq := v.pq
	v.scanned += len(r.Text)
	first := -1
	pats := pq.patterns()
	if len(pats) > 0 {
		v.lower = asciiLower(v.lower, r.Text)
		lower := unsafe.String(unsafe.SliceData(v.lower), len(v.lower))
		for _, p := range pats {
			if !p.grams.hasLits(lower) {
				return false
			}
		}
	}
	for _, p := range pats {
		loc := p.re.FindStringIndex(r.Text)
		if loc == nil {
			return false
		}
		if first < 0 || loc[0] < first {
			first = loc[0]
		}
	}
	for _, p := range pq.not {
		if p.re.MatchString(r.Text) {
			return false
		}
	}
	if len(pq.notWords) > 0 {
		t := " " + terms(r.Text) + " "
		for _, w := range pq.notWords {
			if strings.Contains(t, " "+strings.Join(w, " ")+" ") {
				return false
			}
		}
	}
	if first >= 0 {
		r.line = r.StartLine + strings.Count(r.Text[:first], "\n")
	}
	return true
}

// grams reports whether a file's trigrams allow its phrases and regular
// expressions.
func (v *verifier) grams(filter []byte) bool {
	for _, p := range v.pq.patterns() {
		if !p.grams.mayMatch(filter) {
			return false
		}
	}
	return true
}

// candidate is a file that passed the file-level tests.
type candidate struct {
	shard                      int
	repository, path, language string
	rank                       int // of its best sym: match: higher is better
	lines                      []int
}

// needsFiles reports whether the query has file-level tests worth a
// pass over retrieval_query_files (rather than over the ranked chunks).
func (pq *parsedQuery) needsFiles() bool {
	return len(pq.syms) > 0 || len(pq.paths) > 0 || len(pq.langs) > 0 || len(pq.repos) > 0 || len(pq.regexps) > 0
}

// searchLanguage answers a query beyond words: the ranked words
// (Search, deeper) filtered, or without words the candidate files in
// order (sym: matches first), verified chunk by chunk, within the
// bounds above.
func (s *SQLite) searchLanguage(ctx context.Context, q Query, pq *parsedQuery, words string) ([]Result, error) {
	v := newVerifier(pq)
	var cands map[string]*candidate // by repository + "\x00" + path
	var order []*candidate
	if pq.needsFiles() || words == "" {
		lists := make([][]*candidate, len(s.shards))
		budget := queryGramBytes / len(s.shards)
		if err := s.each(func(i int, sh *shard) error {
			var err error
			lists[i], err = sh.candidates(ctx, i, q.Repositories, v, budget)
			return err
		}); err != nil {
			return nil, err
		}
		cands = map[string]*candidate{}
		for _, l := range lists {
			for _, c := range l {
				cands[c.repository+"\x00"+c.path] = c
				order = append(order, c)
			}
		}
		slices.SortFunc(order, func(a, b *candidate) int {
			if c := cmp.Compare(b.rank, a.rank); c != 0 {
				return c
			}
			if c := cmp.Compare(len(a.path), len(b.path)); c != 0 { // shallower files first
				return c
			}
			if c := cmp.Compare(a.path, b.path); c != 0 {
				return c
			}
			return cmp.Compare(a.repository, b.repository)
		})
	}
	if words != "" {
		return s.filterRanked(ctx, q, v, words, cands)
	}
	return s.scanCandidates(ctx, q, v, order)
}

// filterRanked is the word ranking with what passes the query kept.
func (s *SQLite) filterRanked(ctx context.Context, q Query, v *verifier, words string, cands map[string]*candidate) ([]Result, error) {
	var out []Result
	for _, depth := range []int{queryDepth1, queryDepth2} {
		rs, err := s.Search(ctx, Query{Text: words, Vector: q.Vector, Repositories: q.Repositories, Limit: q.Limit, depth: depth})
		if err != nil {
			return nil, err
		}
		out = out[:0]
		for _, r := range rs {
			if len(out) == q.Limit || v.spent() {
				break
			}
			if cands != nil {
				if _, ok := cands[r.Repository+"\x00"+r.Path]; !ok {
					continue
				}
			}
			if v.file(r.Repository, r.Path, r.Language) && v.chunk(&r) {
				out = append(out, r)
			}
		}
		if len(out) == q.Limit || len(rs) < depth || v.spent() {
			break
		}
	}
	return out, nil
}

// scanCandidates verifies the candidates' chunks in order: one result
// per file (per definition, for sym:).
func (s *SQLite) scanCandidates(ctx context.Context, q Query, v *verifier, order []*candidate) ([]Result, error) {
	var out []Result
	const batch = 16
	for i := 0; i < len(order) && len(out) < q.Limit && !v.spent(); i += batch {
		part := order[i:min(len(order), i+batch)]
		byShard := map[int][]*candidate{}
		for _, c := range part {
			byShard[c.shard] = append(byShard[c.shard], c)
		}
		chunks := map[string][]Result{}
		for sh, cs := range byShard {
			loaded, err := s.shards[sh].fileChunks(ctx, sh, cs)
			if err != nil {
				return nil, err
			}
			for k, rs := range loaded {
				chunks[k] = rs
			}
		}
		for _, c := range part {
			if len(out) == q.Limit || v.spent() {
				break
			}
			rs := chunks[c.repository+"\x00"+c.path]
			if len(c.lines) > 0 { // sym:: the chunks of its definitions
				done := map[int]bool{}
				for _, line := range c.lines {
					for j := range rs {
						r := rs[j]
						if r.StartLine <= line && line <= r.EndLine && !done[j] && len(out) < q.Limit && v.chunk(&r) {
							done[j] = true
							if r.line == 0 {
								r.line = line
							}
							out = append(out, r)
							break
						}
					}
				}
				continue
			}
			for _, r := range rs {
				if v.chunk(&r) {
					out = append(out, r)
					break
				}
				if v.spent() {
					break
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	for i := range out { // in the order found: a score that keeps it
		out[i].Score = float64(len(out) - i)
	}
	return out, nil
}

// fileChunks loads the chunks of the candidates (all in this shard), by
// repository + "\x00" + path, in line order.
func (s *shard) fileChunks(ctx context.Context, shardIndex int, cs []*candidate) (map[string][]Result, error) {
	out := map[string][]Result{}
	byRepo := map[string][]any{}
	for _, c := range cs {
		byRepo[c.repository] = append(byRepo[c.repository], c.path)
	}
	for repo, paths := range byRepo {
		rows, err := s.db.QueryContext(ctx, `SELECT id, repository, path, commit_id, start_line, end_line, language, text FROM retrieval_chunks
			WHERE repository = ? AND path IN (?`+strings.Repeat(",?", len(paths)-1)+`) ORDER BY path, start_line`, append([]any{repo}, paths...)...)
		if err != nil {
			return nil, fmt.Errorf("retrieval: %w", err)
		}
		for rows.Next() {
			var r Result
			if err := rows.Scan(&r.id, &r.Repository, &r.Path, &r.Commit, &r.StartLine, &r.EndLine, &r.Language, &r.Text); err != nil {
				rows.Close()
				return nil, fmt.Errorf("retrieval: %w", err)
			}
			r.shard = shardIndex
			k := r.Repository + "\x00" + r.Path
			out[k] = append(out[k], r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("retrieval: %w", err)
		}
	}
	return out, nil
}

// candidates are the shard's files that pass the query's file-level
// tests: path:, lang:, repo:, sym: (with the lines of the definitions)
// and the trigrams of its phrases and regular expressions, at most
// queryCandidates, reading at most budget bytes of filters.
func (s *shard) candidates(ctx context.Context, shardIndex int, repos []string, v *verifier, budget int) ([]*candidate, error) {
	pq := v.pq
	cols := "repository, path, language"
	needGrams := len(pq.patterns()) > 0
	if needGrams {
		cols += ", grams"
	} else {
		cols += ", ''"
	}
	if len(pq.syms) > 0 {
		cols += ", symbols"
	} else {
		cols += ", ''"
	}
	where, args := "1", []any{}
	if len(repos) > 0 {
		where = "repository IN (?" + strings.Repeat(",?", len(repos)-1) + ")"
		for _, r := range repos {
			args = append(args, r)
		}
	}
	for _, sym := range pq.syms {
		where += ` AND symbols LIKE ? ESCAPE '\'`
		args = append(args, "%"+likeEscape(sym)+"%")
	}
	if len(pq.langs) == 1 {
		where += " AND language = ?"
		args = append(args, pq.langs[0])
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+cols+` FROM retrieval_query_files WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("retrieval: searching: %w", err)
	}
	defer rows.Close()
	var out []*candidate
	read := 0
	for rows.Next() && len(out) < queryCandidates && read < budget {
		c := &candidate{shard: shardIndex}
		var grams []byte
		var syms string
		if err := rows.Scan(&c.repository, &c.path, &c.language, &grams, &syms); err != nil {
			return nil, fmt.Errorf("retrieval: %w", err)
		}
		read += len(grams)
		if !v.file(c.repository, c.path, c.language) || needGrams && !v.grams(grams) {
			continue
		}
		if len(pq.syms) > 0 && !symMatch(c, pq.syms, decodeSymbols(syms)) {
			continue
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// symMatch sets c's rank and definition lines for the sym: terms, and
// reports whether the file defines each: a name equal to the term (in
// its case, rank 3, or another, 2), starting with it (1), or holding it
// (0).
func symMatch(c *candidate, want []string, syms []Symbol) bool {
	c.rank = 0
	for i, w := range want {
		best := -1
		var lines []int
		lw := strings.ToLower(w)
		for _, s := range syms {
			ln := strings.ToLower(s.Name)
			r := -1
			switch {
			case s.Name == w:
				r = 3
			case ln == lw:
				r = 2
			case strings.HasPrefix(ln, lw):
				r = 1
			case strings.Contains(ln, lw):
				r = 0
			}
			if r < 0 || s.Kind == "package" && r < 2 {
				continue
			}
			if r > best {
				best, lines = r, nil
			}
			if r == best {
				lines = append(lines, s.Line)
			}
		}
		if best < 0 {
			return false
		}
		c.rank += best
		if i == 0 {
			c.lines = lines
		}
	}
	return true
}

// likeEscape escapes LIKE's wildcards (and the escape) in s.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
