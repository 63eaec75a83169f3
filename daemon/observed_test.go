package daemon_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// observed records every answer the end-to-end tests received, by method,
// path and status, so that TestMain can hold openapi.json to them: an
// answer the server really gives must be documented.
var observed struct {
	sync.Mutex
	seen map[string]bool // "GET /api/v1/me 200"
}

func observe(method, rawPath string, status int) {
	k := answerKey(method, rawPath, status)
	observed.Lock()
	defer observed.Unlock()
	if observed.seen == nil {
		observed.seen = map[string]bool{}
	}
	observed.seen[k] = true
}

// answerKey is how an answer is recorded: "GET /api/v1/me 200", without
// the query.
func answerKey(method, rawPath string, status int) string {
	path := rawPath
	if u, err := url.Parse(rawPath); err == nil {
		path = u.Path
	}
	if method == "HEAD" {
		method = "GET" // Fiber answers HEAD for every GET route; the document says so once
	}
	return method + " " + path + " " + strconv.Itoa(status)
}

// checkObserved compares what the tests observed with the OpenAPI
// document at docFile, writes each answer it does not document to w and
// reports whether all were documented.
func checkObserved(w io.Writer, docFile string) bool {
	b, err := os.ReadFile(docFile)
	if err != nil {
		fmt.Fprintln(w, err)
		return false
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"` // method (or "parameters") → operation
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		fmt.Fprintf(w, "%s: %v\n", docFile, err)
		return false
	}
	observed.Lock()
	var seen []string
	for k := range observed.seen {
		seen = append(seen, k)
	}
	observed.Unlock()
	return documentsAnswers(w, docFile, doc.Paths, seen)
}

// documentsAnswers reports whether paths documents every answer in seen
// (answerKey's form), writing each one it does not to w.
func documentsAnswers(w io.Writer, docFile string, paths map[string]map[string]json.RawMessage, seen []string) bool {
	sort.Strings(seen)
	ok := true
	for _, s := range seen {
		f := strings.Fields(s)
		method, path, status := strings.ToLower(f[0]), f[1], f[2]
		tmpl, found := matchPath(paths, path, method)
		if !found {
			if !strings.HasPrefix(path, "/api/") && !slices.Contains([]string{"/healthz", "/readyz", "/metrics"}, path) {
				continue // not an API route: Fiber's 404 for an unknown path
			}
			fmt.Fprintf(w, "observed %s %s %s: no such route in openapi.json\n", f[0], path, status)
			ok = false
			continue
		}
		var op struct {
			Responses map[string]json.RawMessage `json:"responses"`
		}
		if err := json.Unmarshal(paths[tmpl][method], &op); err != nil {
			fmt.Fprintf(w, "%s: %s %s: %v\n", docFile, method, tmpl, err)
			return false
		}
		if _, documented := op.Responses[status]; !documented {
			fmt.Fprintf(w, "observed %s %s → %s: openapi.json does not document status %s for %s %s\n", f[0], path, status, status, f[0], tmpl)
			ok = false
		}
	}
	return ok
}

// matchPath finds the document's path template that path and method fall
// under ("{id}" matches one segment).
func matchPath[Op any](paths map[string]map[string]Op, path, method string) (string, bool) {
	segs := strings.Split(path, "/")
	for tmpl, ops := range paths {
		if _, ok := ops[method]; !ok {
			continue
		}
		t := strings.Split(tmpl, "/")
		if len(t) != len(segs) {
			continue
		}
		match := true
		for i := range t {
			if !strings.HasPrefix(t[i], "{") && t[i] != segs[i] {
				match = false
				break
			}
		}
		if match {
			return tmpl, true
		}
	}
	return "", false
}

// The check that holds openapi.json to the observed answers finds an
// undocumented status and an undocumented API route, takes HEAD as GET
// and a path parameter as one segment, and leaves non-API paths alone.
func TestObservedAnswersCheck(t *testing.T) {
	var paths map[string]map[string]json.RawMessage
	doc := `{"/api/v1/me": {"get": {"responses": {"200": {}}}},
		"/api/v1/conversations/{id}": {"parameters": [], "get": {"responses": {"200": {}, "404": {}}}}}`
	if err := json.Unmarshal([]byte(doc), &paths); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		answer string
		want   string // in the report; "" when documented
	}{
		{answerKey("GET", "/api/v1/me?x=1", 200), ""},
		{answerKey("HEAD", "/api/v1/me", 200), ""},
		{answerKey("GET", "/api/v1/conversations/c-1", 404), ""},
		{answerKey("GET", "/no/such/page", 404), ""},
		{answerKey("GET", "/api/v1/me", 401), "does not document status 401 for GET /api/v1/me"},
		{answerKey("DELETE", "/api/v1/me", 204), "observed DELETE /api/v1/me 204: no such route"},
		{answerKey("GET", "/api/v1/conversations/c-1/extra", 200), "no such route"},
	} {
		var out strings.Builder
		ok := documentsAnswers(&out, "doc", paths, []string{c.answer})
		if ok != (c.want == "") || !strings.Contains(out.String(), c.want) {
			t.Errorf("%s: documented = %v, report %q; want %q", c.answer, ok, out.String(), c.want)
		}
	}
}
