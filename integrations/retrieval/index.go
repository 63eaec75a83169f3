package retrieval

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Backend stores chunks and searches them. Implementations: the embedded
// one in the instance's SQLite database (NewSQLite) and Weaviate
// (NewWeaviate). Every method must be safe for concurrent use.
type Backend interface {
	// Replace removes every chunk of the repository's paths in remove,
	// then stores chunks (which belong to that repository). A path may be
	// in remove and have chunks: the file changed.
	Replace(ctx context.Context, repository string, remove []string, chunks []Chunk) error
	// Search returns at most q.Limit chunks, best first, with a score
	// that orders them (higher is better).
	Search(ctx context.Context, q Query) ([]Result, error)
	// DeleteRepository removes every chunk of the repository.
	DeleteRepository(ctx context.Context, repository string) error
}

// Query is one search.
type Query struct {
	// Text is what the person or the model typed. It is never handed to
	// a query language: backends use only its words (parseQuery).
	Text string
	// Vector is Text's embedding; nil searches by words only, otherwise
	// the backend fuses both rankings.
	Vector []float32
	// Repositories restricts the search; empty means every repository.
	Repositories []string
	// Limit is the number of results wanted (default 10, at most
	// MaxLimit).
	Limit int

	// depth, when over Limit, is how many results the embedded backend
	// returns: the query language filters them (querysearch.go).
	depth int
}

// Defaults and bounds of searches.
const (
	DefaultLimit = 10
	MaxLimit     = 100
	// MaxQueryBytes caps a query's text.
	MaxQueryBytes = 1024
	// DefaultMaxFileBytes is retrieval.max_file_bytes' default.
	DefaultMaxFileBytes = 1 << 20
	// DefaultMaxFiles is retrieval.max_files' default.
	DefaultMaxFiles = 200_000
	// DefaultMaxBytes is retrieval.max_repository_bytes' default.
	DefaultMaxBytes = 4 << 30
)

// ErrBadQuery is wrapped by errors about a query that cannot be searched
// (empty, no words, too long): the caller's mistake.
var ErrBadQuery = errors.New("retrieval: bad query")

// Result is one chunk found, with its score.
type Result struct {
	Chunk
	Score float64

	id    int64 // the backend's key, while ranking
	shard int   // and the SQLite shard it is in
	line  int   // the line a phrase, regular expression or sym: matched (0: none)
}

// Embedder turns texts into vectors, one per text in order
// (*llm.Client's Embed over the endpoint's /v1/embeddings).
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Options configure an Index.
type Options struct {
	// Backend stores the chunks. Required.
	Backend Backend
	// Embedder, when set, embeds every chunk at ingestion and every query
	// (retrieval.embeddings.model): searches are hybrid.
	Embedder Embedder
	// MaxFileBytes skips larger files (retrieval.max_file_bytes, default
	// 1 MiB); their content is never read into memory.
	MaxFileBytes int64
	// MaxFiles caps the regular files of the commit an ingestion
	// indexes, changed or not (retrieval.max_files, default
	// DefaultMaxFiles): a commit with more fails with ErrTooManyEntries
	// before anything is read or written.
	MaxFiles int
	// MaxBytes caps the bytes of the files one ingestion reads
	// (retrieval.max_repository_bytes, default DefaultMaxBytes), counted
	// from git's headers before anything is read or written: many paths
	// may name one large blob.
	MaxBytes int64
	// Log, when set, receives one line per sync (counts of indexed and
	// skipped files).
	Log func(msg string, keyvals ...any)
}

// Index ingests repositories' commits into a Backend and searches them.
type Index struct {
	o Options
}

// New returns an Index over o.Backend.
func New(o Options) (*Index, error) {
	if o.Backend == nil {
		return nil, errors.New("retrieval: Options.Backend is required")
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return &Index{o: o}, nil
}

// Stats count what one Ingest did.
type Stats struct {
	Files   int // paths changed between the two commits
	Indexed int // files (re-)indexed
	Removed int // files that left the index
	Skipped map[string]int
	Chunks  int
}

// A batch written to the backend at a time is ingestBatch files, or
// fewer when their chunks' text and terms reach ingestBatchBytes (ingestWriters
// batches being written and the next being read are in memory). Larger
// batches were not faster: FTS5's in-memory hash of a batch's terms
// outgrows the CPU caches. The first batch is ingestFirstBatch files,
// each next one twice the one before up to ingestBatch: the writers
// start sooner (they waited for the first 1024 files to be read).
const (
	ingestBatch      = 1024
	ingestFirstBatch = 128
	ingestBatchBytes = 32 << 20
)

// ingestWriters is how many batches are written at once: with 2, the
// reader waited to hand over a batch while both were in the writers
// (BenchmarkIngest, 4 interleaved pairs: 3 was 5-10 % faster each time).
const ingestWriters = 3

// embedBatch is how many chunks one embeddings request carries.
const embedBatch = 64

// embedText caps the text of a chunk sent to the embedding model.
const embedText = 8 << 10

// Ingest indexes what changed in the bare repository gitDir between the
// commits from ("" = nothing was indexed yet) and to: added and modified
// files are (re-)chunked, deleted and renamed-away files leave the
// index, unchanged files are not read. progress, when set, is called
// with the files done out of the total, from 0 to total. Commits must be
// full object IDs (ErrBadCommit).
//
// Git runs host-side only to read its own object store (ls-tree,
// cat-file, fixed argv, scrubbed environment); the content is
// parsed only by this package's chunker, bounded in memory per file. A
// commit past Options.MaxFiles or MaxBytes, or past the listing's hard
// caps, fails with ErrTooManyEntries and leaves the index as it was.
func (ix *Index) Ingest(ctx context.Context, repository, gitDir, from, to string, progress func(done, total int64)) error {
	_, err := ix.IngestStats(ctx, repository, gitDir, from, to, progress)
	return err
}

// IngestStats is Ingest, and says what it did.
func (ix *Index) IngestStats(ctx context.Context, repository, gitDir, from, to string, progress func(done, total int64)) (Stats, error) {
	st := Stats{Skipped: map[string]int{}}
	if repository == "" {
		return st, errors.New("retrieval: no repository")
	}
	if progress == nil {
		progress = func(int64, int64) {}
	}
	list, err := changes(ctx, gitDir, from, to, capsFor(ix.o))
	if err != nil {
		return st, err
	}
	st.Files = len(list)
	total := int64(len(list))
	progress(0, total)

	// Sizes first (cat-file's headers only): a blob over the limit is
	// never inflated.
	var ids []string
	for _, c := range list {
		if c.blob != "" && !vendored(c.path) {
			ids = append(ids, c.blob)
		}
	}
	sizes, err := blobSizes(ctx, gitDir, ids)
	if err != nil {
		return st, err
	}
	var (
		read      []string
		readBytes int64
	)
	for _, c := range list {
		if n := sizes[c.blob]; c.blob != "" && !vendored(c.path) && n <= ix.o.MaxFileBytes {
			read = append(read, c.blob)
			readBytes += n
		}
	}
	if readBytes > ix.o.MaxBytes {
		return st, fmt.Errorf("%w: the commit's files to index are %d bytes together, more than %d (retrieval.max_repository_bytes)", ErrTooManyEntries, readBytes, ix.o.MaxBytes)
	}
	br, err := newBlobReader(ctx, gitDir, false)
	if err != nil {
		return st, err
	}
	fed := br.feed(read)
	defer func() {
		if br != nil {
			br.cmd.Process.Kill()
			br.close()
		}
	}()

	// Batches are written (and embedded) by ingestWriters at once while
	// the next is read and chunked: a writer owns a batch once it is
	// sent. Batches hold distinct paths, so their order does not matter;
	// with more than one in flight, a shard of the embedded index that is
	// done with its part of a batch starts on the next one instead of
	// waiting for the other shard.
	type batch struct {
		remove []string
		chunks []Chunk
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	batches := make(chan batch)
	written := make(chan error, ingestWriters)
	var (
		mu   sync.Mutex // done, progress
		done int64
	)
	for range ingestWriters {
		go func() {
			for b := range batches {
				err := ix.embed(wctx, b.chunks)
				if err == nil {
					err = ix.o.Backend.Replace(wctx, repository, b.remove, b.chunks)
				}
				if err != nil {
					stop()
					for range batches { // let the reader finish
					}
					written <- err
					return
				}
				mu.Lock()
				done += int64(len(b.remove))
				progress(done, total)
				mu.Unlock()
			}
			written <- nil
		}()
	}
	var (
		remove []string
		chunks []Chunk
		size   int // of the chunks' text
		buf    []byte
		closed bool
	)
	finish := func() error { // ends the writer once; its error
		if closed {
			return nil
		}
		closed = true
		close(batches)
		var first error // the others' may be the cancellation it caused
		for range ingestWriters {
			if err := <-written; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	defer finish()
	flush := func() error {
		if len(remove) == 0 {
			return nil
		}
		select {
		case batches <- batch{remove, chunks}:
		case <-wctx.Done():
			if err := finish(); err != nil {
				return err
			}
			return ctx.Err()
		}
		remove, chunks, size = nil, nil, 0
		return nil
	}
	limit := ingestFirstBatch
	for _, c := range list {
		if wctx.Err() != nil {
			if err := finish(); err != nil {
				return st, err // the writer's
			}
			return st, ctx.Err()
		}
		remove = append(remove, c.path)
		switch {
		case c.blob == "":
			st.Removed++
		case vendored(c.path):
			st.Skipped["vendored"]++
		case sizes[c.blob] > ix.o.MaxFileBytes:
			st.Skipped["too_large"]++
		default:
			data, _, ok, err := br.next(ix.o.MaxFileBytes, buf)
			if err != nil {
				return st, err
			}
			if !ok { // cannot happen: sizes said otherwise
				st.Skipped["too_large"]++
				break
			}
			buf = data[:0]
			if why := skipReason(c.path, data); why != "" {
				st.Skipped[why]++
				break
			}
			cs := chunk(c.path, data)
			if len(cs) > 0 {
				// One extraction for both: the query language's row and
				// the fields the file is ranked by.
				syms := extractSymbols(c.path, data)
				cs[0].query = newFileQuery(data, syms)
				cs[0].file = newFileFields(syms)
				sym, doc := cs[0].file.indexTerms()
				size += len(sym) + len(doc)
			}
			for i := range cs {
				cs[i].Repository, cs[i].Commit = repository, to
				// The terms too, here: the writers are what bounds an
				// ingestion, and this goroutine waits for git half the
				// time.
				_, body := cs[i].indexTerms()
				size += len(cs[i].Text) + len(body)
			}
			chunks = append(chunks, cs...)
			st.Indexed++
			st.Chunks += len(cs)
		}
		if len(remove) >= limit || size >= ingestBatchBytes {
			limit = min(ingestBatch, 2*limit)
			if err := flush(); err != nil {
				return st, err
			}
		}
	}
	if err := flush(); err != nil {
		return st, err
	}
	if err := finish(); err != nil {
		return st, err
	}
	if err := <-fed; err != nil {
		return st, fmt.Errorf("retrieval: writing to git cat-file: %w", err)
	}
	err = br.close()
	br = nil
	if err != nil {
		return st, err
	}
	if ix.o.Log != nil {
		ix.o.Log("indexed", "repository", repository, "commit", to, "files", st.Files, "indexed", st.Indexed, "removed", st.Removed, "skipped", st.Skipped, "chunks", st.Chunks)
	}
	return st, nil
}

// blobSizes reads the sizes of blobs with `git cat-file --batch-check`.
func blobSizes(ctx context.Context, gitDir string, ids []string) (map[string]int64, error) {
	sizes := make(map[string]int64, len(ids))
	if len(ids) == 0 {
		return sizes, nil
	}
	br, err := newBlobReader(ctx, gitDir, true)
	if err != nil {
		return nil, err
	}
	fed := br.feed(ids)
	for _, id := range ids {
		n, err := br.header()
		if err != nil {
			br.cmd.Process.Kill()
			br.close()
			return nil, err
		}
		sizes[id] = n
	}
	if err := <-fed; err != nil {
		br.cmd.Process.Kill()
		br.close()
		return nil, err
	}
	return sizes, br.close()
}

// embed sets the chunks' vectors when an Embedder is configured.
func (ix *Index) embed(ctx context.Context, chunks []Chunk) error {
	if ix.o.Embedder == nil {
		return nil
	}
	for i := 0; i < len(chunks); i += embedBatch {
		part := chunks[i:min(len(chunks), i+embedBatch)]
		texts := make([]string, len(part))
		for j, c := range part {
			t := c.Path + "\n" + c.Text
			if len(t) > embedText {
				t = strings.ToValidUTF8(t[:embedText], "")
			}
			texts[j] = t
		}
		vs, err := ix.o.Embedder.Embed(ctx, texts)
		if err != nil {
			return fmt.Errorf("retrieval: embedding chunks: %w", err)
		}
		if len(vs) != len(part) {
			return fmt.Errorf("retrieval: the embedding model returned %d vectors for %d texts", len(vs), len(part))
		}
		for j := range part {
			part[j].Vector = vs[j]
		}
	}
	return nil
}

// Search finds the chunks that best match q.Text (and, with an Embedder,
// its meaning) in q.Repositories.
func (ix *Index) Search(ctx context.Context, q Query) ([]Result, error) {
	pq, err := parseSearch(q)
	if err != nil {
		return nil, err
	}
	if !pq.plain() {
		return ix.searchLanguage(ctx, q, pq)
	}
	if err := checkQuery(&q); err != nil {
		return nil, err
	}
	if ix.o.Embedder != nil && q.Vector == nil {
		vs, err := ix.o.Embedder.Embed(ctx, []string{q.Text})
		if err != nil {
			return nil, fmt.Errorf("retrieval: embedding the query: %w", err)
		}
		if len(vs) == 1 {
			q.Vector = vs[0]
		}
	}
	return ix.o.Backend.Search(ctx, q)
}

// DeleteRepository removes a repository's chunks.
func (ix *Index) DeleteRepository(ctx context.Context, repository string) error {
	return ix.o.Backend.DeleteRepository(ctx, repository)
}

// checkQuery validates q and applies the defaults.
func checkQuery(q *Query) error {
	if len(q.Text) > MaxQueryBytes {
		return fmt.Errorf("%w: the query is longer than %d bytes", ErrBadQuery, MaxQueryBytes)
	}
	if len(parseQuery(q.Text)) == 0 {
		return fmt.Errorf("%w: the query has no words to search for (single characters and common words such as \"the\" are not indexed)", ErrBadQuery)
	}
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	q.Limit = min(q.Limit, MaxLimit)
	return nil
}

// vectorWeight is what the vector ranking weighs in fuseRanks against
// the lexical one's 1; 0 ranks every file the words found first, in
// their order, and the files only the vectors found after them.
// Vectors must never make a search worse than words alone: on the
// evaluation (BenchmarkEval, llmtest's embeddings over HTTP) every
// weight of reciprocal rank fusion tried lowered MRR (Go's set: 0.94
// lexical, 0.85 at 0.1, 0.75 at 0.2, 0.38 at 1; recall@5 0.985, 0.985,
// 0.98, 0.575), as rank fusion flattens BM25's margins; appending cannot
// lower recall@k or MRR (integrations/README.md).
var vectorWeight = 0.0

// rrfK is reciprocal rank fusion's constant: a list adds
// weight/(rrfK + rank) to an entry's score.
const rrfK = 60

// fused is an entry of fuseRanks' ranking.
type fused struct {
	key   string
	score float64
}

// fuseRanks merges a lexical and a vector ranking (keys, best first):
// with vectorWeight 0, the lexical ranking, then the rest of the vector
// one; otherwise by weighted reciprocal rank fusion, ties in the lexical
// order, then the key's.
func fuseRanks(lex, vec []string) []fused {
	if vectorWeight == 0 {
		out := make([]fused, 0, len(lex)+len(vec))
		seen := make(map[string]bool, len(lex))
		for rank, k := range lex {
			seen[k] = true
			out = append(out, fused{k, 2 - float64(rank)/float64(len(lex))})
		}
		for rank, k := range vec {
			if !seen[k] {
				seen[k] = true
				out = append(out, fused{k, 1 - float64(rank)/float64(len(vec))})
			}
		}
		return out
	}
	score := map[string]float64{}
	order := map[string]int{}
	for rank, k := range lex {
		score[k] += 1 / float64(rrfK+rank+1)
		if _, ok := order[k]; !ok {
			order[k] = rank
		}
	}
	for rank, k := range vec {
		score[k] += vectorWeight / float64(rrfK+rank+1)
		if _, ok := order[k]; !ok {
			order[k] = len(lex) + rank
		}
	}
	out := make([]fused, 0, len(score))
	for k, s := range score {
		out = append(out, fused{k, s})
	}
	slices.SortFunc(out, func(a, b fused) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := cmp.Compare(order[a.key], order[b.key]); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	return out
}
