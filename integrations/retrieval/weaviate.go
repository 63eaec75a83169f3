package retrieval

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weaviate/weaviate-go-client/v4/weaviate"
	"github.com/weaviate/weaviate-go-client/v4/weaviate/filters"
	"github.com/weaviate/weaviate-go-client/v4/weaviate/graphql"
	"github.com/weaviate/weaviate/entities/models"
)

// Weaviate is the Backend for deployments that outgrow one machine
// (retrieval.backend: weaviate). Chunks are objects of one collection
// with vectors we provide (no Weaviate vectorizer); the repository is a
// filter. Their words are stored as our own tokens (terms) with
// whitespace tokenization, so BM25 there matches what it matches here;
// with a vector, queries are Weaviate's hybrid, BM25 and vector fused
// by reciprocal rank as the embedded backend does.
type Weaviate struct {
	c     *weaviate.Client
	class string
}

// WeaviateOptions configure NewWeaviate.
type WeaviateOptions struct {
	// URL is the server's address, e.g. http://127.0.0.1:8080
	// (retrieval.weaviate.url).
	URL string
	// APIKey, when set, is sent as a bearer token
	// (retrieval.weaviate.api_key).
	APIKey string
	// Class is the collection's name (default CodumentorChunk); it must
	// start with an upper-case letter.
	Class string
	// Timeout bounds each request (default 60s).
	Timeout time.Duration
}

// weaviateBatch is how many objects one import request carries.
const weaviateBatch = 200

// NewWeaviate connects to a Weaviate server and creates the collection
// if it does not exist.
func NewWeaviate(ctx context.Context, o WeaviateOptions) (*Weaviate, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("retrieval: retrieval.weaviate.url %q is not an http(s) URL", o.URL)
	}
	if o.Class == "" {
		o.Class = "CodumentorChunk"
	}
	cfg := weaviate.Config{Host: u.Host, Scheme: u.Scheme, Timeout: o.Timeout, ConnectionClient: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	if o.APIKey != "" {
		cfg.Headers = map[string]string{"Authorization": "Bearer " + o.APIKey}
	}
	c, err := weaviate.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("retrieval: weaviate: %w", err)
	}
	w := &Weaviate{c: c, class: o.Class}
	exists, err := c.Schema().ClassExistenceChecker().WithClassName(o.Class).Do(ctx)
	if err != nil {
		return nil, fmt.Errorf("retrieval: weaviate at %s: %w", u.Host, err)
	}
	if !exists {
		if err := c.Schema().ClassCreator().WithClass(w.schema()).Do(ctx); err != nil {
			return nil, fmt.Errorf("retrieval: weaviate: creating collection %s: %w", o.Class, err)
		}
	}
	return w, nil
}

func (w *Weaviate) schema() *models.Class {
	no := false
	prop := func(name, typ, tokenization string, searchable, filterable bool) *models.Property {
		return &models.Property{Name: name, DataType: []string{typ}, Tokenization: tokenization,
			IndexSearchable: &searchable, IndexFilterable: &filterable}
	}
	return &models.Class{
		Class:      w.class,
		Vectorizer: "none",
		Properties: []*models.Property{
			prop("repository", "text", "field", false, true),
			prop("path", "text", "field", false, true),
			prop("path_terms", "text", "whitespace", true, false),
			prop("body_terms", "text", "whitespace", true, false),
			{Name: "text", DataType: []string{"text"}, IndexSearchable: &no, IndexFilterable: &no},
			{Name: "commit", DataType: []string{"text"}, IndexSearchable: &no, IndexFilterable: &no},
			{Name: "language", DataType: []string{"text"}, IndexSearchable: &no, IndexFilterable: &no},
			{Name: "start_line", DataType: []string{"int"}, IndexFilterable: &no},
			{Name: "end_line", DataType: []string{"int"}, IndexFilterable: &no},
		},
	}
}

func textEqual(prop string, v ...string) *filters.WhereBuilder {
	op := filters.Equal
	if len(v) > 1 {
		op = filters.ContainsAny
	}
	return filters.Where().WithPath([]string{prop}).WithOperator(op).WithValueText(v...)
}

// Replace implements Backend.
func (w *Weaviate) Replace(ctx context.Context, repository string, remove []string, chunks []Chunk) error {
	for i := 0; i < len(remove); i += 100 {
		where := filters.Where().WithOperator(filters.And).WithOperands([]*filters.WhereBuilder{
			textEqual("repository", repository),
			textEqual("path", remove[i:min(len(remove), i+100)]...),
		})
		if err := w.deleteAll(ctx, where); err != nil {
			return err
		}
	}
	for i := 0; i < len(chunks); i += weaviateBatch {
		part := chunks[i:min(len(chunks), i+weaviateBatch)]
		objs := make([]*models.Object, len(part))
		for j := range part {
			c := &part[j]
			pt, bt := c.indexTerms()
			objs[j] = &models.Object{Class: w.class, Vector: c.Vector, Properties: map[string]any{
				"repository": repository, "path": c.Path, "path_terms": pt, "body_terms": bt,
				"text": c.Text, "commit": c.Commit, "language": c.Language, "start_line": c.StartLine, "end_line": c.EndLine,
			}}
		}
		res, err := w.c.Batch().ObjectsBatcher().WithObjects(objs...).Do(ctx)
		if err != nil {
			return fmt.Errorf("retrieval: weaviate import: %w", err)
		}
		for _, r := range res {
			if r.Result != nil && r.Result.Errors != nil && len(r.Result.Errors.Error) > 0 {
				return fmt.Errorf("retrieval: weaviate import: %s", r.Result.Errors.Error[0].Message)
			}
		}
	}
	return nil
}

// deleteAll deletes every object matching where: a batch delete stops
// at the server's maximum, so repeat until nothing matches.
func (w *Weaviate) deleteAll(ctx context.Context, where *filters.WhereBuilder) error {
	for {
		res, err := w.c.Batch().ObjectsBatchDeleter().WithClassName(w.class).WithWhere(where).WithOutput("minimal").Do(ctx)
		if err != nil {
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
	return w.deleteAll(ctx, textEqual("repository", repository))
}

// Search implements Backend.
func (w *Weaviate) Search(ctx context.Context, q Query) ([]Result, error) {
	if err := checkQuery(&q); err != nil {
		return nil, err
	}
	// Only our parsed words reach the query: letters, digits, spaces. An
	// identifier of several parts is searched as its joined form (Weaviate
	// has no phrases; its parts alone would match every chunk that has
	// them anywhere), so parseConfig finds parseConfig and parse_config,
	// and prose "parse config" finds all three.
	var words []string
	for _, wd := range parseQuery(q.Text) {
		words = append(words, strings.Join(wd, ""))
	}
	text := strings.Join(words, " ")
	props := []string{"path_terms^" + strconv.Itoa(int(pathWeight)), "body_terms"}
	get := w.c.GraphQL().Get().WithClassName(w.class).WithLimit(q.Limit).WithFields(
		graphql.Field{Name: "repository"}, graphql.Field{Name: "path"}, graphql.Field{Name: "commit"},
		graphql.Field{Name: "language"}, graphql.Field{Name: "text"},
		graphql.Field{Name: "start_line"}, graphql.Field{Name: "end_line"},
		graphql.Field{Name: "_additional", Fields: []graphql.Field{{Name: "score"}}},
	)
	if q.Vector != nil {
		get = get.WithHybrid(w.c.GraphQL().HybridArgumentBuilder().WithQuery(text).WithVector(q.Vector).WithAlpha(0.5).WithFusionType(graphql.Ranked).WithProperties(props))
	} else {
		get = get.WithBM25(w.c.GraphQL().Bm25ArgBuilder().WithQuery(text).WithProperties(props...))
	}
	if len(q.Repositories) > 0 {
		get = get.WithWhere(textEqual("repository", q.Repositories...))
	}
	resp, err := get.Do(ctx)
	if err != nil {
		return nil, fmt.Errorf("retrieval: weaviate search: %w", err)
	}
	if len(resp.Errors) > 0 {
		return nil, fmt.Errorf("retrieval: weaviate search: %s", resp.Errors[0].Message)
	}
	data, _ := resp.Data["Get"].(map[string]any)
	items, _ := data[w.class].([]any)
	out := make([]Result, 0, len(items))
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, errors.New("retrieval: weaviate search: unexpected answer")
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		num := func(k string) int { f, _ := m[k].(float64); return int(f) }
		r := Result{Chunk: Chunk{Repository: str("repository"), Path: str("path"), Commit: str("commit"),
			Language: str("language"), Text: str("text"), StartLine: num("start_line"), EndLine: num("end_line")}}
		if add, ok := m["_additional"].(map[string]any); ok {
			switch s := add["score"].(type) {
			case string:
				r.Score, _ = strconv.ParseFloat(s, 64)
			case float64:
				r.Score = s
			}
		}
		out = append(out, r)
	}
	return out, nil
}
