package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// TestAuditLogGaps: model profiles (name and endpoint, never the key),
// repository syncs (who started one, the head it fetched or its
// failure) and logins the rate limits refuse (aggregated: a flood is one
// record with a count) are in the audit log, through the real server.
func TestAuditLogGaps(t *testing.T) {
	needSandbox(t)
	const key = "sk-audit-CANARY-7c1e"
	const endpoint = "http://127.0.0.1:9/v1"
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("hello\n"), 0o644)
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "initial")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	head := gitCmd(t, bare, "rev-parse", "main")

	in := newInstance(t, "plugins: []\ntrusted_proxies: [\"127.0.0.0/8\"]\nllm:\n  allowed_endpoints: [\""+endpoint+"\"]\n")
	alice := in.addUser("alice", pw, false)
	rootID := in.addUser("root", pw, true).ID
	p := in.start()
	a, root := p.login("alice", pw), p.login("root", pw)

	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": endpoint, "model": "m", "api_key": key}, nil)
	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": endpoint, "model": "m2"}, nil)
	a.must(http.StatusNoContent, "DELETE", "/api/v1/model-profiles/work", nil, nil)

	var repo, broken struct{ ID string }
	root.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "demo", "url": "file://" + bare, "branch": "main"}, &repo)
	root.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "gone", "url": "file://" + filepath.Join(dir, "missing.git"), "branch": "main"}, &broken)
	var sync, failing struct{ Job jobs.Job }
	root.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	if j := waitJobDone(t, root, sync.Job.ID); j.Status != jobs.StatusSucceeded {
		t.Fatalf("sync: %+v", j)
	}
	root.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+broken.ID+"/sync", nil, &failing)

	// A flood of logins for one name: 10 refused with a password check,
	// then refused by the limiter unchecked.
	var limited int
	for range 40 {
		status, _, _ := p.loginStatus("mallory", "wrong password", "X-Forwarded-For", "203.0.113.5")
		if status == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited < 20 {
		t.Fatalf("%d of 40 logins rate-limited", limited)
	}

	records := func(kind string) (out []map[string]any, users []string) {
		t.Helper()
		var page api.AuditPage
		body := root.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind="+kind, nil, &page)
		if strings.Contains(string(body), key) {
			t.Fatalf("the audit log holds an API key:\n%s", body)
		}
		for _, r := range page.Records {
			var d map[string]any
			if err := json.Unmarshal(r.Data, &d); err != nil {
				t.Fatal(err)
			}
			d["source"] = r.Source
			out, users = append(out, d), append(users, r.User)
		}
		return out, users
	}
	puts, users := records("model_profile_put")
	if len(puts) != 2 || puts[0]["name"] != "work" || puts[0]["endpoint"] != endpoint || puts[0]["replaced"] != false ||
		puts[1]["replaced"] != true || users[0] != alice.ID || users[1] != alice.ID {
		t.Errorf("model_profile_put records: %v by %v", puts, users)
	}
	if dels, users := records("model_profile_delete"); len(dels) != 1 || dels[0]["name"] != "work" || dels[0]["endpoint"] != endpoint || users[0] != alice.ID {
		t.Errorf("model_profile_delete records: %v by %v", dels, users)
	}

	// The failed sync's first attempt is recorded (the job retries).
	var syncs []map[string]any
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		if syncs, users = records("repository_sync"); len(syncs) < 4 {
			return fmt.Errorf("%d repository_sync records, want 4: %v", len(syncs), syncs)
		}
		return nil
	})
	var got []string
	for i, d := range syncs {
		if users[i] != rootID {
			t.Errorf("sync record %v by %q, want root", d, users[i])
		}
		got = append(got, d["name"].(string)+":"+d["result"].(string))
		switch {
		case d["result"] == "fetched" && d["head"] != head:
			t.Errorf("fetched head %v, want %s", d["head"], head)
		case d["result"] == "failed" && (d["error"] == "" || d["job"] != failing.Job.ID):
			t.Errorf("failed sync record: %v", d)
		}
	}
	if len(got) < 4 || strings.Join(got[:4], ",") != "demo:started,demo:fetched,gone:started,gone:failed" {
		t.Errorf("repository_sync records: %v", got)
	}

	lim, _ := records("login_rate_limited")
	if len(lim) != 1 || lim[0]["name"] != "mallory" || lim[0]["limit"] != "name" || lim[0]["count"] != 1.0 || lim[0]["source"] != "203.0.113.5" {
		t.Errorf("login_rate_limited records after a flood of %d: %v", limited, lim)
	}
}
