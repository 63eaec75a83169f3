package retrieval

import (
	"cmp"
	"container/heap"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	sqlite "github.com/glebarez/go-sqlite"
)

// SQLite is the embedded Backend: chunks in a table, their words in an
// FTS5 index ranked by BM25 (the path's words weigh pathWeight times the
// body's), each file's own fields (path, name, symbols, doc comments) in
// another, and their vectors, when there are some, searched by
// brute-force cosine similarity; a search ranks files (Search).
//
// The index may be spread over several databases (shards), each file's
// chunks in the one its path hashes to: each shard has its own writer,
// so a batch is written by as many connections at once (one SQLite
// writer is what bounds an ingestion), and a search asks every shard and
// merges their rankings.
type SQLite struct {
	shards []*shard
}

// shard is one database of the index.
type shard struct {
	db *sql.DB
	// writing is held by replace: batches written at once (Ingest) take
	// their turns here rather than in SQLite's busy timeout.
	writing sync.Mutex
}

// BM25 column weights: words of the path count this much more than words
// of the body (a query naming a package or file finds it first).
const pathWeight = 4.0

var sqliteSchema = []string{
	`CREATE TABLE IF NOT EXISTS retrieval_chunks (
		id INTEGER PRIMARY KEY,
		repository TEXT NOT NULL,
		path TEXT NOT NULL,
		commit_id TEXT NOT NULL,
		start_line INTEGER NOT NULL,
		end_line INTEGER NOT NULL,
		language TEXT NOT NULL,
		text TEXT NOT NULL,
		vector BLOB
	)`,
	`CREATE INDEX IF NOT EXISTS retrieval_chunks_path ON retrieval_chunks(repository, path)`,
	// One row per file with chunks: the fields it is ranked by besides
	// its chunks (fileFields), as text, which its row of
	// retrieval_files_fts is computed from (and removed by).
	`CREATE TABLE IF NOT EXISTS retrieval_files (
		id INTEGER PRIMARY KEY,
		repository TEXT NOT NULL,
		path TEXT NOT NULL,
		symbols TEXT NOT NULL,
		docs TEXT NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS retrieval_files_path ON retrieval_files(repository, path)`,
	// The terms version the index was built with (termsVersion).
	`CREATE TABLE IF NOT EXISTS retrieval_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)`,
}

// ftsSchema is the full-text index over retrieval_chunks, which rebuild
// drops and creates again.
var ftsSchema = []string{
	// The index holds our own tokens (terms), lower-cased already: the
	// ascii tokenizer (cheaper than unicode61) only splits them at the
	// spaces we put.
	// repo holds one token per chunk naming its repository (repoToken),
	// so a search intersects posting lists instead of joining rows.
	// Contentless (content = ''): the terms are not stored a second time
	// (the chunks' text is in retrieval_chunks); a chunk leaves the
	// index by FTS5's 'delete' command with the terms it was indexed
	// with, recomputed from its text (ftsDelete).
	`CREATE VIRTUAL TABLE IF NOT EXISTS retrieval_fts USING fts5(path, body, repo, tokenize = 'ascii', content = '')`,
	// FTS5 writes a segment each time its in-memory terms exceed
	// hashsize (default 1 MiB), and at the end of each batch's statement:
	// a bigger one makes fewer segments to merge while ingesting.
	`INSERT INTO retrieval_fts(retrieval_fts, rank) VALUES ('hashsize', 16777216)`,
	`CREATE VIRTUAL TABLE IF NOT EXISTS retrieval_vocab USING fts5vocab(retrieval_fts, row)`,
}

// filesSchema is the full-text index of the files' own fields
// (fileTerms), contentless like retrieval_fts; rebuildFiles drops and
// creates it again. One row per file: FTS5's bm25 adds a row's
// weighted hits of a word over its columns before saturating them,
// which is BM25F's rule (fileWeights).
var filesSchema = []string{
	`CREATE VIRTUAL TABLE IF NOT EXISTS retrieval_files_fts USING fts5(path, name, symbols, docs, repo, tokenize = 'ascii', content = '')`,
	`CREATE VIRTUAL TABLE IF NOT EXISTS retrieval_files_vocab USING fts5vocab(retrieval_files_fts, row)`,
}

// filesVersion numbers what a file's row in retrieval_files_fts holds
// (fileTerms, extractSymbols): an index built with another one (or
// with other terms, termsVersion) has its files' rows made again from
// their chunks when it is opened (rebuildFiles).
const filesVersion = 1

// filesBuilt is the value of retrieval_meta's 'files' row of an index
// whose file rows are current.
const filesBuilt = filesVersion<<8 | termsVersion

// termsVersion numbers what terms() makes of a text: 1, every word; 2,
// without unindexed words. A contentless index can remove a chunk only
// by the terms it was indexed with, so an index of another version (or
// an older one with a content table) is rebuilt from its chunks when it
// is opened.
const termsVersion = 2

// termsFunc is an SQL function of one text or blob: its terms, which
// the index's rows are built from in SQLite. Registered with the driver
// for every connection opened after this package's initialization: the
// driver has no per-connection functions, so every SQLite connection of
// the process has this one and pendingFunc, the instance database's too
// (integrations/README.md says what doing without them cost).
const termsFunc = "retrieval_terms"

// pendingFunc is an SQL function of (batch, i, column): the terms of
// chunk i of a batch being written, column 0 its path's, 1 its text's,
// as the batch's reader computed them (beside the writers, not in them).
const pendingFunc = "retrieval_pending"

// pendingFileFunc is pendingFunc for the files of a batch (pending.files):
// (batch, i, column), the columns those of retrieval_files_fts.
const pendingFileFunc = "retrieval_pending_file"

// pending holds the batches whose FTS5 rows a statement is inserting,
// by key, for pendingFunc: the driver registers a function for every
// connection at once, so what it reads is shared the same way. An entry
// lives for one statement.
var pending = struct {
	sync.Mutex
	next    int64
	batches map[int64][]Chunk
	files   map[int64][]fileRow
}{batches: map[int64][]Chunk{}, files: map[int64][]fileRow{}}

// fileRow is a file of a batch being written.
type fileRow struct {
	path string
	f    *fileFields
}

// fileTerms are the terms of a file's row in retrieval_files_fts:
// column 0 its path's, 1 its name's (without the extension), 2 the
// names it defines, 3 its doc comments.
func fileTerms(p string, f *fileFields, col int64) string {
	switch col {
	case 0:
		return terms(p)
	case 1:
		base := path.Base(p)
		return terms(strings.TrimSuffix(base, path.Ext(base)))
	case 2:
		sym, _ := f.indexTerms()
		return sym
	}
	_, doc := f.indexTerms()
	return doc
}

func init() {
	sqlite.MustRegisterScalarFunction(pendingFunc, 3, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		key, _ := args[0].(int64)
		i, _ := args[1].(int64)
		col, _ := args[2].(int64)
		pending.Lock()
		cs := pending.batches[key]
		pending.Unlock()
		if i < 0 || i >= int64(len(cs)) {
			return nil, fmt.Errorf("%s: no chunk %d in batch %d", pendingFunc, i, key)
		}
		path, body := cs[i].indexTerms()
		if col == 0 {
			return path, nil
		}
		return body, nil
	})
	sqlite.MustRegisterScalarFunction(pendingFileFunc, 3, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		key, _ := args[0].(int64)
		i, _ := args[1].(int64)
		col, _ := args[2].(int64)
		pending.Lock()
		fs := pending.files[key]
		pending.Unlock()
		if i < 0 || i >= int64(len(fs)) {
			return nil, fmt.Errorf("%s: no file %d in batch %d", pendingFileFunc, i, key)
		}
		return fileTerms(fs[i].path, fs[i].f, col), nil
	})
	sqlite.MustRegisterDeterministicScalarFunction(termsFunc, 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		switch v := args[0].(type) {
		case string:
			return terms(v), nil
		case []byte: // the driver's copy, ours: not copied again
			return terms(unsafe.String(unsafe.SliceData(v), len(v))), nil
		case nil:
			return nil, nil
		}
		return nil, fmt.Errorf("%s: not a text", termsFunc)
	})
}

// repoToken is the word that stands for a repository in the index.
func repoToken(repository string) string {
	sum := sha256.Sum256([]byte(repository))
	return "r" + hex.EncodeToString(sum[:10])
}

// NewSQLite creates the tables (if missing) in each of dbs (glebarez's
// driver, which has FTS5): the index's shards, in this order always (a
// file's chunks are in the shard its path hashes to among them).
func NewSQLite(ctx context.Context, dbs ...*sql.DB) (*SQLite, error) {
	if len(dbs) == 0 {
		return nil, errors.New("retrieval: NewSQLite needs a database")
	}
	s := &SQLite{}
	for _, db := range dbs {
		for _, q := range sqliteSchema {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return nil, fmt.Errorf("retrieval: creating the index tables: %w", err)
			}
		}
		sh := &shard{db: db}
		if err := sh.rebuild(ctx); err != nil {
			return nil, err
		}
		if err := sh.openQueryTables(ctx); err != nil {
			return nil, err
		}
		if err := sh.rebuildFiles(ctx); err != nil {
			return nil, err
		}
		s.shards = append(s.shards, sh)
	}
	return s, nil
}

// rebuild creates the full-text index if missing and, if the shard's was
// built with terms of another version (termsVersion) or has a content
// table (before version 2), makes it again from the chunks' rows, in one
// transaction: about the full-text part of ingesting them again, once.
func (s *shard) rebuild(ctx context.Context) error {
	current := func(q querier) (bool, error) {
		if v, err := metaValue(ctx, q, "terms"); err != nil || v != termsVersion {
			return false, err
		}
		var ddl string
		err := q.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = 'retrieval_fts'`).Scan(&ddl)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return strings.Contains(ddl, "content = ''"), err
	}
	ok, err := current(s.db)
	if err == nil && ok {
		for _, q := range ftsSchema { // the settings, as this version has them
			if _, err = s.db.ExecContext(ctx, q); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("retrieval: reading the index's schema: %w", err)
	}
	if ok {
		return nil
	}
	return rebuildOnce(ctx, s.db, "the index", "terms", termsVersion, current, func(tx *sql.Tx) error {
		for _, q := range append([]string{`DROP TABLE IF EXISTS retrieval_vocab`, `DROP TABLE IF EXISTS retrieval_fts`}, ftsSchema...) {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, `SELECT DISTINCT repository FROM retrieval_chunks`)
		if err != nil {
			return err
		}
		var repos []string
		for rows.Next() {
			var r string
			if err := rows.Scan(&r); err != nil {
				rows.Close()
				return err
			}
			repos = append(repos, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range repos {
			if err := ftsInsert(ctx, tx, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// inPaths calls f for repository's paths, removeLookup at a time, with
// the condition that selects their rows (repository = ? AND path IN …)
// and its arguments.
func inPaths(repository string, paths []string, f func(cond string, args []any) error) error {
	for len(paths) > 0 {
		part := paths[:min(len(paths), removeLookup)]
		paths = paths[len(part):]
		args := make([]any, 0, 1+len(part))
		args = append(args, repository)
		for _, p := range part {
			args = append(args, p)
		}
		if err := f(`repository = ? AND path IN (?`+strings.Repeat(",?", len(part)-1)+`)`, args); err != nil {
			return err
		}
	}
	return nil
}

// querier is a database or a transaction, to read from.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// metaValue is retrieval_meta's value of name, 0 when it has none (no
// version is 0).
func metaValue(ctx context.Context, q querier, name string) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, `SELECT value FROM retrieval_meta WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// setMeta records retrieval_meta's value of name.
func setMeta(ctx context.Context, tx *sql.Tx, name string, v int) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO retrieval_meta (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, v)
	return err
}

// rebuildOnce makes a part of a shard (what, for errors) again by build
// in one transaction, unless current says it is current; asked again in
// the transaction, since another process may have made it meanwhile.
// The transaction records version as the part's (name) in
// retrieval_meta.
func rebuildOnce(ctx context.Context, db *sql.DB, what, name string, version int, current func(querier) (bool, error), build func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("retrieval: rebuilding %s: %w", what, err)
	}
	defer tx.Rollback()
	if ok, err := current(tx); err != nil || ok {
		return err
	}
	if err := build(tx); err != nil {
		return fmt.Errorf("retrieval: rebuilding %s: %w", what, err)
	}
	if err := setMeta(ctx, tx, name, version); err != nil {
		return fmt.Errorf("retrieval: rebuilding %s: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("retrieval: rebuilding %s: %w", what, err)
	}
	return nil
}

// ftsInsert indexes the repository's stored chunks by one statement,
// their terms computed from the rows (termsFunc), in rowid order (see
// replace). As blobs: the driver hands a function a text only up to its
// first NUL (a text may have one).
func ftsInsert(ctx context.Context, tx *sql.Tx, repository string) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO retrieval_fts (rowid, path, body, repo)
		SELECT id, `+termsFunc+`(CAST(path AS BLOB)), `+termsFunc+`(CAST(text AS BLOB)), ?
		FROM retrieval_chunks WHERE repository = ? ORDER BY id`, repoToken(repository), repository); err != nil {
		return fmt.Errorf("retrieval: indexing chunks: %w", err)
	}
	return nil
}

// shardOf is the index of the shard that holds path's chunks.
func (s *SQLite) shardOf(path string) int {
	h := fnv.New32a()
	h.Write([]byte(path))
	return int(h.Sum32() % uint32(len(s.shards)))
}

// Replace implements Backend: each shard's part in its own transaction,
// the shards at once.
func (s *SQLite) Replace(ctx context.Context, repository string, remove []string, chunks []Chunk) error {
	if len(s.shards) == 1 {
		return s.shards[0].replace(ctx, repository, remove, chunks)
	}
	removes := make([][]string, len(s.shards))
	parts := make([][]Chunk, len(s.shards))
	for _, p := range remove {
		i := s.shardOf(p)
		removes[i] = append(removes[i], p)
	}
	for _, c := range chunks {
		i := s.shardOf(c.Path)
		parts[i] = append(parts[i], c)
	}
	return s.each(func(i int, sh *shard) error {
		if len(removes[i]) == 0 && len(parts[i]) == 0 {
			return nil
		}
		return sh.replace(ctx, repository, removes[i], parts[i])
	})
}

// each runs f on every shard at once; their errors, joined.
func (s *SQLite) each(f func(i int, sh *shard) error) error {
	if len(s.shards) == 1 {
		return f(0, s.shards[0])
	}
	errs := make([]error, len(s.shards))
	var wg sync.WaitGroup
	for i, sh := range s.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, sh)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// replace is Replace in one shard, in one transaction.
func (s *shard) replace(ctx context.Context, repository string, remove []string, chunks []Chunk) error {
	s.writing.Lock()
	defer s.writing.Unlock()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	defer conn.Close()
	// A batch's pages stay in memory until the commit (SQLite's default
	// cache, 2 MB, would spill them to the WAL halfway, and read them
	// back); the connection gets its cache back afterwards.
	var cache int64
	if err := conn.QueryRowContext(ctx, `PRAGMA cache_size`).Scan(&cache); err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `PRAGMA cache_size = -65536`); err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA cache_size = `+strconv.FormatInt(cache, 10))
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	defer tx.Rollback()
	if err := replaceQueryFiles(ctx, tx, repository, remove, chunks); err != nil {
		return err
	}
	// The removed chunks (with their text, which a contentless index
	// needs to remove them), removeLookup paths a query.
	var old []indexed
	var oldFs []indexedFile
	err = inPaths(repository, remove, func(cond string, args []any) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, path, text FROM retrieval_chunks WHERE `+cond, args...)
		if err != nil {
			return fmt.Errorf("retrieval: %w", err)
		}
		for rows.Next() {
			var c indexed
			if err := rows.Scan(&c.id, &c.path, &c.text); err != nil {
				rows.Close()
				return fmt.Errorf("retrieval: %w", err)
			}
			old = append(old, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("retrieval: %w", err)
		}
		files, err := oldFiles(ctx, tx, cond, args...)
		if err != nil {
			return err
		}
		oldFs = append(oldFs, files...)
		return nil
	})
	if err != nil {
		return err
	}
	// In rowid order: FTS5 writes out its pending terms when a rowid is
	// lower than the one before.
	slices.SortFunc(old, func(a, b indexed) int { return cmp.Compare(a.id, b.id) })
	slices.SortFunc(oldFs, func(a, b indexedFile) int { return cmp.Compare(a.id, b.id) })
	ids := chunkIDs(old)
	// The chunks' rows first, then the index's: once FTS5 is written to
	// in a transaction, every later statement that opens a savepoint
	// (any of several rows) makes it write its pending terms out as a
	// new segment, many small segments that it merges again and again.
	if err := deleteChunks(ctx, tx, ids); err != nil {
		return err
	}
	if err := deleteFiles(ctx, tx, oldFs); err != nil {
		return err
	}
	// Rows go in insertRows at a time, with IDs assigned here (the
	// transaction holds the write lock): the driver parses a statement
	// at every execution, prepared or not, so fewer and longer ones cost
	// less.
	var first int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) + 1 FROM retrieval_chunks`).Scan(&first); err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	rows := make([]any, 0, 9*insertRows)
	for i := 0; i < len(chunks); i += insertRows {
		part := chunks[i:min(len(chunks), i+insertRows)]
		rows = rows[:0]
		for j := range part {
			c := &part[j]
			var vec []byte
			if c.Vector != nil {
				vec = encodeVector(c.Vector)
			}
			rows = append(rows, first+int64(i+j), repository, c.Path, c.Commit, c.StartLine, c.EndLine, c.Language, c.Text, vec)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO retrieval_chunks (id, repository, path, commit_id, start_line, end_line, language, text, vector) VALUES `+placeholders(len(part), 9), rows...); err != nil {
			return fmt.Errorf("retrieval: storing chunks: %w", err)
		}
	}
	files := batchFiles(chunks)
	firstFile, err := insertFiles(ctx, tx, repository, files)
	if err != nil {
		return err
	}
	if err := s.ftsDelete(ctx, tx, repository, old); err != nil {
		return err
	}
	if err := ftsDeleteFiles(ctx, tx, repository, oldFs); err != nil {
		return err
	}
	// Into FTS5 by one statement, in rowid order, the terms the batch's
	// reader computed (pendingFunc; an Index computes them beside the
	// writers, others here): a statement per chunk cost as much in the
	// driver (each parsed again) as FTS5 spent indexing, and a statement
	// of several rows makes FTS5 write out what is pending (it opens a
	// savepoint), so not several.
	pending.Lock()
	pending.next++
	key := pending.next
	pending.batches[key] = chunks
	pending.files[key] = files
	pending.Unlock()
	defer func() {
		pending.Lock()
		delete(pending.batches, key)
		delete(pending.files, key)
		pending.Unlock()
	}()
	// The files' rows first: the chunks' statement, the larger, writes
	// out what the files' left pending.
	if len(files) > 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO retrieval_files_fts (rowid, path, name, symbols, docs, repo)
			SELECT id, `+pendingFileFunc+`(?, id - ?, 0), `+pendingFileFunc+`(?, id - ?, 1), `+pendingFileFunc+`(?, id - ?, 2), `+pendingFileFunc+`(?, id - ?, 3), ?
			FROM retrieval_files WHERE id >= ? ORDER BY id`, key, firstFile, key, firstFile, key, firstFile, key, firstFile, repoToken(repository), firstFile); err != nil {
			return fmt.Errorf("retrieval: indexing files: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO retrieval_fts (rowid, path, body, repo)
		SELECT id, `+pendingFunc+`(?, id - ?, 0), `+pendingFunc+`(?, id - ?, 1), ?
		FROM retrieval_chunks WHERE id >= ? ORDER BY id`, key, first, key, first, repoToken(repository), first); err != nil {
		return fmt.Errorf("retrieval: indexing chunks: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	return nil
}

// removeLookup is how many paths one query looks up (a query per path
// cost a few percent of an ingestion).
const removeLookup = 256

// insertRows is how many rows one INSERT statement stores. Not more:
// the driver matches each parameter to its argument by a linear search,
// quadratic in a statement's parameters (9 a row).
const insertRows = 16

// placeholders is "(?,…),(?,…)…": rows groups of cols parameters.
func placeholders(rows, cols int) string {
	one := "(?" + strings.Repeat(",?", cols-1) + ")"
	return one + strings.Repeat(","+one, rows-1)
}

// deleteChunks removes the chunks' rows whose IDs are in ids.
func deleteChunks(ctx context.Context, tx *sql.Tx, ids []int64) error {
	for len(ids) > 0 {
		n := min(len(ids), 500)
		list := idList(ids[:n])
		ids = ids[n:]
		if _, err := tx.ExecContext(ctx, `DELETE FROM retrieval_chunks WHERE id IN (`+list+`)`); err != nil {
			return fmt.Errorf("retrieval: %w", err)
		}
	}
	return nil
}

// idList is integers for an IN (…) list: numbers only, formatted here.
func idList(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

// DeleteRepository implements Backend, shard by shard (one transaction
// each: a repository half deleted is deleted again by a retry).
func (s *SQLite) DeleteRepository(ctx context.Context, repository string) error {
	return s.each(func(_ int, sh *shard) error { return sh.deleteRepository(ctx, repository) })
}

func (s *shard) deleteRepository(ctx context.Context, repository string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	defer tx.Rollback()
	// A page of chunks at a time leaves the index, then all their rows
	// (the first statement of several rows makes FTS5 write out what is
	// pending: once, not once a page).
	var ids []int64
	for last := int64(0); ; {
		rows, err := tx.QueryContext(ctx, `SELECT id, path, text FROM retrieval_chunks WHERE repository = ? AND id > ? ORDER BY id LIMIT 512`, repository, last)
		if err != nil {
			return fmt.Errorf("retrieval: %w", err)
		}
		var page []indexed
		for rows.Next() {
			var c indexed
			if err := rows.Scan(&c.id, &c.path, &c.text); err != nil {
				rows.Close()
				return fmt.Errorf("retrieval: %w", err)
			}
			page = append(page, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("retrieval: %w", err)
		}
		if len(page) == 0 {
			break
		}
		last = page[len(page)-1].id
		if err := s.ftsDelete(ctx, tx, repository, page); err != nil {
			return err
		}
		ids = append(ids, chunkIDs(page)...)
	}
	if err := deleteChunks(ctx, tx, ids); err != nil {
		return err
	}
	if err := deleteQueryFiles(ctx, tx, repository); err != nil {
		return err
	}
	files, err := oldFiles(ctx, tx, `repository = ?`, repository)
	if err != nil {
		return err
	}
	if err := ftsDeleteFiles(ctx, tx, repository, files); err != nil {
		return err
	}
	if err := deleteFiles(ctx, tx, files); err != nil {
		return err
	}
	return tx.Commit()
}

// indexed is a chunk in the index, as ftsDelete needs it.
type indexed struct {
	id         int64
	path, text string
}

func chunkIDs(cs []indexed) []int64 {
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.id
	}
	return ids
}

// ftsDelete removes chunks from retrieval_fts. A contentless index
// holds no copy of what it indexed: FTS5's 'delete' command takes the
// very terms the chunk was indexed with (other terms would corrupt the
// index), recomputed here from its path, text and repository as Replace
// computed them.
func (s *shard) ftsDelete(ctx context.Context, tx *sql.Tx, repository string, chunks []indexed) error {
	if len(chunks) == 0 {
		return nil
	}
	del, err := tx.PrepareContext(ctx, `INSERT INTO retrieval_fts (retrieval_fts, rowid, path, body, repo) VALUES ('delete', ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	defer del.Close()
	rt := repoToken(repository)
	for _, c := range chunks {
		if _, err := del.ExecContext(ctx, c.id, terms(c.path), terms(c.text), rt); err != nil {
			return fmt.Errorf("retrieval: removing a chunk from the index: %w", err)
		}
	}
	return nil
}

// ftsQuery is the FTS5 MATCH expression of a query: each word a quoted
// phrase of its parts, or (for an identifier of several parts) its
// joined form, any of them matching; restricted to the repositories'
// tokens. Parts are letters and digits only, so nothing the user typed
// is FTS5 syntax.
func ftsQuery(ws []queryWord, repos []string) string {
	parts := make([]string, 0, 2*len(ws))
	for _, w := range ws {
		parts = append(parts, `"`+strings.Join(w, " ")+`"`)
		if len(w) > 1 {
			parts = append(parts, `"`+strings.Join(w, "")+`"`)
		}
	}
	q := strings.Join(parts, " OR ")
	if len(repos) == 0 {
		return q
	}
	toks := make([]string, len(repos))
	for i, r := range repos {
		toks[i] = `"` + repoToken(r) + `"`
	}
	return "(" + q + ") AND repo : (" + strings.Join(toks, " OR ") + ")"
}

// commonShare: a word in more than this share of the chunks is left out
// of a query that has rarer words. It would barely change the ranking,
// and scoring every chunk it matches is what makes a search slow.
const commonShare = 0.1

// pruneFrom is the index size (chunks) from which common words are
// pruned: a small index is fast anyway, and there every word is common.
const pruneFrom = 5000

// pruneCommon drops the query's very common words (by the document
// counts of the whole index, every shard's summed: all shards search the
// same words, so that their BM25 scores compare) unless that leaves none.
func (s *SQLite) pruneCommon(ctx context.Context, ws []queryWord) ([]queryWord, []float64, error) {
	if len(s.shards) == 1 && len(ws) < 2 {
		return ws, nil, nil
	}
	var parts []any
	for _, w := range ws {
		for _, p := range w {
			if !slices.Contains(parts, any(p)) {
				parts = append(parts, p)
			}
		}
	}
	ns := make([]int64, len(s.shards))
	counts := make([]map[string]int64, len(s.shards))
	if err := s.each(func(i int, sh *shard) error {
		var err error
		ns[i], counts[i], err = sh.docCounts(ctx, parts)
		return err
	}); err != nil {
		return nil, nil, err
	}
	var n int64
	docs := map[string]int64{}
	for i := range s.shards {
		n += ns[i]
		for term, df := range counts[i] {
			docs[term] += df
		}
	}
	kept := ws
	if n >= pruneFrom && len(ws) >= 2 {
		kept = prune(ws, docs, n)
	}
	return kept, idfScales(kept, ns, counts, n, docs), nil
}

// prune is ws without its words in over commonShare of the n chunks,
// unless that leaves none.
func prune(ws []queryWord, docs map[string]int64, n int64) []queryWord {
	limit := int64(float64(n) * commonShare)
	var kept []queryWord
	found := false
	for _, w := range ws {
		// A phrase is at most as common as its rarest part.
		rarest := int64(-1)
		for _, p := range w {
			if df := docs[p]; rarest < 0 || df < rarest {
				rarest = df
			}
		}
		if rarest <= limit {
			kept = append(kept, w)
			found = found || rarest > 0
		}
	}
	if !found { // only common words, or only words nowhere
		return ws
	}
	return kept
}

// idfScales are the factors that bring each shard's BM25 scores near
// what one index would give: a word's IDF is the shard's (its count of
// chunks with the word, of all its chunks), and the sum of the query's
// IDFs over the whole index, divided by that in the shard, corrects for
// most of the difference. (A phrase counts as its rarest part.)
func idfScales(ws []queryWord, ns []int64, counts []map[string]int64, n int64, docs map[string]int64) []float64 {
	if len(ns) == 1 {
		return nil
	}
	idf := func(n, df int64) float64 {
		return max(1e-6, math.Log((float64(n)-float64(df)+0.5)/(float64(df)+0.5)))
	}
	rarest := func(w queryWord, docs map[string]int64) int64 {
		r := int64(-1)
		for _, p := range w {
			if df := docs[p]; r < 0 || df < r {
				r = df
			}
		}
		return r
	}
	var global float64
	for _, w := range ws {
		global += idf(n, rarest(w, docs))
	}
	scales := make([]float64, len(ns))
	for i := range ns {
		var local float64
		for _, w := range ws {
			local += idf(ns[i], rarest(w, counts[i]))
		}
		scales[i] = 1
		if local > 0 {
			scales[i] = global / local
		}
	}
	return scales
}

// docCounts is the shard's size (chunks) and the document counts of the
// terms parts, in one query.
func (s *shard) docCounts(ctx context.Context, parts []any) (int64, map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT '', (SELECT coalesce(max(id), 0) FROM retrieval_chunks)
		UNION ALL SELECT term, doc FROM retrieval_vocab WHERE term IN (?`+strings.Repeat(",?", len(parts)-1)+`)`, parts...)
	if err != nil {
		return 0, nil, fmt.Errorf("retrieval: %w", err)
	}
	defer rows.Close()
	var n int64
	docs := map[string]int64{}
	for rows.Next() {
		var term string
		var df int64
		if err := rows.Scan(&term, &df); err != nil {
			return 0, nil, fmt.Errorf("retrieval: %w", err)
		}
		if term == "" {
			n = df
		} else {
			docs[term] = df
		}
	}
	return n, docs, rows.Err()
}

// present are those of repos that have chunks in the shard (perhaps
// some that had: the vocabulary may count what a merge has yet to
// drop). A filter of many repositories, most of them elsewhere or not
// indexed, is then short: every term of FTS5's OR costs its own cursor
// (in BenchmarkSearchAccess a user reading 100 repositories, 10 of them
// indexed, searched 2.8× as long as with no filter; with only the 10,
// 1.4×). A shard holding none of them ranks nothing.
func (s *shard) present(ctx context.Context, repos []string) ([]string, error) {
	byToken := make(map[string]string, len(repos))
	args := make([]any, 0, len(repos))
	for _, r := range repos {
		t := repoToken(r)
		if _, ok := byToken[t]; !ok {
			byToken[t] = r
			args = append(args, t)
		}
	}
	rows, err := s.db.QueryContext(ctx, `SELECT term FROM retrieval_vocab WHERE term IN (?`+strings.Repeat(",?", len(args)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("retrieval: %w", err)
		}
		out = append(out, byToken[t])
	}
	return out, rows.Err()
}

// Search implements Backend, ranking files (rankFiles) and answering
// each file's best chunk, best file first: every shard ranks its files
// for the same words (pruneCommon over the whole index), the rankings
// are merged by score, then fused with the vectors' (fuseFiles). BM25 in
// a shard uses that shard's document counts, so a shard where the
// query's words are rarer scores higher: each shard's scores are scaled
// by idfScales (without it, lexical recall@5 over
// testdata/relevance.json was 0.74 with two shards, 0.77 with it, 0.79
// with one database, when chunks were ranked alone). Cosine similarity
// does not depend on the shard.
func (s *SQLite) Search(ctx context.Context, q Query) ([]Result, error) {
	if err := checkQuery(&q); err != nil {
		return nil, err
	}
	// The query language filters a deeper ranking (Query.depth).
	depth := max(q.Limit, q.depth)
	ws, scales, err := s.pruneCommon(ctx, parseQuery(q.Text))
	if err != nil {
		return nil, err
	}
	lexs := make([][]fileHit, len(s.shards))
	vecs := make([][]fileHit, len(s.shards))
	err = s.each(func(i int, sh *shard) error {
		scale := 1.0
		if scales != nil {
			scale = scales[i]
		}
		// One repository (a scoped search) is filtered by as it is: its
		// lookup would cost what it saves.
		repos := q.Repositories
		if len(repos) > 1 {
			var err error
			if repos, err = sh.present(ctx, repos); err != nil {
				return err
			}
		}
		var err error
		if len(repos) > 0 || len(q.Repositories) == 0 {
			if lexs[i], err = sh.rankFiles(ctx, ws, repos, scale, depth); err != nil {
				return err
			}
		}
		if q.Vector != nil {
			if vecs[i], err = sh.nearestFiles(ctx, q); err != nil {
				return err
			}
		}
		for j := range lexs[i] {
			lexs[i][j].shard = i
		}
		for j := range vecs[i] {
			vecs[i][j].shard = i
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ranked := mergeFiles(lexs)
	if q.Vector != nil {
		ranked = fuseFiles(ranked, mergeFiles(vecs))
	}
	ranked = ranked[:min(len(ranked), depth)]
	// Each shard finds the best chunk of its files that have none among
	// the chunks ranked, and loads its chunks; the ranking keeps its
	// order.
	mine := make([][]Result, len(s.shards))
	for _, f := range ranked {
		mine[f.shard] = append(mine[f.shard], Result{Chunk: Chunk{Repository: f.repository, Path: f.path}, Score: f.score, id: f.chunk, shard: f.shard})
	}
	if err := s.each(func(i int, sh *shard) error {
		if err := sh.bestChunks(ctx, ws, mine[i]); err != nil {
			return err
		}
		rs := mine[i][:0]
		for _, r := range mine[i] {
			if r.id != 0 { // 0: the file left the index meanwhile
				r.Chunk = Chunk{}
				rs = append(rs, r)
			}
		}
		var err error
		mine[i], err = sh.load(ctx, rs)
		return err
	}); err != nil {
		return nil, err
	}
	loaded := map[fileKey]Result{}
	for _, rs := range mine {
		for _, r := range rs {
			loaded[fileKey{r.Repository, r.Path}] = r
		}
	}
	out := make([]Result, 0, len(ranked))
	for _, f := range ranked {
		if l, ok := loaded[f.fileKey]; ok {
			out = append(out, l)
		}
	}
	return out, nil
}

// File ranking (rankFiles): a file's score is the BM25F of its own
// fields (path, file name, the names it defines, its doc comments:
// fileWeights) times fieldsWeight, plus the BM25 score of its best chunk
// and secondWeight times its second best's (the body, chunk by chunk:
// a file's body in the index only once). Measured on the evaluation sets
// (BenchmarkEval, testdata/eval): integrations/README.md.
var (
	fileWeights  = [...]float64{1, 3, 2, 1, 0} // path, name, symbols, docs, repo
	fieldsWeight = 1.0
	secondWeight = 0.3
)

const (
	// chunkDepth chunks and filesDepth files are ranked by each shard
	// (FTS5 scores every row that matches either way: the depth costs
	// only the rows read back).
	chunkDepth = 200
	filesDepth = 100
)

// fileKey names a file of the index.
type fileKey struct{ repository, path string }

// fileHit is a file ranked, with its best chunk (0 when none was among
// those ranked).
type fileHit struct {
	fileKey
	shard int
	chunk int64
	score float64
}

// rankFiles ranks the shard's files for ws: the chunks by BM25
// (lexical), the files' fields by BM25F; scores times scale (idfScales).
func (s *shard) rankFiles(ctx context.Context, ws []queryWord, repos []string, scale float64, depth int) ([]fileHit, error) {
	chunks, err := s.lexical(ctx, ws, repos, max(chunkDepth, depth))
	if err != nil {
		return nil, err
	}
	weights := make([]string, len(fileWeights))
	for i, w := range fileWeights {
		weights[i] = strconv.FormatFloat(w, 'f', -1, 64)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT f.id, f.repository, f.path, r.rank FROM
		(SELECT rowid, bm25(retrieval_files_fts, `+strings.Join(weights, ", ")+`) AS rank
			FROM retrieval_files_fts WHERE retrieval_files_fts MATCH ? ORDER BY rank LIMIT ?) r
		JOIN retrieval_files f ON f.id = r.rowid`, ftsQuery(ws, repos), max(filesDepth, depth))
	if err != nil {
		return nil, fmt.Errorf("retrieval: searching: %w", err)
	}
	type acc struct {
		fields, best, second float64
		chunk                int64
	}
	files := map[fileKey]*acc{}
	get := func(k fileKey) *acc {
		a := files[k]
		if a == nil {
			a = &acc{}
			files[k] = a
		}
		return a
	}
	for rows.Next() {
		var id int64
		var k fileKey
		var rank float64
		if err := rows.Scan(&id, &k.repository, &k.path, &rank); err != nil {
			rows.Close()
			return nil, fmt.Errorf("retrieval: %w", err)
		}
		get(k).fields = -rank // bm25 is lower for better matches
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	keys, err := s.chunkFiles(ctx, chunks)
	if err != nil {
		return nil, err
	}
	for _, c := range chunks { // best first
		k, ok := keys[c.id]
		if !ok {
			continue
		}
		a := get(k)
		switch {
		case a.chunk == 0:
			a.best, a.chunk = c.Score, c.id
		case a.second == 0:
			a.second = c.Score
		}
	}
	out := make([]fileHit, 0, len(files))
	for k, a := range files {
		out = append(out, fileHit{fileKey: k, chunk: a.chunk, score: scale * (fieldsWeight*a.fields + a.best + secondWeight*a.second)})
	}
	return out, nil
}

// chunkFiles are the files of the ranked chunks, by ID.
func (s *shard) chunkFiles(ctx context.Context, rs []Result) (map[int64]fileKey, error) {
	keys := make(map[int64]fileKey, len(rs))
	if len(rs) == 0 {
		return keys, nil
	}
	ids := make([]int64, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, repository, path FROM retrieval_chunks WHERE id IN (`+idList(ids)+`)`)
	if err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var k fileKey
		if err := rows.Scan(&id, &k.repository, &k.path); err != nil {
			return nil, fmt.Errorf("retrieval: %w", err)
		}
		keys[id] = k
	}
	return keys, rows.Err()
}

// nearestFiles ranks the shard's files by their chunk most similar to
// q.Vector (nearest).
func (s *shard) nearestFiles(ctx context.Context, q Query) ([]fileHit, error) {
	chunks, err := s.nearest(ctx, q, chunkDepth)
	if err != nil {
		return nil, err
	}
	keys, err := s.chunkFiles(ctx, chunks)
	if err != nil {
		return nil, err
	}
	var out []fileHit
	seen := map[fileKey]bool{}
	for _, c := range chunks {
		k, ok := keys[c.id]
		if !ok || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, fileHit{fileKey: k, chunk: c.id, score: c.Score})
	}
	return out, nil
}

// mergeFiles is the shards' file rankings in one, best first (a file is
// in one shard).
func mergeFiles(lists [][]fileHit) []fileHit {
	var all []fileHit
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortFunc(all, func(a, b fileHit) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.repository, b.repository); c != 0 {
			return c
		}
		return cmp.Compare(a.path, b.path)
	})
	return all
}

// fuseFiles fuses the lexical and the vector rankings of files
// (fuseRanks, vectorWeight); a file keeps the lexical ranking's best
// chunk when it has one there.
func fuseFiles(lex, vec []fileHit) []fileHit {
	if len(vec) == 0 {
		return lex
	}
	keys := func(hs []fileHit) []string {
		ks := make([]string, len(hs))
		for i, h := range hs {
			ks[i] = h.repository + "\x00" + h.path
		}
		return ks
	}
	hits := map[string]fileHit{}
	for i, k := range keys(vec) {
		hits[k] = vec[i]
	}
	for i, k := range keys(lex) {
		hits[k] = lex[i]
	}
	fused := fuseRanks(keys(lex), keys(vec))
	out := make([]fileHit, len(fused))
	for i, f := range fused {
		h := hits[f.key]
		h.score = f.score
		out[i] = h
	}
	return out
}

// bestChunks sets the chunk of each result that has none: the file's
// chunk that ranks best for ws, or its first.
func (s *shard) bestChunks(ctx context.Context, ws []queryWord, rs []Result) error {
	for i := range rs {
		if rs[i].id != 0 {
			continue
		}
		rows, err := s.db.QueryContext(ctx, `SELECT id FROM retrieval_chunks WHERE repository = ? AND path = ? ORDER BY start_line, id`, rs[i].Repository, rs[i].Path)
		if err != nil {
			return fmt.Errorf("retrieval: %w", err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("retrieval: %w", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("retrieval: %w", err)
		}
		if len(ids) == 0 {
			continue
		}
		rs[i].id = ids[0]
		err = s.db.QueryRowContext(ctx, `SELECT rowid FROM retrieval_fts WHERE retrieval_fts MATCH ? AND rowid IN (`+idList(ids)+`) ORDER BY bm25(retrieval_fts, `+strconv.FormatFloat(pathWeight, 'f', 1, 64)+`, 1.0, 0.0) LIMIT 1`, ftsQuery(ws, nil)).Scan(&rs[i].id)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("retrieval: %w", err)
		}
	}
	return nil
}

// lexical ranks chunks by BM25 (path words weigh pathWeight, the
// repository token nothing).
func (s *shard) lexical(ctx context.Context, ws []queryWord, repos []string, depth int) ([]Result, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT rowid, bm25(retrieval_fts, `+strconv.FormatFloat(pathWeight, 'f', 1, 64)+`, 1.0, 0.0) AS rank
		FROM retrieval_fts WHERE retrieval_fts MATCH ? ORDER BY rank LIMIT ?`, ftsQuery(ws, repos), depth)
	if err != nil {
		return nil, fmt.Errorf("retrieval: searching: %w", err)
	}
	defer rows.Close()
	var out []Result
	for rows.Next() {
		var r Result
		if err := rows.Scan(&r.id, &r.Score); err != nil {
			return nil, fmt.Errorf("retrieval: %w", err)
		}
		r.Score = -r.Score // bm25 is lower for better matches
		out = append(out, r)
	}
	return out, rows.Err()
}

// repoFilter is the SQL condition and arguments restricting to repos.
func repoFilter(repos []string) (string, []any) {
	if len(repos) == 0 {
		return "", nil
	}
	args := make([]any, len(repos))
	for i, r := range repos {
		args[i] = r
	}
	return ` AND c.repository IN (?` + strings.Repeat(",?", len(repos)-1) + `)`, args
}

// nearest ranks chunks by cosine similarity to q.Vector, scanning them.
func (s *shard) nearest(ctx context.Context, q Query, depth int) ([]Result, error) {
	filter, args := repoFilter(q.Repositories)
	rows, err := s.db.QueryContext(ctx, `SELECT c.id, c.vector FROM retrieval_chunks c WHERE c.vector IS NOT NULL`+filter, args...)
	if err != nil {
		return nil, fmt.Errorf("retrieval: searching: %w", err)
	}
	defer rows.Close()
	qn := norm(q.Vector)
	h := &topK{}
	var raw []byte
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, fmt.Errorf("retrieval: %w", err)
		}
		sim := cosineRaw(q.Vector, qn, raw)
		if h.Len() < depth {
			heap.Push(h, Result{id: id, Score: sim})
		} else if sim > (*h)[0].Score {
			(*h)[0] = Result{id: id, Score: sim}
			heap.Fix(h, 0)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	out := make([]Result, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(Result)
	}
	return out, nil
}

// load fills in the chunks of ranked results, keeping their order.
func (s *shard) load(ctx context.Context, ranked []Result) ([]Result, error) {
	if len(ranked) == 0 {
		return []Result{}, nil
	}
	ids := make([]int64, len(ranked))
	pos := map[int64]int{}
	for i, r := range ranked {
		ids[i] = r.id
		pos[r.id] = i
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, repository, path, commit_id, start_line, end_line, language, text FROM retrieval_chunks WHERE id IN (`+idList(ids)+`)`)
	if err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var c Chunk
		if err := rows.Scan(&id, &c.Repository, &c.Path, &c.Commit, &c.StartLine, &c.EndLine, &c.Language, &c.Text); err != nil {
			return nil, fmt.Errorf("retrieval: %w", err)
		}
		ranked[pos[id]].Chunk = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	// A chunk removed between the two queries leaves a gap: drop it.
	out := ranked[:0]
	for _, r := range ranked {
		if r.Path != "" {
			out = append(out, r)
		}
	}
	return out, nil
}

func encodeVector(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// cosineRaw is the cosine similarity of q (of norm qn) and an encoded
// vector; 0 for one of another length.
func cosineRaw(q []float32, qn float64, raw []byte) float64 {
	if len(raw) != 4*len(q) || qn == 0 {
		return 0
	}
	var dot, n float64
	for i, x := range q {
		y := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		dot += float64(x) * y
		n += y * y
	}
	if n == 0 {
		return 0
	}
	return dot / (qn * math.Sqrt(n))
}

// topK is a min-heap of results by score.
type topK []Result

func (h topK) Len() int           { return len(h) }
func (h topK) Less(i, j int) bool { return h[i].Score < h[j].Score }
func (h topK) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *topK) Push(x any)        { *h = append(*h, x.(Result)) }
func (h *topK) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// indexedFile is a file's row in the index, as ftsDeleteFiles needs it.
type indexedFile struct {
	id   int64
	path string
	f    fileFields
}

// oldFiles are the rows of retrieval_files matching the condition.
func oldFiles(ctx context.Context, tx *sql.Tx, cond string, args ...any) ([]indexedFile, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, path, symbols, docs FROM retrieval_files WHERE `+cond, args...)
	if err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	defer rows.Close()
	var out []indexedFile
	for rows.Next() {
		var f indexedFile
		if err := rows.Scan(&f.id, &f.path, &f.f.symbols, &f.f.docs); err != nil {
			return nil, fmt.Errorf("retrieval: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	return out, nil
}

// deleteFiles removes the files' rows.
func deleteFiles(ctx context.Context, tx *sql.Tx, files []indexedFile) error {
	ids := make([]int64, len(files))
	for i, f := range files {
		ids[i] = f.id
	}
	for len(ids) > 0 {
		n := min(len(ids), 500)
		list := idList(ids[:n])
		ids = ids[n:]
		if _, err := tx.ExecContext(ctx, `DELETE FROM retrieval_files WHERE id IN (`+list+`)`); err != nil {
			return fmt.Errorf("retrieval: %w", err)
		}
	}
	return nil
}

// ftsDeleteFiles removes files from retrieval_files_fts by the terms
// they were indexed with (see ftsDelete).
func ftsDeleteFiles(ctx context.Context, tx *sql.Tx, repository string, files []indexedFile) error {
	if len(files) == 0 {
		return nil
	}
	del, err := tx.PrepareContext(ctx, `INSERT INTO retrieval_files_fts (retrieval_files_fts, rowid, path, name, symbols, docs, repo) VALUES ('delete', ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("retrieval: %w", err)
	}
	defer del.Close()
	rt := repoToken(repository)
	for i := range files {
		f := &files[i]
		if _, err := del.ExecContext(ctx, f.id, fileTerms(f.path, &f.f, 0), fileTerms(f.path, &f.f, 1), fileTerms(f.path, &f.f, 2), fileTerms(f.path, &f.f, 3), rt); err != nil {
			return fmt.Errorf("retrieval: removing a file from the index: %w", err)
		}
	}
	return nil
}

// batchFiles are the files of a batch's chunks, in the order of their
// first chunks: each with the fields its first chunk carries, or (a
// caller other than Index) computed from its chunks' text.
func batchFiles(chunks []Chunk) []fileRow {
	var files []fileRow
	at := map[string]int{}
	var parts map[string][]Chunk // of files without fields
	for _, c := range chunks {
		if i, ok := at[c.Path]; ok {
			if files[i].f == nil {
				parts[c.Path] = append(parts[c.Path], c)
			}
			continue
		}
		at[c.Path] = len(files)
		files = append(files, fileRow{path: c.Path, f: c.file})
		if c.file == nil {
			if parts == nil {
				parts = map[string][]Chunk{}
			}
			parts[c.Path] = append(parts[c.Path], c)
		}
	}
	for i := range files {
		if files[i].f == nil {
			files[i].f = newFileFields(extractSymbols(files[i].path, []byte(fileText(parts[files[i].path]))))
		}
	}
	return files
}

// fileText puts a file's text back together from its chunks: in order
// of their lines, windows overlapping, a line longer than chunkBytes in
// pieces (chunks of that one line, the last with its newline).
func fileText(cs []Chunk) string {
	cs = slices.Clone(cs)
	slices.SortStableFunc(cs, func(a, b Chunk) int { return cmp.Compare(a.StartLine, b.StartLine) })
	var b strings.Builder
	last, open := 0, false // the last line written, and whether it has no newline yet
	for _, c := range cs {
		if open && c.StartLine == last && c.EndLine == last {
			b.WriteString(c.Text)
			open = !strings.HasSuffix(c.Text, "\n")
			continue
		}
		line := c.StartLine
		for l := range strings.SplitAfterSeq(c.Text, "\n") {
			if l == "" {
				continue
			}
			if line > last {
				b.WriteString(l)
				last = line
				open = !strings.HasSuffix(l, "\n")
			}
			line++
		}
	}
	return b.String()
}

// insertFiles stores the files' rows, with IDs from the first it
// returns on, in order.
func insertFiles(ctx context.Context, tx *sql.Tx, repository string, files []fileRow) (int64, error) {
	var first int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) + 1 FROM retrieval_files`).Scan(&first); err != nil {
		return 0, fmt.Errorf("retrieval: %w", err)
	}
	rows := make([]any, 0, 5*insertRows)
	for i := 0; i < len(files); i += insertRows {
		part := files[i:min(len(files), i+insertRows)]
		rows = rows[:0]
		for j, f := range part {
			rows = append(rows, first+int64(i+j), repository, f.path, f.f.symbols, f.f.docs)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO retrieval_files (id, repository, path, symbols, docs) VALUES `+placeholders(len(part), 5), rows...); err != nil {
			return 0, fmt.Errorf("retrieval: storing files: %w", err)
		}
	}
	return first, nil
}

// rebuildFiles creates the files' index if missing and, unless the
// shard's is current (filesBuilt), makes every file's row again from
// its stored chunks (fileText), in one transaction: an index built
// before files were ranked, or with other terms, is ranked by its
// files' fields from the time it is opened.
func (s *shard) rebuildFiles(ctx context.Context) error {
	current := func(q querier) (bool, error) {
		v, err := metaValue(ctx, q, "files")
		return v == filesBuilt, err
	}
	ok, err := current(s.db)
	if err != nil {
		return fmt.Errorf("retrieval: reading the index's schema: %w", err)
	}
	if ok {
		return nil
	}
	return rebuildOnce(ctx, s.db, "the files' index", "files", filesBuilt, current, func(tx *sql.Tx) error {
		for _, q := range append([]string{`DROP TABLE IF EXISTS retrieval_files_vocab`, `DROP TABLE IF EXISTS retrieval_files_fts`, `DELETE FROM retrieval_files`}, filesSchema...) {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		rows, err := tx.QueryContext(ctx, `SELECT DISTINCT repository, path FROM retrieval_chunks ORDER BY repository, path`)
		if err != nil {
			return err
		}
		var keys []fileKey
		for rows.Next() {
			var k fileKey
			if err := rows.Scan(&k.repository, &k.path); err != nil {
				rows.Close()
				return err
			}
			keys = append(keys, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, k := range keys {
			rows, err := tx.QueryContext(ctx, `SELECT start_line, end_line, text FROM retrieval_chunks WHERE repository = ? AND path = ? ORDER BY start_line, id`, k.repository, k.path)
			if err != nil {
				return err
			}
			var cs []Chunk
			for rows.Next() {
				c := Chunk{Path: k.path}
				if err := rows.Scan(&c.StartLine, &c.EndLine, &c.Text); err != nil {
					rows.Close()
					return err
				}
				cs = append(cs, c)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			files := batchFiles(cs)
			first, err := insertFiles(ctx, tx, k.repository, files)
			if err != nil {
				return err
			}
			f := files[0]
			if _, err := tx.ExecContext(ctx, `INSERT INTO retrieval_files_fts (rowid, path, name, symbols, docs, repo) VALUES (?, ?, ?, ?, ?, ?)`,
				first, fileTerms(f.path, f.f, 0), fileTerms(f.path, f.f, 1), fileTerms(f.path, f.f, 2), fileTerms(f.path, f.f, 3), repoToken(k.repository)); err != nil {
				return err
			}
		}
		return nil
	})
}
