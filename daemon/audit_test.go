package daemon_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"gorm.io/gorm"
)

// Every kind of action the server audits lands in one verifiable chain,
// with who, from where and exactly what; the admin route filters it and
// no secret value is in it.
func TestAuditLog(t *testing.T) {
	needSandbox(t)
	const value = "audit-canary-5d0e77"
	const command = "test -n {{secret:TOKEN}} && echo audited"
	in := newInstance(t, llm(t,
		shellCall(command),
		llmtest.Step{Expect: "audited", Text: "done"},
	)+"trusted_proxies: [\"127.0.0.0/8\"]\n")
	alice := in.addUser("alice", pw, false)
	rootID := in.addUser("root", pw, true).ID
	p := in.start()

	if status, _, _ := p.loginStatus("alice", "wrong password", "X-Forwarded-For", "203.0.113.9"); status != http.StatusUnauthorized {
		t.Fatalf("bad login: %d", status)
	}
	if status, _, _ := p.loginStatus("alice", pw, "X-Forwarded-For", "203.0.113.10"); status != http.StatusOK {
		t.Fatalf("login: %d", status)
	}
	a := p.login("alice", pw)
	root := p.login("root", pw)
	root.must(http.StatusCreated, "POST", "/api/v1/admin/users", map[string]any{"name": "bob", "password": pw}, nil)
	var repo struct{ ID string }
	root.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "demo", "url": "file:///srv/git/demo.git"}, &repo)
	root.must(http.StatusNoContent, "DELETE", "/api/v1/repositories/"+repo.ID, nil, nil)
	root.must(http.StatusOK, "PUT", "/api/v1/admin/secrets/GIT_TOKEN", map[string]string{"value": value}, nil)
	a.must(http.StatusOK, "PUT", "/api/v1/secrets/TOKEN", map[string]string{"value": value}, nil)

	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "check the token")
	evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
	aid := approvalID(t, evs[len(evs)-1])
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+aid, map[string]string{"decision": "approve"}, nil)
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	s.close()
	a.must(http.StatusNoContent, "DELETE", "/api/v1/secrets/TOKEN", nil, nil)

	// Only admins read the log; bad parameters are 400s.
	a.must(http.StatusForbidden, "GET", "/api/v1/admin/audit", nil, nil)
	root.must(http.StatusBadRequest, "GET", "/api/v1/admin/audit?since=yesterday", nil, nil)
	root.must(http.StatusBadRequest, "GET", "/api/v1/admin/audit?limit=0", nil, nil)

	var page api.AuditPage
	body := root.must(http.StatusOK, "GET", "/api/v1/admin/audit", nil, &page)
	if strings.Contains(string(body), value) || strings.Contains(string(body), testSecret) || strings.Contains(string(body), pw) {
		t.Fatalf("the audit log holds a secret value or password:\n%s", body)
	}
	find := func(kind string, match func(d map[string]any, r audit.Record) bool) map[string]any {
		t.Helper()
		for _, r := range page.Records {
			var d map[string]any
			if err := json.Unmarshal(r.Data, &d); err != nil {
				t.Fatal(err)
			}
			if r.Kind == kind && match(d, r) {
				return d
			}
		}
		t.Fatalf("no matching %s record in\n%s", kind, body)
		return nil
	}
	find(audit.KindConfig, func(d map[string]any, _ audit.Record) bool {
		a := d["config"].(map[string]any)["auth"].(map[string]any)
		return a["jwt_secret"] == "***"
	})
	find(audit.KindLogin, func(d map[string]any, r audit.Record) bool {
		return d["name"] == "alice" && d["result"] == "refused" && r.Source == "203.0.113.9" && r.User == ""
	})
	find(audit.KindLogin, func(d map[string]any, r audit.Record) bool {
		return d["name"] == "alice" && d["result"] == "ok" && r.Source == "203.0.113.10" && r.User == alice.ID
	})
	find(audit.KindAdmin, func(d map[string]any, r audit.Record) bool {
		return d["action"] == "user_add" && d["name"] == "bob" && r.User == rootID
	})
	find(audit.KindAdmin, func(d map[string]any, r audit.Record) bool {
		return d["action"] == "repository_add" && d["repository"] == repo.ID && d["name"] == "demo" && d["url"] == "file:///srv/git/demo.git" && r.User == rootID
	})
	find(audit.KindAdmin, func(d map[string]any, r audit.Record) bool {
		return d["action"] == "repository_delete" && d["repository"] == repo.ID && d["name"] == "demo" && r.User == rootID
	})
	find(audit.KindSecretCreate, func(d map[string]any, r audit.Record) bool { return d["name"] == "TOKEN" && r.User == alice.ID })
	// An instance secret names the administrator who stored it.
	find(audit.KindSecretCreate, func(d map[string]any, r audit.Record) bool {
		return d["name"] == "GIT_TOKEN" && d["owner"] == "instance" && r.User == rootID
	})
	find(audit.KindApproval, func(d map[string]any, r audit.Record) bool {
		return d["id"] == aid && d["command"] == command && d["cwd"] == "/workspace" && d["decision"] == "approve" && r.User == alice.ID
	})
	argv := sha256.Sum256([]byte("sh\x00-c\x00" + command))
	find(audit.KindSandboxLaunch, func(d map[string]any, _ audit.Record) bool {
		return d["conversation"] == conv && d["argv_sha256"] == hex.EncodeToString(argv[:]) && d["profile"] == "workspace" &&
			d["seccomp"] == "log" && len(d["filter_sha256"].(string)) == 64
	})
	find(audit.KindSecretUse, func(d map[string]any, r audit.Record) bool { return d["name"] == "TOKEN" && r.User == alice.ID })
	find(audit.KindSecretDelete, func(d map[string]any, _ audit.Record) bool { return d["name"] == "TOKEN" })
	// A use is a substitution into a command, not the engine reading
	// every secret to redact it: one command, one use.
	var uses int
	for _, r := range page.Records {
		if r.Kind == audit.KindSecretUse {
			uses++
		}
	}
	if uses != 1 {
		t.Fatalf("%d secret_use records for one command", uses)
	}

	// Filters and pages.
	var logins api.AuditPage
	root.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=login&user=alice", nil, &logins)
	if len(logins.Records) != 2 { // the one above, and a.login's
		t.Fatalf("alice's logins: %+v", logins.Records)
	}
	var first api.AuditPage
	root.must(http.StatusOK, "GET", "/api/v1/admin/audit?limit=2", nil, &first)
	if len(first.Records) != 2 || first.Next != 2 {
		t.Fatalf("first page: %d records, next %d", len(first.Records), first.Next)
	}
	var rest api.AuditPage
	root.must(http.StatusOK, "GET", "/api/v1/admin/audit?after=2", nil, &rest)
	if len(rest.Records) != len(page.Records)-2 || rest.Records[0].Seq != 3 {
		t.Fatalf("after=2: %d records from %d", len(rest.Records), rest.Records[0].Seq)
	}
	var none api.AuditPage
	root.must(http.StatusOK, "GET", "/api/v1/admin/audit?since=2999-01-01T00:00:00Z", nil, &none)
	if len(none.Records) != 0 {
		t.Fatalf("records from the future: %+v", none.Records)
	}

	if n, err := audit.Verify(context.Background(), in.auditDB()); err != nil || n < int64(len(page.Records)) {
		t.Fatalf("Verify = %d, %v", n, err)
	}
}

// auditDB opens the instance's database with the audit log's keys of
// testSecret, as codumentorctl audit verify does.
func (in *instance) auditDB() *gorm.DB {
	in.t.Helper()
	db := in.openDB()
	if err := audit.UseKeys(db, audit.NewKeys(testSecret, nil)); err != nil {
		in.t.Fatal(err)
	}
	return db
}

var auditHeadLine = regexp.MustCompile(`audit head: head=(\d+:[0-9a-f]{64})`)

// The server writes the audit log's head to its log every
// audit.head_interval and at shutdown; the last one anchors the
// database: deleting the records after an earlier head is caught by it.
func TestAuditHeadLogged(t *testing.T) {
	in := newInstance(t, "plugins: []\naudit: {head_interval: 100ms}\n")
	in.addUser("alice", pw, false)
	p := in.start()
	p.login("alice", pw)
	// A head at the interval, taken after the login's record.
	var early audit.Head
	sandboxtest.Eventually(t, 60*time.Second, func() error {
		for _, m := range auditHeadLine.FindAllStringSubmatch(p.stderr.String(), -1) {
			if h, err := audit.ParseHead(m[1]); err == nil && h.Seq >= 3 { // user add, config, login
				early = h
			}
		}
		if early.Seq == 0 {
			return fmt.Errorf("no audit head with the login in the log:\n%s", p.stderr)
		}
		return nil
	})
	p.login("alice", pw)
	p.stop()
	out := p.stderr.String()
	i := strings.LastIndex(out, "shutting down")
	ms := auditHeadLine.FindAllStringSubmatchIndex(out, -1)
	if i < 0 || len(ms) == 0 || ms[len(ms)-1][0] < i {
		t.Fatalf("no audit head after shutting down:\n%s", out)
	}
	last, err := audit.ParseHead(out[ms[len(ms)-1][2]:ms[len(ms)-1][3]])
	if err != nil || last.Seq <= early.Seq {
		t.Fatalf("the head at shutdown %v (%v) is not after %v", last, err, early)
	}
	db := in.auditDB()
	if n, err := audit.Verify(context.Background(), db, early, last); err != nil || n != last.Seq {
		t.Fatalf("Verify with the logged heads = %d, %v", n, err)
	}
	if err := db.Exec("DELETE FROM audit_log WHERE seq > ?", early.Seq).Error; err != nil {
		t.Fatal(err)
	}
	var be *audit.BrokenError
	if _, err := audit.Verify(context.Background(), db, last); !errors.As(err, &be) || be.Seq != last.Seq || !strings.Contains(be.Problem, "newest records were deleted") {
		t.Fatalf("Verify with the shutdown head after deleting the newest records = %v", err)
	}
}
