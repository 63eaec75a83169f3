package daemon_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/jobs"
)

// A repository of two branches through the real server: both are
// synced and indexed; GET /api/v1/search finds the default branch
// without branch: and the other one with it, each hit naming its
// branch; hostile branch: values are 400s; search_code in a
// conversation started on release-1.x finds release-1.x's file by
// default, and once the branch moved on, says the index does not hold
// the conversation's commit and searches the branch as indexed.
func TestSearchBranches(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("feature.go", "package demo\n\n// mainlineOnly is on main.\nfunc mainlineOnly() { featureSwitch() }\n")
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "main")
	gitCmd(t, work, "checkout", "-q", "-b", "release-1.x")
	write("feature.go", "package demo\n\n// releaseOnly is on release-1.x.\nfunc releaseOnly() { featureSwitch() }\n")
	gitCmd(t, work, "commit", "-q", "-am", "release")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	release := gitCmd(t, bare, "rev-parse", "release-1.x")

	search := func(query string) llmtest.Step {
		return llmtest.Step{Text: "Looking.", ToolCalls: []agentcore.ToolCall{{Name: "search_code", Arguments: `{"query":"` + query + `"}`}}}
	}
	done := llmtest.Step{Text: "Done."}
	in := newInstance(t, llm(t, search("featureSwitch"), done, search("featureSwitch"), done))
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)

	for _, bad := range []any{
		[]string{"main", "../x"}, []string{"main", "main"}, []string{"main", "ma\x00in"},
		[]string{"main", strings.Repeat("b", 10<<10)}, make([]string, 17),
	} {
		admin.must(http.StatusBadRequest, "POST", "/api/v1/repositories", map[string]any{"name": "hostile", "url": "file://" + bare, "branches": bad}, nil)
	}
	var repo struct {
		ID       string
		Branches []string
		Indexed  map[string]string `json:"indexed_commits"`
	}
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]any{"name": "demo", "url": "file://" + bare, "branches": []string{"main", "release-1.x"}}, &repo)
	if len(repo.Branches) != 2 {
		t.Fatalf("created %+v", repo)
	}
	sync := func() {
		t.Helper()
		var s struct{ Job jobs.Job }
		admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &s)
		if j := waitJobDone(t, admin, s.Job.ID); j.Status != jobs.StatusSucceeded {
			t.Fatalf("sync: %+v", j)
		}
	}
	sync()
	a.must(http.StatusOK, "GET", "/api/v1/repositories/"+repo.ID, nil, &repo)
	if repo.Indexed["release-1.x"] != release {
		t.Fatalf("after the sync: %+v", repo)
	}

	hits := func(query string) []agentcore.Hit {
		t.Helper()
		var res struct{ Results []agentcore.Hit }
		a.must(http.StatusOK, "GET", "/api/v1/search?q="+url.QueryEscape(query)+"&repository="+repo.ID, nil, &res)
		return res.Results
	}
	if hs := hits("featureSwitch"); len(hs) != 1 || hs[0].Branch != "main" || !strings.Contains(hs[0].Snippet, "mainlineOnly") {
		t.Errorf("default search: %+v", hs)
	}
	if hs := hits("featureSwitch branch:release-1.x"); len(hs) != 1 || hs[0].Branch != "release-1.x" || !strings.Contains(hs[0].Snippet, "releaseOnly") {
		t.Errorf("branch:release-1.x: %+v", hs)
	}
	for _, q := range []string{`x branch:"; DROP`, `x branch:"; DROP TABLE repositories; --"`, "x branch:ma\x00in", "x branch:" + strings.Repeat("a", 2000), "branch:main", "x -branch:../x"} {
		a.must(http.StatusBadRequest, "GET", "/api/v1/search?q="+url.QueryEscape(q), nil, nil)
	}
	// 10 KB: past the server's request line limit already (431).
	if status, _, _ := a.do("GET", "/api/v1/search?q="+url.QueryEscape("x branch:"+strings.Repeat("a", 10<<10)), nil); status < 400 || status >= 500 {
		t.Errorf("a 10 KB branch: query: %d, want a 4xx", status)
	}

	var conv struct {
		ID         string
		BaseCommit string `json:"base_commit"`
	}
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo.ID, "ref": "release-1.x"}, &conv)
	if conv.BaseCommit != release {
		t.Fatalf("conversation on %s, want %s", conv.BaseCommit, release)
	}
	var last string // the last event read
	toolOutput := func() string {
		t.Helper()
		s := a.follow(conv.ID, last)
		var out string
		for _, ev := range s.until(agentcore.EventTurnFinished, 60*time.Second) {
			last = ev.ID
			if ev.Type == agentcore.EventToolOutput {
				var o struct{ Data agentcore.ToolOutput }
				if err := json.Unmarshal(ev.Data, &o); err != nil {
					t.Fatal(err)
				}
				out = o.Data.Output
			}
		}
		return out
	}
	a.send(conv.ID, "where is the switch?")
	if out := toolOutput(); !strings.Contains(out, "feature.go:") || !strings.Contains(out, "releaseOnly") || strings.Contains(out, "mainlineOnly") || strings.Contains(out, "Note:") {
		t.Errorf("search_code on release-1.x:\n%s", out)
	}

	// release-1.x moves on: the conversation's commit is no longer the
	// one indexed.
	write("feature.go", "package demo\n\n// releaseOnly is on release-1.x, patched.\nfunc releaseOnly() { featureSwitch() }\n")
	gitCmd(t, work, "commit", "-q", "-am", "patch")
	gitCmd(t, work, "push", "-q", bare, "release-1.x")
	sync()
	a.send(conv.ID, "and now?")
	out := toolOutput()
	if !strings.Contains(out, "Note: the index does not hold this conversation's commit "+release[:12]) || !strings.Contains(out, "branch release-1.x") || !strings.Contains(out, "patched") {
		t.Errorf("search_code after release-1.x moved on:\n%s", out)
	}
}
