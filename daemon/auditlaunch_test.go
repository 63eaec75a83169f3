package daemon_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/integrations/mcp"
	"github.com/codumentor/codumentor/integrations/office/officetest"
)

// TestSandboxLaunchesAudited: every sandbox the server starts for its
// integrations is in the audit log before it runs, for the conversation
// it serves: a repository conversation's checkout (git), an
// attachment's worker (office), an MCP server (for none). With the log
// unwritable for launches, they are refused and nothing runs.
func TestSandboxLaunchesAudited(t *testing.T) {
	needSandbox(t)
	nm := mcpNodeModules(t)
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("one\n"), 0o644)
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "one")
	first := gitCmd(t, work, "rev-parse", "HEAD")
	os.WriteFile(filepath.Join(work, "README.md"), []byte("two\n"), 0o644)
	gitCmd(t, work, "commit", "-q", "-am", "two")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)

	in := newInstance(t, llm(t, llmtest.Step{Text: "Done."})+`plugins: [workspace_isolation, office, mcp]
mcp:
  servers:
    - name: everything
      command: node
      args: [`+nm+`/@modelcontextprotocol/server-everything/dist/index.js, stdio]
      read_only: [`+nm+`]
`)
	in.addUser("root", pw, true)
	alice := in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)

	var repo struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "demo", "url": "file://" + bare, "branch": "main"}, &repo)
	var sync struct{ Job struct{ ID string } }
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	waitJobDone(t, admin, sync.Job.ID)
	var conv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo.ID}, &conv)
	if status, body := a.upload(conv.ID, "report.docx", officetest.GoodDOCX()); status != http.StatusCreated {
		t.Fatalf("upload: %d %s", status, body)
	}
	// A turn lists the tools: the MCP server starts.
	plain := a.newConversation()
	s := a.follow(plain, "")
	a.send(plain, "hello")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	s.close()

	launches := func() map[string][]map[string]any {
		t.Helper()
		var page api.AuditPage
		admin.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind="+audit.KindSandboxLaunch, nil, &page)
		by := map[string][]map[string]any{}
		for _, r := range page.Records {
			var d map[string]any
			if err := json.Unmarshal(r.Data, &d); err != nil {
				t.Fatal(err)
			}
			d["user"] = r.User
			key := d["profile"].(string)
			if key == "git" && d["conversation"] == "" {
				key = "git server" // the sync's local remote, served in a sandbox
			}
			by[key] = append(by[key], d)
		}
		return by
	}
	got := launches()
	for profile, want := range map[string]map[string]any{
		"git":        {"conversation": conv.ID, "user": alice.ID, "cwd": "/out"},
		"git server": {"conversation": "", "user": "server"},
		"office":     {"conversation": conv.ID, "user": alice.ID, "cwd": "/input"},
		"mcp":        {"conversation": "", "user": "server"},
	} {
		if len(got[profile]) != 1 {
			t.Errorf("%d %s launches recorded: %v", len(got[profile]), profile, got[profile])
			continue
		}
		d := got[profile][0]
		want["launch"], want["seccomp"] = "run", "log"
		for k, v := range want {
			if d[k] != v {
				t.Errorf("%s launch: %s = %v, want %v (%v)", profile, k, d[k], v, d)
			}
		}
		if len(d["argv_sha256"].(string)) != 64 || len(d["filter_sha256"].(string)) != 64 {
			t.Errorf("%s launch: digests %v", profile, d)
		}
	}

	// The log refuses launches: nothing starts.
	db := in.openDB()
	lift := refuseInserts(t, db, "audit_log", "sandbox_launch", "audit log unwritable")
	if status, body := a.upload(conv.ID, "again.docx", officetest.GoodDOCX()); status != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"audit_unavailable"`) {
		t.Fatalf("upload with the log unwritable: %d %s", status, body)
	}
	if status, _, _ := a.do("POST", "/api/v1/conversations", map[string]string{"repository": repo.ID, "ref": first}); status != http.StatusServiceUnavailable {
		t.Fatalf("checkout with the log unwritable: %d", status)
	}
	// No snapshot of the refused checkout (sandboxkit's TestLaunching
	// shows with a marker that a refused start runs nothing).
	tmps, _ := filepath.Glob(filepath.Join(in.dir, "repos", "snapshots", "*"+first))
	if len(tmps) != 0 {
		t.Errorf("the refused checkout ran: %v", tmps)
	}
	var list struct{ Attachments []attachment }
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/attachments", nil, &list)
	if len(list.Attachments) != 1 {
		t.Errorf("attachments: %+v", list.Attachments)
	}
	lift()
	if got := launches(); len(got["git"]) != 1 || len(got["office"]) != 1 {
		t.Errorf("refused launches recorded: %v", got)
	}
	if !strings.Contains(p.stderr.String(), "audit log unwritable") {
		t.Errorf("the log does not say why: %s", p.stderr)
	}
}

// TestMCPLaunchUnrecorded: an MCP server whose launch cannot be recorded
// does not start, and says why.
func TestMCPLaunchUnrecorded(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, llm(t, llmtest.Step{Text: "Done."})+`plugins: [mcp]
mcp:
  servers:
    - {name: marker, command: /bin/true}
`)
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	db := in.openDB()
	refuseInserts(t, db, "audit_log", "sandbox_launch", "audit log unwritable")
	conv := admin.newConversation()
	s := admin.follow(conv, "")
	admin.send(conv, "go")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	s.close()
	var st struct{ Servers []mcp.Status }
	admin.must(http.StatusOK, "GET", "/api/v1/admin/mcp", nil, &st)
	if len(st.Servers) != 1 || st.Servers[0].State != mcp.StateStopped || st.Servers[0].Started != (time.Time{}) || !strings.Contains(st.Servers[0].LastError, "launch refused") {
		t.Errorf("admin/mcp: %+v", st)
	}
}
