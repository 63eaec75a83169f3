package daemon_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/integrations/office/officetest"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// TestSandboxSettingsReachEverySandbox: the sandbox settings are set
// once (sandbox.seccomp: enforce, and the audit log's Launching hook) and
// every kind of sandbox the server starts runs under them: each is told
// to the hook (the audit log) with the enforce filter, for all seven of
// the server's kinds. A setting copied by hand somewhere, and dropped,
// shows here as a missing kind or a filter in log mode.
func TestSandboxSettingsReachEverySandbox(t *testing.T) {
	needSandbox(t)
	bin := agentCLI(t)
	bare := setupRepo(t, filepath.Join(t.TempDir(), "marker"), "")
	script := llm(t,
		// The repository conversation: its workspace's shell, then the
		// external agent with an allow-list (a sandbox of its own).
		shellCall("echo workspace"),
		toolCall("external_agent", map[string]string{"agent": "fake", "task": "write the file"}),
		llmtest.Step{Text: "Done."},
		// The investigation.
		shellCall("cat /etc/hostname"),
		llmtest.Step{Text: "Done."},
	)
	in := newInstance(t, script+`sandbox:
  seccomp: enforce
  shell_always_allow: true
plugins: [workspace_isolation, office, mcp, external_agent]
mcp:
  servers:
    - {name: marker, command: /bin/true}
external_agents:
  - name: fake
    command: `+bin+`
    egress_allowlist: [allowed.test]
investigation:
  enabled: true
  users: [alice]
`)
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)

	// turn sends content and answers its approvals (the host network's
	// no) until it ends.
	turn := func(conv, content string) {
		t.Helper()
		s := a.follow(conv, "")
		defer s.close()
		a.send(conv, content)
		deadline := time.Now().Add(120 * time.Second)
		for {
			ev := s.next(time.Until(deadline))
			switch ev.Type {
			case agentcore.EventApprovalPending:
				var ap agentcore.Approval
				if err := json.Unmarshal(eventData(t, ev), &ap); err != nil {
					t.Fatal(err)
				}
				decision := "approve"
				if ap.Kind == agentcore.ApprovalHostNetwork {
					decision = "deny"
				}
				a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+ap.ID, map[string]string{"decision": decision}, nil)
			case agentcore.EventTurnFinished:
				return
			}
		}
	}

	// A repository conversation: the checkout (git), the setup script
	// (setup), then its turn (workspace, external-agent; the MCP server
	// starts as the tools are listed) and an attachment (office).
	repo := addSetupRepo(t, admin, "demo", "file://"+bare, "main")
	var conv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
	turn(conv.ID, "go")
	if status, body := a.upload(conv.ID, "report.docx", officetest.GoodDOCX()); status != http.StatusCreated {
		t.Fatalf("upload: %d %s", status, body)
	}
	var inv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, &inv)
	turn(inv.ID, "look")

	enforce, err := seccomp.Load(seccomp.Enforce)
	if err != nil {
		t.Fatal(err)
	}
	var page api.AuditPage
	admin.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind="+audit.KindSandboxLaunch+"&limit=500", nil, &page)
	seen := map[string]int{}
	for _, r := range page.Records {
		var d struct {
			Profile, Seccomp, Launch string
			Filter                   string `json:"filter_sha256"`
		}
		if err := json.Unmarshal(r.Data, &d); err != nil {
			t.Fatal(err)
		}
		seen[d.Profile]++
		if d.Seccomp != string(seccomp.Enforce) || d.Filter != enforce.Digest {
			t.Errorf("a %s sandbox (%s) ran without the configured filter: seccomp %q, filter %s", d.Profile, d.Launch, d.Seccomp, d.Filter)
		}
	}
	for _, kind := range []string{"workspace", "setup", "external-agent", "office", "mcp", "host-readonly", "git"} {
		if seen[kind] == 0 {
			t.Errorf("no %s sandbox was told to the audit log (seen: %v)", kind, seen)
		}
	}
	if len(seen) != 7 {
		t.Errorf("sandbox kinds %v, want the seven", slices.Sorted(maps.Keys(seen)))
	}
}
