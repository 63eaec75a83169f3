package retrieval

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Weaviate is the Backend for deployments that outgrow one machine
// (retrieval.backend: weaviate). It ranks as the embedded index does
// (SQLite.Search): files, by the BM25 of their own fields (path, name,
// symbols, doc comments: fileWeights) plus their best chunks' BM25
// (secondWeight), over our own tokens (terms), with the same
// parameters. Two collections: the chunks (Class, default
// CodumentorChunk) with vectors we provide (no Weaviate vectorizer),
// and the files (Class + "File"); the repository is a filter. With a
// vector the files found by the chunks' vectors are fused with the
// words' ranking as the embedded backend fuses them (fuseRanks).
//
// Each collection has one searchable property, terms, whitespace
// tokenized: a field's terms repeated as many times as it weighs.
// Weaviate's BM25 over several properties with boosts ("path^4") is
// not BM25F: its block-max WAND ranks each property alone with one
// average length for all of them (the mean of their means) and adds
// the scores of their separate top-k lists (weaviate 1.35,
// adapters/repos/db/inverted/bm25_searcher_block.go). A repeated term
// is what FTS5's column weights are (a hit weighs w), in one BM25 with
// one length; only the length counts the repeats.
//
// It speaks Weaviate's REST and GraphQL API with net/http: the official
// client would link gRPC, protobuf and OpenAPI packages whose
// initialization every server pays for, this backend configured or not.
type Weaviate struct {
	hc     *http.Client
	base   string // scheme://host/v1
	apiKey string
	class  string // the chunks' collection
	files  string // the files' collection: class + "File"
}

// WeaviateOptions configure NewWeaviate.
type WeaviateOptions struct {
	// URL is the server's address, e.g. http://127.0.0.1:8080
	// (retrieval.weaviate.url).
	URL string
	// APIKey, when set, is sent as a bearer token
	// (retrieval.weaviate.api_key).
	APIKey string
	// Class is the chunks' collection's name (default CodumentorChunk;
	// the files' is Class + "File"); it must start with an upper-case
	// letter.
	Class string
	// Timeout bounds each request (default 60s).
	Timeout time.Duration
}

// An import request carries at most weaviateBatch objects, or fewer
// whose text and terms reach weaviateBatchBytes (a chunk's text is up
// to chunkBytes, its terms about as much): a request must end within
// the client's timeout on a loaded server.
const (
	weaviateBatch      = 200
	weaviateBatchBytes = 4 << 20
)

// maxWeaviateAnswer bounds what is read of one answer: a search's are
// at most its depth's chunks, each of chunkBytes-bounded text.
const maxWeaviateAnswer = 64 << 20

// weaviateVersion numbers the collections' schema (weaviateProperty's
// in schemas): a collection without the current one's properties was
// made by an older version, whose objects this one cannot rank.
const weaviateVersion = 2

// weaviateClass reports whether name may be a collection's name: it is
// part of the URL's path and of GraphQL queries.
func weaviateClass(name string) bool {
	if name == "" || len(name) > 255 || name[0] < 'A' || name[0] > 'Z' {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// NewWeaviate connects to a Weaviate server and creates the
// collections if they do not exist. A chunks' collection an older
// version made (no terms property) is an error saying what to do: its
// objects lack what this version ranks by.
func NewWeaviate(ctx context.Context, o WeaviateOptions) (*Weaviate, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("retrieval: retrieval.weaviate.url %q is not an http(s) URL", o.URL)
	}
	if o.Class == "" {
		o.Class = "CodumentorChunk"
	}
	if !weaviateClass(o.Class + "File") {
		return nil, fmt.Errorf("retrieval: retrieval.weaviate.class %q: want an upper-case letter, then letters, digits or _ (at most 251)", o.Class)
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	// Ingestion's writers and concurrent searches each hold a
	// connection: with the default 2 idle ones per host, the others
	// opened a new one for each request.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 16
	w := &Weaviate{
		hc: &http.Client{Timeout: o.Timeout, Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		base: u.Scheme + "://" + u.Host + "/v1", apiKey: o.APIKey, class: o.Class, files: o.Class + "File",
	}
	for _, c := range w.schemas() {
		var have struct {
			Properties []struct{ Name string } `json:"properties"`
		}
		name := c["class"].(string)
		status, err := w.do(ctx, http.MethodGet, "/schema/"+name, nil, &have, http.StatusNotFound)
		if err != nil {
			return nil, fmt.Errorf("retrieval: weaviate at %s: %w", u.Host, err)
		}
		if status == http.StatusNotFound {
			if _, err := w.do(ctx, http.MethodPost, "/schema", c, nil); err != nil {
				return nil, fmt.Errorf("retrieval: weaviate: creating collection %s: %w", name, err)
			}
			continue
		}
		if !slices.ContainsFunc(have.Properties, func(p struct{ Name string }) bool { return p.Name == "terms" }) {
			return nil, fmt.Errorf("retrieval: weaviate: collection %s was made by an older version of this server (schema before %d): delete it (DELETE /v1/schema/%s), or set retrieval.weaviate.class to a new name, and index the repositories again", name, weaviateVersion, name)
		}
	}
	return w, nil
}

// do sends body (JSON) to the API's path and decodes a 2xx answer into
// out (nil: discarded). A status of also is returned without error and
// its body discarded; any other is an error with Weaviate's message.
func (w *Weaviate) do(ctx context.Context, method, path string, body, out any, also ...int) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.base+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if w.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+w.apiKey)
	}
	res, err := w.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	lr := &io.LimitedReader{R: res.Body, N: maxWeaviateAnswer + 1}
	ok := res.StatusCode/100 == 2
	if !ok {
		for _, s := range also {
			if res.StatusCode == s {
				return s, nil
			}
		}
		var e struct {
			Error []struct{ Message string } `json:"error"`
		}
		msg, _ := io.ReadAll(io.LimitReader(lr, 64<<10))
		if json.Unmarshal(msg, &e) == nil && len(e.Error) > 0 && e.Error[0].Message != "" {
			return res.StatusCode, fmt.Errorf("status %d: %s", res.StatusCode, e.Error[0].Message)
		}
		return res.StatusCode, fmt.Errorf("status %d: %.200s", res.StatusCode, bytes.TrimSpace(msg))
	}
	if out == nil {
		_, err = io.Copy(io.Discard, lr)
	} else {
		err = json.NewDecoder(lr).Decode(out)
	}
	if lr.N <= 0 {
		return res.StatusCode, fmt.Errorf("answer longer than %d MiB", maxWeaviateAnswer>>20)
	}
	if err != nil {
		return res.StatusCode, fmt.Errorf("reading the answer: %w", err)
	}
	return res.StatusCode, nil
}

// weaviateProperty is a property of a collection (REST schema).
type weaviateProperty struct {
	Name            string   `json:"name"`
	DataType        []string `json:"dataType"`
	Tokenization    string   `json:"tokenization,omitempty"`
	IndexSearchable *bool    `json:"indexSearchable,omitempty"`
	IndexFilterable *bool    `json:"indexFilterable,omitempty"`
}

// schemas are the two collections: the chunks' and the files'.
func (w *Weaviate) schemas() []map[string]any {
	prop := func(name, typ, tokenization string, searchable, filterable bool) weaviateProperty {
		p := weaviateProperty{Name: name, DataType: []string{typ}, Tokenization: tokenization, IndexFilterable: &filterable}
		if typ == "text" {
			p.IndexSearchable = &searchable
		}
		return p
	}
	// BM25's parameters are FTS5's (k1 1.2, b 0.75), named so that a
	// server's other defaults do not apply.
	inverted := map[string]any{"bm25": map[string]any{"k1": 1.2, "b": 0.75}, "usingBlockMaxWAND": true}
	return []map[string]any{{
		"class":               w.class,
		"vectorizer":          "none",
		"invertedIndexConfig": inverted,
		"description":         fmt.Sprintf("Codumentor's chunks (schema %d)", weaviateVersion),
		"properties": []weaviateProperty{
			prop("repository", "text", "field", false, true),
			prop("path", "text", "field", false, true),
			prop("terms", "text", "whitespace", true, false),
			prop("text", "text", "", false, false),
			prop("commit", "text", "", false, false),
			prop("language", "text", "", false, false),
			prop("start_line", "int", "", false, false),
			prop("end_line", "int", "", false, false),
		},
	}, {
		"class":               w.files,
		"vectorizer":          "none",
		"invertedIndexConfig": inverted,
		"description":         fmt.Sprintf("Codumentor's files (schema %d)", weaviateVersion),
		"properties": []weaviateProperty{
			prop("repository", "text", "field", false, true),
			prop("path", "text", "field", false, true),
			prop("terms", "text", "whitespace", true, false),
		},
	}}
}

// textEqual is a REST where filter: prop equals v, or one of several.
func textEqual(prop string, v ...string) map[string]any {
	if len(v) > 1 {
		return map[string]any{"path": []string{prop}, "operator": "ContainsAny", "valueTextArray": v}
	}
	return map[string]any{"path": []string{prop}, "operator": "Equal", "valueText": v[0]}
}

// repeatTerms appends ts to b n times, space separated.
func repeatTerms(b []byte, ts string, n int) []byte {
	if ts == "" {
		return b
	}
	for range n {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, ts...)
	}
	return b
}

// chunkTerms is a chunk's terms property: its path's terms pathWeight
// times, then its text's.
func chunkTerms(c *Chunk) string {
	pt, bt := c.indexTerms()
	b := make([]byte, 0, int(pathWeight)*(len(pt)+1)+len(bt)+1)
	b = repeatTerms(b, pt, int(pathWeight))
	return string(repeatTerms(b, bt, 1))
}

// fileWeaviateTerms is a file's terms property: its fields' terms
// (fileTerms: path, name, symbols, docs), each as many times as it
// weighs (fileWeights, whole numbers).
func fileWeaviateTerms(f fileRow) string {
	var b []byte
	for col := range 4 {
		b = repeatTerms(b, fileTerms(f.path, f.f, int64(col)), int(math.Round(fileWeights[col])))
	}
	return string(b)
}

// weaviateFileID is the ID of a file's object: the same for the same
// file, so that importing it again replaces it.
func weaviateFileID(repository, path string) string {
	h := sha256.Sum256([]byte("file\x00" + repository + "\x00" + path))
	h[6] = h[6]&0x0f | 0x50 // version 5 (name-based, SHA), as RFC 9562 lays it out
	h[8] = h[8]&0x3f | 0x80
	x := hex.EncodeToString(h[:16])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// weaviateObject is an object of a batch import.
type weaviateObject struct {
	Class      string         `json:"class"`
	ID         string         `json:"id,omitempty"`
	Vector     []float32      `json:"vector,omitempty"`
	Properties map[string]any `json:"properties"`
}

// Replace implements Backend: the paths' chunks and files deleted, then
// the new ones imported, files and chunks in the same requests.
func (w *Weaviate) Replace(ctx context.Context, repository string, remove []string, chunks []Chunk) error {
	for i := 0; i < len(remove); i += 100 {
		where := map[string]any{"operator": "And", "operands": []any{
			textEqual("repository", repository),
			textEqual("path", remove[i:min(len(remove), i+100)]...),
		}}
		for _, class := range []string{w.class, w.files} {
			if err := w.deleteAll(ctx, class, where); err != nil {
				return err
			}
		}
	}
	var objs []weaviateObject
	size := 0
	for _, f := range batchFiles(chunks) {
		t := fileWeaviateTerms(f)
		objs = append(objs, weaviateObject{Class: w.files, ID: weaviateFileID(repository, f.path), Properties: map[string]any{
			"repository": repository, "path": f.path, "terms": t,
		}})
		size += len(t)
		if len(objs) == weaviateBatch || size >= weaviateBatchBytes {
			if err := w.importObjects(ctx, objs); err != nil {
				return err
			}
			objs, size = objs[:0], 0
		}
	}
	for i := range chunks {
		c := &chunks[i]
		t := chunkTerms(c)
		objs = append(objs, weaviateObject{Class: w.class, Vector: c.Vector, Properties: map[string]any{
			"repository": repository, "path": c.Path, "terms": t,
			"text": c.Text, "commit": c.Commit, "language": c.Language, "start_line": c.StartLine, "end_line": c.EndLine,
		}})
		size += len(t) + len(c.Text)
		if len(objs) == weaviateBatch || size >= weaviateBatchBytes {
			if err := w.importObjects(ctx, objs); err != nil {
				return err
			}
			objs, size = objs[:0], 0
		}
	}
	if len(objs) > 0 {
		return w.importObjects(ctx, objs)
	}
	return nil
}

// importObjects imports objs in one request.
func (w *Weaviate) importObjects(ctx context.Context, objs []weaviateObject) error {
	var res []struct {
		Result *struct {
			Errors *struct {
				Error []struct{ Message string } `json:"error"`
			} `json:"errors"`
		} `json:"result"`
	}
	if _, err := w.do(ctx, http.MethodPost, "/batch/objects", map[string]any{"objects": objs}, &res); err != nil {
		return fmt.Errorf("retrieval: weaviate import: %w", err)
	}
	for _, r := range res {
		if r.Result != nil && r.Result.Errors != nil && len(r.Result.Errors.Error) > 0 {
			return fmt.Errorf("retrieval: weaviate import: %s", r.Result.Errors.Error[0].Message)
		}
	}
	return nil
}

// deleteAll deletes every object of class matching where: a batch
// delete stops at the server's maximum, so repeat until nothing
// matches.
func (w *Weaviate) deleteAll(ctx context.Context, class string, where map[string]any) error {
	for {
		var res struct {
			Results *struct {
				Matches int64 `json:"matches"`
				Failed  int64 `json:"failed"`
			} `json:"results"`
		}
		body := map[string]any{"match": map[string]any{"class": class, "where": where}, "output": "minimal"}
		if _, err := w.do(ctx, http.MethodDelete, "/batch/objects", body, &res); err != nil {
			return fmt.Errorf("retrieval: weaviate delete: %w", err)
		}
		if res.Results == nil || res.Results.Matches == 0 {
			return nil
		}
		if res.Results.Failed > 0 {
			return fmt.Errorf("retrieval: weaviate delete: %d objects could not be deleted", res.Results.Failed)
		}
	}
}

// DeleteRepository implements Backend.
func (w *Weaviate) DeleteRepository(ctx context.Context, repository string) error {
	for _, class := range []string{w.class, w.files} {
		if err := w.deleteAll(ctx, class, textEqual("repository", repository)); err != nil {
			return err
		}
	}
	return nil
}

// graphQLString is s as a GraphQL string literal: JSON's escapes are
// GraphQL's.
func graphQLString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func graphQLStrings(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = graphQLString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// weaviateHit is an object of a GraphQL Get's answer.
type weaviateHit struct {
	Repository, Path, Commit, Language, Text string
	StartLine                                int `json:"start_line"`
	EndLine                                  int `json:"end_line"`
	Additional                               struct {
		ID       string   `json:"id"`
		Score    any      `json:"score"` // a string, in GraphQL
		Distance *float64 `json:"distance"`
	} `json:"_additional"`
}

func (h *weaviateHit) score() float64 {
	switch s := h.Additional.Score.(type) {
	case string:
		f, _ := strconv.ParseFloat(s, 64)
		return f
	case float64:
		return s
	}
	return 0
}

// chunkFields are what a search reads of a chunk it answers.
const chunkFields = "repository path commit language text start_line end_line _additional {id}"

// graphQL runs a query of several Gets (by alias) in one request: each
// alias's objects.
func (w *Weaviate) graphQL(ctx context.Context, query string) (map[string][]weaviateHit, error) {
	var resp struct {
		Data struct {
			Get map[string][]weaviateHit `json:"Get"`
		} `json:"data"`
		Errors []struct{ Message string } `json:"errors"`
	}
	if _, err := w.do(ctx, http.MethodPost, "/graphql", map[string]string{"query": query}, &resp); err != nil {
		return nil, err
	}
	if len(resp.Errors) > 0 {
		return nil, errors.New(resp.Errors[0].Message)
	}
	return resp.Data.Get, nil
}

// Weaviate ranks weaviateChunkDepth chunks and weaviateFilesDepth
// files, deeper than a shard of the embedded index (chunkDepth,
// filesDepth): its BM25 top k is not exact. Over Python's standard
// library, "motif style" with limit 5 (or 200) did not answer the
// three chunks that score best, which limit 1000 answered first (both
// block-max WAND and the older WAND, weaviate 1.35.2: the bounds by
// which they skip documents are below some documents' scores); the
// Python set's recall@5 was 0.855 at 200 chunks and 100 files, 0.98 at
// 1000 and 500 (the embedded index: 0.99).
const (
	weaviateChunkDepth = 1000
	weaviateFilesDepth = 500
)

// weaviateFile is a file ranked (rankFiles' fileHit), with its best
// chunk's ID ("" when none was among those ranked).
type weaviateFile struct {
	fileKey
	chunk string
	score float64
}

// Search implements Backend as SQLite.Search does: the chunks ranked
// by BM25, the files by their fields, and with a vector the chunks
// nearest to it, in one request (rankingQuery); files scored as
// rankFiles scores them; then their chunks, in a second request.
func (w *Weaviate) Search(ctx context.Context, q Query) ([]Result, error) {
	if err := checkQuery(&q); err != nil {
		return nil, err
	}
	depth := max(q.Limit, q.depth)
	query, bm25, err := w.rankingQuery(q, max(weaviateChunkDepth, depth), max(weaviateFilesDepth, depth))
	if err != nil {
		return nil, err
	}
	got, err := w.graphQL(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("retrieval: weaviate search: %w", err)
	}
	ranked := w.rankFiles(got["chunks"], got["files"])
	if q.Vector != nil {
		ranked = fuseWeaviate(ranked, got["near"])
	}
	ranked = ranked[:min(len(ranked), depth)]
	return w.load(ctx, bm25, ranked)
}

// rankingQuery is the GraphQL query of q's rankings (q checked): the
// chunks (alias chunks, at most chunks of them), the files (files) and,
// with a vector, the nearest chunks (near); and its bm25 argument.
func (w *Weaviate) rankingQuery(q Query, chunks, files int) (query, bm25 string, err error) {
	// Only our parsed words reach the query: letters, digits, spaces. An
	// identifier of several parts is searched as its joined form (Weaviate
	// has no phrases; its parts alone would match every chunk that has
	// them anywhere), so parseConfig finds parseConfig and parse_config,
	// and prose "parse config" finds all three.
	var words []string
	for _, wd := range parseQuery(q.Text) {
		words = append(words, strings.Join(wd, ""))
	}
	bm25 = "bm25: {query: " + graphQLString(strings.Join(words, " ")) + `, properties: ["terms"]}`
	where := ""
	switch len(q.Repositories) {
	case 0:
	case 1:
		where = `, where: {path: ["repository"], operator: Equal, valueText: ` + graphQLString(q.Repositories[0]) + "}"
	default:
		where = `, where: {path: ["repository"], operator: ContainsAny, valueText: ` + graphQLStrings(q.Repositories) + "}"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "{Get {chunks: %s(%s%s, limit: %d) {repository path _additional {id score}}", w.class, bm25, where, chunks)
	fmt.Fprintf(&b, " files: %s(%s%s, limit: %d) {repository path _additional {score}}", w.files, bm25, where, files)
	if q.Vector != nil {
		vec := make([]string, len(q.Vector))
		for i, f := range q.Vector {
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return "", "", errors.New("retrieval: weaviate search: the query's vector is not finite")
			}
			vec[i] = strconv.FormatFloat(float64(f), 'g', -1, 32)
		}
		fmt.Fprintf(&b, " near: %s(nearVector: {vector: [%s]}%s, limit: %d) {repository path _additional {id distance}}", w.class, strings.Join(vec, ", "), where, chunkDepth)
	}
	b.WriteString("}}")
	return b.String(), bm25, nil
}

// rankFiles scores the files of the ranked chunks and fields as
// SQLite's rankFiles does: fieldsWeight times the fields' BM25, plus
// the best chunk's, plus secondWeight times the second best's; best
// first, ties by repository and path.
func (w *Weaviate) rankFiles(chunks, fields []weaviateHit) []weaviateFile {
	type acc struct {
		fields, best, second float64
		chunk                string
		seen                 int
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
	for i := range fields {
		get(fileKey{fields[i].Repository, fields[i].Path}).fields = fields[i].score()
	}
	for i := range chunks { // best first
		c := &chunks[i]
		a := get(fileKey{c.Repository, c.Path})
		switch a.seen {
		case 0:
			a.best, a.chunk = c.score(), c.Additional.ID
		case 1:
			a.second = c.score()
		}
		a.seen++
	}
	out := make([]weaviateFile, 0, len(files))
	for k, a := range files {
		out = append(out, weaviateFile{fileKey: k, chunk: a.chunk, score: fieldsWeight*a.fields + a.best + secondWeight*a.second})
	}
	slices.SortFunc(out, func(a, b weaviateFile) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.repository, b.repository); c != 0 {
			return c
		}
		return cmp.Compare(a.path, b.path)
	})
	return out
}

// fuseWeaviate fuses the words' file ranking with the files of the
// chunks nearest to the query's vector (nearest first), as fuseFiles
// does: a file keeps its lexical best chunk when it has one.
func fuseWeaviate(lex []weaviateFile, near []weaviateHit) []weaviateFile {
	if len(near) == 0 {
		return lex
	}
	key := func(k fileKey) string { return k.repository + "\x00" + k.path }
	hits := map[string]weaviateFile{}
	var vec []string
	for i := range near {
		k := fileKey{near[i].Repository, near[i].Path}
		if _, ok := hits[key(k)]; !ok {
			hits[key(k)] = weaviateFile{fileKey: k, chunk: near[i].Additional.ID}
			vec = append(vec, key(k))
		}
	}
	lexKeys := make([]string, len(lex))
	for i, f := range lex {
		lexKeys[i] = key(f.fileKey)
		hits[lexKeys[i]] = f
	}
	fused := fuseRanks(lexKeys, vec)
	out := make([]weaviateFile, len(fused))
	for i, f := range fused {
		h := hits[f.key]
		h.score = f.score
		out[i] = h
	}
	return out
}

// weaviateLookups caps the files of one answer whose chunk load looks
// up by file (two searches each): the query language's deep rankings
// may hold more files found by their fields alone; those after the
// first weaviateLookups are left out.
const weaviateLookups = MaxLimit

// load answers the ranked files with their chunks, in one request: the
// best chunks by ID, and for a file without one (found by its fields
// alone) its chunk that ranks best for the words, or its first.
func (w *Weaviate) load(ctx context.Context, bm25 string, ranked []weaviateFile) ([]Result, error) {
	if len(ranked) == 0 {
		return []Result{}, nil
	}
	var ids []string
	var b strings.Builder
	b.WriteString("{Get {")
	lookups := 0
	for i, f := range ranked {
		if f.chunk != "" {
			ids = append(ids, f.chunk)
			continue
		}
		if lookups++; lookups > weaviateLookups {
			continue
		}
		file := `where: {operator: And, operands: [{path: ["repository"], operator: Equal, valueText: ` + graphQLString(f.repository) +
			`}, {path: ["path"], operator: Equal, valueText: ` + graphQLString(f.path) + "}]}"
		fmt.Fprintf(&b, " best%d: %s(%s, %s, limit: 1) {%s}", i, w.class, bm25, file, chunkFields)
		fmt.Fprintf(&b, ` first%d: %s(%s, sort: [{path: ["start_line"], order: asc}], limit: 1) {%s}`, i, w.class, file, chunkFields)
	}
	if len(ids) > 0 {
		fmt.Fprintf(&b, ` ids: %s(where: {path: ["id"], operator: ContainsAny, valueText: %s}, limit: %d) {%s}`, w.class, graphQLStrings(ids), len(ids), chunkFields)
	}
	b.WriteString("}}")
	got, err := w.graphQL(ctx, b.String())
	if err != nil {
		return nil, fmt.Errorf("retrieval: weaviate search: %w", err)
	}
	byID := map[string]*weaviateHit{}
	for i := range got["ids"] {
		byID[got["ids"][i].Additional.ID] = &got["ids"][i]
	}
	out := make([]Result, 0, len(ranked))
	for i, f := range ranked {
		h := byID[f.chunk]
		if f.chunk == "" {
			for _, alias := range []string{"best", "first"} {
				if hs := got[alias+strconv.Itoa(i)]; h == nil && len(hs) > 0 {
					h = &hs[0]
				}
			}
		}
		if h == nil { // the chunk left the index meanwhile
			continue
		}
		out = append(out, Result{Score: f.score, Chunk: Chunk{Repository: h.Repository, Path: h.Path, Commit: h.Commit,
			Language: h.Language, Text: h.Text, StartLine: h.StartLine, EndLine: h.EndLine}})
	}
	return out, nil
}
