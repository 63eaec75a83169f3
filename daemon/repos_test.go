package daemon_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// gitCmd runs a test setup git command (trusted input) and returns its output.
func gitCmd(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Setup", "GIT_AUTHOR_EMAIL=setup@example.com", "GIT_COMMITTER_NAME=Setup", "GIT_COMMITTER_EMAIL=setup@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// readDiff reads GET …/workspace/diff whole and returns it with the
// digest its trailer carries.
func (c *client) readDiff(conv string) (string, string) {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.base+"/api/v1/conversations/"+conv+"/workspace/diff", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	observe("GET", "/api/v1/conversations/"+conv+"/workspace/diff", res.StatusCode)
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		c.t.Fatalf("diff: %d %v %s", res.StatusCode, err, b)
	}
	digest := res.Trailer.Get("X-Patch-SHA256")
	if digest == "" {
		digest = res.Header.Get("X-Patch-SHA256") // an empty workspace's
	}
	return string(b), digest
}

func waitJobDone(t testing.TB, c *client, id string) jobs.Job {
	t.Helper()
	var j jobs.Job
	sandboxtest.Eventually(t, 60*time.Second, func() error {
		j = jobs.Job{}
		c.must(http.StatusOK, "GET", "/api/v1/jobs/"+id, nil, &j)
		if j.Status != jobs.StatusSucceeded && j.Status != jobs.StatusFailed {
			return fmt.Errorf("job %s still %s", id, j.Status)
		}
		return nil
	})
	return j
}

// The must-show path through the real server: hostile inputs
// refused before any git runs; a file:// repository added and synced; a
// conversation on it; the scripted model edits a file; the user reads the
// diff and pushes with its digest; the remote's new branch has exactly
// that change, authored by the user; a stale digest is 409, main is 403.
func TestRepositoryPushEndToEnd(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("hello\n"), 0o644)
	os.WriteFile(filepath.Join(work, "keep.txt"), []byte("unchanged\n"), 0o644)
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "initial")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	base := gitCmd(t, bare, "rev-parse", "main")

	// Every host-side git the server starts goes through this wrapper.
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	calls := filepath.Join(dir, "git-calls")
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bin, "git"), []byte("#!/bin/sh\nprintf '%s\\n' \"$*\" >> "+calls+"\nexec "+real+" \"$@\"\n"), 0o755)

	// The model first searches the repository's code (search_code, scoped
	// to the conversation's repository), and its next request carries the
	// hit: the path and its lines.
	search := llmtest.Step{Text: "Looking.", ToolCalls: []agentcore.ToolCall{{Name: "search_code", Arguments: `{"query":"unchanged"}`}}}
	edit := llmtest.Step{Text: "Editing.", Expect: "keep.txt:1-1", ToolCalls: []agentcore.ToolCall{{Name: "edit_file", Arguments: `{"path":"README.md","old_string":"hello","new_string":"hello world"}`}}}
	more := llmtest.Step{Text: "More.", ToolCalls: []agentcore.ToolCall{{Name: "write_file", Arguments: `{"path":"NEW.md","content":"new\n"}`}}}
	big := llmtest.Step{Text: "Big.", ToolCalls: []agentcore.ToolCall{{Name: "write_file", Arguments: `{"path":"BIG.md","content":"` + strings.Repeat("x", 2000) + `"}`}}}
	done := llmtest.Step{Text: "Done."}
	in := newInstance(t, llm(t, search, edit, done, more, done, big, done)+"repositories:\n  max_push_bytes: 1000\n")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start("PATH=" + bin + ":" + os.Getenv("PATH"))
	admin, a := p.login("root", pw), p.login("alice", pw)

	url := "file://" + bare
	for _, h := range []map[string]string{
		{"url": "--upload-pack=touch /tmp/x"},
		{"url": "ext::sh -c touch% /tmp/x"},
		{"url": "-oProxyCommand=touch /tmp/x"},
		{"url": "ssh://-oProxyCommand=x/r"},
		{"url": url, "branch": "../x"},
		{"url": url, "branch": "-x"},
		{"url": url + "\x00"},
		{"url": url, "branch": "ma\x00in"},
	} {
		h["name"] = "hostile"
		admin.must(http.StatusBadRequest, "POST", "/api/v1/repositories", h, nil)
	}
	if b, err := os.ReadFile(calls); err == nil || len(b) > 0 {
		t.Fatalf("git ran for a refused repository: %q", b)
	}
	a.must(http.StatusForbidden, "POST", "/api/v1/repositories", map[string]string{"name": "demo", "url": url}, nil)

	var repo struct {
		ID, Head      string
		IndexedCommit string `json:"indexed_commit"`
	}
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "demo", "url": url, "branch": "main"}, &repo)
	admin.must(http.StatusConflict, "POST", "/api/v1/repositories", map[string]string{"name": "demo", "url": url}, nil)
	a.must(http.StatusConflict, "POST", "/api/v1/conversations", map[string]string{"repository": repo.ID}, nil)
	var sync struct{ Job jobs.Job }
	a.must(http.StatusForbidden, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, nil)
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	j := waitJobDone(t, admin, sync.Job.ID)
	// Fetched, then indexed: the job's last progress is the index's, in files.
	if j.Status != jobs.StatusSucceeded || j.Progress == nil || j.Progress.Unit != "files" || j.Progress.Done != j.Progress.Total || j.Progress.Total != 2 {
		t.Fatalf("sync job: %+v %+v", j, j.Progress)
	}
	a.must(http.StatusNotFound, "GET", "/api/v1/jobs/"+j.ID, nil, nil) // another user's job
	a.must(http.StatusOK, "GET", "/api/v1/repositories/"+repo.ID, nil, &repo)
	if repo.Head != base || repo.IndexedCommit != base {
		t.Fatalf("head %s, indexed %s, want %s", repo.Head, repo.IndexedCommit, base)
	}
	var found struct {
		Results []agentcore.Hit `json:"results"`
	}
	a.must(http.StatusOK, "GET", "/api/v1/search?q=unchanged&repository="+repo.ID, nil, &found)
	if len(found.Results) != 1 || found.Results[0].Path != "keep.txt" || found.Results[0].StartLine != 1 {
		t.Fatalf("search after the sync: %+v", found.Results)
	}
	a.must(http.StatusNotFound, "GET", "/api/v1/repositories/repo_000000000000000000000000", nil, nil)

	var conv struct {
		ID         string `json:"id"`
		Repository string `json:"repository"`
		BaseCommit string `json:"base_commit"`
	}
	a.must(http.StatusBadRequest, "POST", "/api/v1/conversations", map[string]string{"repository": "demo", "ref": "--output=/tmp/x"}, nil)
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": "demo"}, &conv)
	if conv.Repository != repo.ID || conv.BaseCommit != base {
		t.Fatalf("conversation: %+v", conv)
	}
	if got := a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=keep.txt", nil, nil); string(got) != "unchanged\n" {
		t.Fatalf("the workspace does not show the repository: %q", got)
	}
	s := a.follow(conv.ID, "")
	a.send(conv.ID, "say hello world")
	s.until(agentcore.EventTurnFinished, 60*time.Second)

	// The edit landed in the conversation's layer; the shared snapshot
	// and the mirror (0700) are as they were.
	snap := filepath.Join(in.dir, "repos", "snapshots", repo.ID+"-"+base)
	if b, err := os.ReadFile(filepath.Join(snap, "README.md")); err != nil || string(b) != "hello\n" {
		t.Fatalf("snapshot README.md = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(in.dir, "repos", repo.ID+".git")); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("mirror: %v %v", st, err)
	}

	diff, digest := a.readDiff(conv.ID)
	if !strings.Contains(diff, "-hello\n+hello world\n") || len(digest) != 64 {
		t.Fatalf("diff (digest %q):\n%s", digest, diff)
	}
	push := func(branch, digest string) map[string]string {
		return map[string]string{"branch": branch, "message": "Say hello world", "diff_sha256": digest}
	}
	path := "/api/v1/conversations/" + conv.ID + "/workspace/push"
	a.must(http.StatusForbidden, "POST", path, push("main", digest), nil)
	a.must(http.StatusBadRequest, "POST", path, push("../x", digest), nil)
	a.must(http.StatusConflict, "POST", path, push("codumentor/readme", strings.Repeat("0", 64)), nil)
	// A push the audit log cannot record is not made.
	db := in.openDB()
	lift := refuseInserts(t, db, "audit_log", "push", "audit log unwritable")
	if status, body, _ := a.do("POST", path, push("codumentor/readme", digest)); status != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"audit_unavailable"`) {
		t.Fatalf("push with the audit log unwritable: %d %s", status, body)
	}
	if out, err := exec.Command("git", "-C", bare, "rev-parse", "--verify", "-q", "codumentor/readme").CombinedOutput(); err == nil {
		t.Fatalf("the unrecorded push was made: %s", out)
	}
	lift()
	var res struct{ Branch, Commit, Remote string }
	a.must(http.StatusOK, "POST", path, push("codumentor/readme", digest), &res)
	if res.Branch != "codumentor/readme" || res.Remote != url || gitCmd(t, bare, "rev-parse", "codumentor/readme") != res.Commit {
		t.Fatalf("push answer %+v", res)
	}
	if got := gitCmd(t, bare, "log", "-1", "--format=%an <%ae>|%s|%P", res.Commit); got != "alice <alice@codumentor.invalid>|Say hello world|"+base {
		t.Fatalf("pushed commit: %s", got)
	}
	if got := gitCmd(t, bare, "diff", "--name-only", base, res.Commit); got != "README.md" {
		t.Fatalf("pushed change touches %q", got)
	}
	if got := gitCmd(t, bare, "show", res.Commit+":README.md"); got != "hello world" {
		t.Fatalf("pushed README.md: %q", got)
	}
	if gitCmd(t, bare, "rev-parse", "main") != base {
		t.Fatal("main moved")
	}
	var audited struct {
		Records []struct {
			Data struct{ Repository, Branch, Commit, Result string }
		}
	}
	admin.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=push", nil, &audited)
	// Recorded before it is made, and its outcome after.
	if n := len(audited.Records); n != 2 || audited.Records[0].Data != (struct{ Repository, Branch, Commit, Result string }{repo.ID, "codumentor/readme", res.Commit, "pushing"}) ||
		audited.Records[1].Data != (struct{ Repository, Branch, Commit, Result string }{repo.ID, "codumentor/readme", res.Commit, "ok"}) {
		t.Fatalf("audit records of kind push: %+v", audited.Records)
	}

	// The workspace changes after the diff was read: the old digest is stale.
	a.send(conv.ID, "add a file")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	a.must(http.StatusConflict, "POST", path, push("codumentor/more", digest), nil)
	// A diff over repositories.max_push_bytes.
	a.send(conv.ID, "add a big file")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	_, digest = a.readDiff(conv.ID)
	a.must(http.StatusRequestEntityTooLarge, "POST", path, push("codumentor/more", digest), nil)

	// A conversation without changes has nothing to push.
	var idle struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo.ID, "ref": "main"}, &idle)
	_, empty := a.readDiff(idle.ID)
	a.must(http.StatusBadRequest, "POST", "/api/v1/conversations/"+idle.ID+"/workspace/push", push("codumentor/none", empty), nil)

	var list struct {
		Repositories []json.RawMessage `json:"repositories"`
	}
	a.must(http.StatusOK, "GET", "/api/v1/repositories", nil, &list)
	if len(list.Repositories) != 1 {
		t.Fatalf("repositories: %s", list.Repositories)
	}
	admin.must(http.StatusNoContent, "DELETE", "/api/v1/repositories/"+repo.ID, nil, nil)
	a.must(http.StatusConflict, "POST", path, push("codumentor/more", digest), nil)
	// A deleted repository leaves the code index.
	a.must(http.StatusOK, "GET", "/api/v1/search?q=unchanged", nil, &found)
	if len(found.Results) != 0 {
		t.Fatalf("search after the repository was deleted: %+v", found.Results)
	}
}

// Through the server: a URL with a token is refused (400) and never
// listed; a push whose diff holds the user's secret is 409 secret_in_diff
// naming file and line, not the value, and pushes nothing; symlinks out
// of the tree need allow_outside_links.
func TestPushRefusalsEndToEnd(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("hello\n"), 0o644)
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "initial")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	const tok = "tok-9f8e7d6c5b4a"
	in := newInstance(t, llm(t, shellCall("printf 'a=1\\ntoken=%s\\n' {{secret:MYTOK}} > config.env"), llmtest.Step{Text: "Done."}))
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)

	status, body, _ := admin.do("POST", "/api/v1/repositories", map[string]string{"name": "tok", "url": "https://ghp_T0KEN@example.com/r.git"})
	if status != http.StatusBadRequest || !strings.Contains(string(body), "instance secret") {
		t.Fatalf("a URL with a token: %d %s", status, body)
	}
	var repo struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "demo", "url": "file://" + bare}, &repo)
	var sync struct{ Job jobs.Job }
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	if j := waitJobDone(t, admin, sync.Job.ID); j.Status != jobs.StatusSucceeded {
		t.Fatalf("sync: %+v", j)
	}
	if list := a.must(http.StatusOK, "GET", "/api/v1/repositories", nil, nil); strings.Contains(string(list), "T0KEN") {
		t.Fatalf("the list shows a token: %s", list)
	}
	a.must(http.StatusOK, "PUT", "/api/v1/secrets/MYTOK", map[string]string{"value": tok}, nil)
	var conv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo.ID}, &conv)
	s := a.follow(conv.ID, "")
	a.send(conv.ID, "write the config")
	evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)
	s.until(agentcore.EventTurnFinished, 60*time.Second)

	path := "/api/v1/conversations/" + conv.ID + "/workspace/push"
	push := func(digest string, allow bool) map[string]any {
		return map[string]any{"branch": "codumentor/cfg", "message": "config", "diff_sha256": digest, "allow_outside_links": allow}
	}
	_, digest := a.readDiff(conv.ID)
	status, body, _ = a.do("POST", path, push(digest, false))
	if status != http.StatusConflict || !strings.Contains(string(body), `"code":"secret_in_diff"`) || !strings.Contains(string(body), "config.env line 2") || !strings.Contains(string(body), "MYTOK") || strings.Contains(string(body), tok) {
		t.Fatalf("push of a secret: %d %s", status, body)
	}
	if refs := gitCmd(t, bare, "for-each-ref", "--format=%(refname)"); refs != "refs/heads/main" {
		t.Fatalf("the refused push reached the remote: %s", refs)
	}
	var audited struct {
		Records []struct{ Data map[string]any }
	}
	admin.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=push", nil, &audited)
	if len(audited.Records) != 1 || audited.Records[0].Data["result"] != "refused" || audited.Records[0].Data["reason"] != "secret_in_diff" {
		t.Fatalf("audit of the refused push: %+v", audited.Records)
	}

	// The secret gone, a link to /etc/passwd instead.
	upper := filepath.Join(in.dir, "workspaces", "layers", conv.ID, "upper")
	if err := os.Remove(filepath.Join(upper, "config.env")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(upper, "passwd")); err != nil {
		t.Fatal(err)
	}
	_, digest = a.readDiff(conv.ID)
	status, body, _ = a.do("POST", path, push(digest, false))
	if status != http.StatusConflict || !strings.Contains(string(body), `"code":"outside_links"`) || !strings.Contains(string(body), `passwd -\u003e /etc/passwd`) {
		t.Fatalf("push of an outside link: %d %s", status, body)
	}
	var res struct{ Commit string }
	a.must(http.StatusOK, "POST", path, push(digest, true), &res)
	if got := gitCmd(t, bare, "cat-file", "-p", res.Commit+":passwd"); got != "/etc/passwd" {
		t.Fatalf("the pushed link: %q", got)
	}
}
