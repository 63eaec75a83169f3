package daemon_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// GET /api/v1/search speaks the query language: each form finds its
// file over HTTP; a query it cannot read is 400 naming the column; no
// hostile query (long, catastrophic regexps, FTS5 syntax, NUL, invalid
// UTF-8) is a 5xx or takes long.
func TestSearchQueryLanguageRoute(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("alice", pw, false)
	in.addUser("root", pw, true)
	p := in.start()
	repo, head := searchRepo(t)
	var added struct{ ID string }
	p.login("root", pw).must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "search", "url": "file://" + repo, "branch": "main"}, &added)
	ingestInto(t, in, added.ID, repo, head)

	alice := p.login("alice", pw)
	type results struct {
		Results []struct {
			Path      string
			StartLine int `json:"start_line"`
		}
	}
	for _, q := range []string{`sym:loadSettings`, `/func load\w+\(\)/`, `"reads it"`, `settings path:conf/ lang:go`, `path:load.go`,
		`settings -nothing`, `repo:` + added.ID[:6], `/LOADSETTINGS/ -lang:c`} {
		var res results
		alice.must(http.StatusOK, "GET", "/api/v1/search?q="+url.QueryEscape(q), nil, &res)
		if q == `/LOADSETTINGS/ -lang:c` { // upper case: case-sensitive, and the file says loadSettings
			if len(res.Results) != 0 {
				t.Errorf("%s: %+v", q, res.Results)
			}
			continue
		}
		if len(res.Results) != 1 || res.Results[0].Path != "conf/load.go" {
			t.Errorf("%s: %+v, want conf/load.go", q, res.Results)
		}
	}
	for _, tc := range []struct{ q, msg string }{
		{`load "settings`, "column 6: unterminated phrase"},
		{`x /a(b/`, "column 3: regular expression: missing closing )"},
		{`lang:cobol2`, "column 6: unknown language"},
		{"a\x00b", "column 2: control character"},
		{"ab \xff", "column 4: the query is not valid UTF-8"},
		{strings.Repeat("a", 2000), "longer than 1024 bytes"},
		{`-settings`, "column 1: only exclusions"},
	} {
		b := alice.must(http.StatusBadRequest, "GET", "/api/v1/search?q="+url.QueryEscape(tc.q), nil, nil)
		if !strings.Contains(string(b), tc.msg) || !strings.Contains(string(b), `"code":"bad_request"`) {
			t.Errorf("%q: %s, want %q", tc.q, b, tc.msg)
		}
	}
	hostile := []string{strings.Repeat("a", 10<<10), `/(a+)+$/`, `/(x+x+)+y/`, `/a{1000}{1000}/`, `/.*/`, `/./`, `NEAR(load settings)`, `*`, `"`, `^`,
		`path : load`, `{path body}: load`, `load*`, "load\x00", "\xc3\x28", `sym:'; DROP TABLE retrieval_chunks; --`, `"load" OR "x"`}
	for _, q := range hostile {
		start := time.Now()
		if len(q) > 4<<10 {
			// 10 KB do not fit in the server's request line: 431 before the
			// handler, or the connection reset while the client still
			// writes the rest of it (the server answered and closed).
			req, _ := http.NewRequest("GET", p.URL+"/api/v1/search?q="+url.QueryEscape(q), nil)
			req.Header.Set("Authorization", "Bearer "+alice.token)
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				res.Body.Close()
				if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
					t.Errorf("a 10 KB query: %s", res.Status)
				}
			} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
				t.Errorf("a 10 KB query: %v", err)
			}
			continue
		}
		status, b, _ := alice.do("GET", "/api/v1/search?q="+url.QueryEscape(q), nil)
		if status != http.StatusOK && status != http.StatusBadRequest {
			t.Errorf("%q: %d %s", q[:min(len(q), 40)], status, b)
		}
		if d := time.Since(start); d > time.Minute {
			t.Errorf("%q: %v", q[:min(len(q), 40)], d)
		}
	}
	var res results
	alice.must(http.StatusOK, "GET", "/api/v1/search?q=loadSettings", nil, &res)
	if len(res.Results) != 1 {
		t.Errorf("after the hostile queries: %+v", res.Results)
	}
}
