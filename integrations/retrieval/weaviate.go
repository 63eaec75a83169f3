package retrieval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Weaviate is the Backend for deployments that outgrow one machine
// (retrieval.backend: weaviate). Chunks are objects of one collection
// with vectors we provide (no Weaviate vectorizer); the repository is a
// filter. Their words are stored as our own tokens (terms) with
// whitespace tokenization, so BM25 there matches what it matches here;
// with a vector, queries are Weaviate's hybrid, BM25 and vector fused
// by reciprocal rank as the embedded backend does.
//
// It speaks Weaviate's REST and GraphQL API with net/http: the official
// client would link gRPC, protobuf and OpenAPI packages whose
// initialization every server pays for, this backend configured or not.
type Weaviate struct {
	hc     *http.Client
	base   string // scheme://host/v1
	apiKey string
	class  string
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

// maxWeaviateAnswer bounds what is read of one answer: a search's are
// at most Query.Limit chunks of MaxFileBytes-bounded text.
const maxWeaviateAnswer = 64 << 20

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
	if !weaviateClass(o.Class) {
		return nil, fmt.Errorf("retrieval: retrieval.weaviate.class %q: want an upper-case letter, then letters, digits or _", o.Class)
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	w := &Weaviate{
		hc: &http.Client{Timeout: o.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		base: u.Scheme + "://" + u.Host + "/v1", apiKey: o.APIKey, class: o.Class,
	}
	status, err := w.do(ctx, http.MethodGet, "/schema/"+o.Class, nil, nil, http.StatusNotFound)
	if err != nil {
		return nil, fmt.Errorf("retrieval: weaviate at %s: %w", u.Host, err)
	}
	if status == http.StatusNotFound {
		if _, err := w.do(ctx, http.MethodPost, "/schema", w.schema(), nil); err != nil {
			return nil, fmt.Errorf("retrieval: weaviate: creating collection %s: %w", o.Class, err)
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

// weaviateProperty is a property of the collection (REST schema).
type weaviateProperty struct {
	Name            string   `json:"name"`
	DataType        []string `json:"dataType"`
	Tokenization    string   `json:"tokenization,omitempty"`
	IndexSearchable *bool    `json:"indexSearchable,omitempty"`
	IndexFilterable *bool    `json:"indexFilterable,omitempty"`
}

func (w *Weaviate) schema() any {
	no := false
	prop := func(name, typ, tokenization string, searchable, filterable bool) weaviateProperty {
		return weaviateProperty{Name: name, DataType: []string{typ}, Tokenization: tokenization,
			IndexSearchable: &searchable, IndexFilterable: &filterable}
	}
	return map[string]any{
		"class":      w.class,
		"vectorizer": "none",
		"properties": []weaviateProperty{
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

// textEqual is a REST where filter: prop equals v, or one of several.
func textEqual(prop string, v ...string) map[string]any {
	if len(v) > 1 {
		return map[string]any{"path": []string{prop}, "operator": "ContainsAny", "valueTextArray": v}
	}
	return map[string]any{"path": []string{prop}, "operator": "Equal", "valueText": v[0]}
}

// Replace implements Backend.
func (w *Weaviate) Replace(ctx context.Context, repository string, remove []string, chunks []Chunk) error {
	for i := 0; i < len(remove); i += 100 {
		where := map[string]any{"operator": "And", "operands": []any{
			textEqual("repository", repository),
			textEqual("path", remove[i:min(len(remove), i+100)]...),
		}}
		if err := w.deleteAll(ctx, where); err != nil {
			return err
		}
	}
	type object struct {
		Class      string         `json:"class"`
		Vector     []float32      `json:"vector,omitempty"`
		Properties map[string]any `json:"properties"`
	}
	for i := 0; i < len(chunks); i += weaviateBatch {
		part := chunks[i:min(len(chunks), i+weaviateBatch)]
		objs := make([]object, len(part))
		for j := range part {
			c := &part[j]
			pt, bt := c.indexTerms()
			objs[j] = object{Class: w.class, Vector: c.Vector, Properties: map[string]any{
				"repository": repository, "path": c.Path, "path_terms": pt, "body_terms": bt,
				"text": c.Text, "commit": c.Commit, "language": c.Language, "start_line": c.StartLine, "end_line": c.EndLine,
			}}
		}
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
	}
	return nil
}

// deleteAll deletes every object matching where: a batch delete stops
// at the server's maximum, so repeat until nothing matches.
func (w *Weaviate) deleteAll(ctx context.Context, where map[string]any) error {
	for {
		var res struct {
			Results *struct {
				Matches int64 `json:"matches"`
				Failed  int64 `json:"failed"`
			} `json:"results"`
		}
		body := map[string]any{"match": map[string]any{"class": w.class, "where": where}, "output": "minimal"}
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
	return w.deleteAll(ctx, textEqual("repository", repository))
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
	text := graphQLString(strings.Join(words, " "))
	props := graphQLStrings([]string{"path_terms^" + strconv.Itoa(int(pathWeight)), "body_terms"})
	args := []string{"limit: " + strconv.Itoa(q.Limit)}
	if q.Vector != nil {
		vec := make([]string, len(q.Vector))
		for i, f := range q.Vector {
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return nil, errors.New("retrieval: weaviate search: the query's vector is not finite")
			}
			vec[i] = strconv.FormatFloat(float64(f), 'g', -1, 32)
		}
		args = append(args, "hybrid: {query: "+text+", vector: ["+strings.Join(vec, ", ")+"], alpha: 0.5, fusionType: rankedFusion, properties: "+props+"}")
	} else {
		args = append(args, "bm25: {query: "+text+", properties: "+props+"}")
	}
	switch len(q.Repositories) {
	case 0:
	case 1:
		args = append(args, "where: {path: [\"repository\"], operator: Equal, valueText: "+graphQLString(q.Repositories[0])+"}")
	default:
		args = append(args, "where: {path: [\"repository\"], operator: ContainsAny, valueText: "+graphQLStrings(q.Repositories)+"}")
	}
	query := "{Get {" + w.class + "(" + strings.Join(args, ", ") + ") {repository path commit language text start_line end_line _additional {score}}}}"
	var resp struct {
		Data struct {
			Get map[string][]struct {
				Repository, Path, Commit, Language, Text string
				StartLine                                int `json:"start_line"`
				EndLine                                  int `json:"end_line"`
				Additional                               struct {
					Score any `json:"score"`
				} `json:"_additional"`
			} `json:"Get"`
		} `json:"data"`
		Errors []struct{ Message string } `json:"errors"`
	}
	if _, err := w.do(ctx, http.MethodPost, "/graphql", map[string]string{"query": query}, &resp); err != nil {
		return nil, fmt.Errorf("retrieval: weaviate search: %w", err)
	}
	if len(resp.Errors) > 0 {
		return nil, fmt.Errorf("retrieval: weaviate search: %s", resp.Errors[0].Message)
	}
	items := resp.Data.Get[w.class]
	out := make([]Result, 0, len(items))
	for _, m := range items {
		r := Result{Chunk: Chunk{Repository: m.Repository, Path: m.Path, Commit: m.Commit,
			Language: m.Language, Text: m.Text, StartLine: m.StartLine, EndLine: m.EndLine}}
		switch s := m.Additional.Score.(type) {
		case string:
			r.Score, _ = strconv.ParseFloat(s, 64)
		case float64:
			r.Score = s
		}
		out = append(out, r)
	}
	return out, nil
}
