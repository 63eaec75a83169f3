package daemon_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/store"
)

// approvalRulesConfig turns the ready read-only set on and lets users
// add rules for touch.
const approvalRulesConfig = "sandbox:\n  default_rules: true\n  approval_rules:\n    - command: \"sort -r\"\n  user_rules:\n    - prefix: [touch]\n      except: [--reference]\n"

// The must-show: rules approve commands through the real engine
// and sandbox without asking; the approval card's "always allow commands
// like this" adds the proposed rule, which approves the next one; a line
// no rule covers whole is asked; the audit log and the events name the
// rule of each auto-approved run.
func TestApprovalRulesEndToEnd(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, llm(t,
		shellCall("pwd && ls -a | sort -r"),
		llmtest.Step{Expect: "/workspace", ToolCalls: shellCall("touch made.txt").ToolCalls},
		llmtest.Step{Expect: "exit status 0", ToolCalls: shellCall("touch again.txt").ToolCalls},
		llmtest.Step{Expect: "exit status 0", ToolCalls: shellCall("ls; touch evil.txt").ToolCalls},
		llmtest.Step{Expect: "denied", Text: "done"},
	)+approvalRulesConfig)
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "work")

	// 1: pwd, ls and sort -r are each allowed; nothing is asked.
	evs := s.until(agentcore.EventApprovalDecided, 60*time.Second)
	first := decodeApproval(t, evs[len(evs)-1])
	for _, ev := range evs {
		if ev.Type == agentcore.EventApprovalPending {
			t.Fatalf("an auto-approved command was asked: %s", ev.Data)
		}
	}
	if first.DecidedBy != "approver" || first.Decision != agentcore.DecisionApprove ||
		first.Rule != `default: prefix "pwd"; default: prefix "ls"; operator: command "sort -r"` {
		t.Fatalf("first decision: %+v", first)
	}

	// 2: touch is asked, with the rule the card offers.
	evs = s.until(agentcore.EventApprovalPending, 60*time.Second)
	asked := decodeApproval(t, evs[len(evs)-1])
	if asked.Command != "touch made.txt" || !slices.Equal(asked.ProposedRule, []string{"touch"}) {
		t.Fatalf("asked: %+v", asked)
	}
	var added struct {
		Approval agentcore.Approval `json:"approval"`
		Rule     store.UserRule     `json:"rule"`
	}
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+asked.ID+"/rule", nil, &added)
	if added.Approval.Status != agentcore.ApprovalDecided || added.Approval.DecidedBy == "approver" || !slices.Equal(added.Rule.Rule.Prefix, []string{"touch"}) {
		t.Fatalf("allow rule: %+v", added)
	}
	a.must(http.StatusConflict, "POST", "/api/v1/conversations/"+conv+"/approvals/"+asked.ID+"/rule", nil, nil)

	// 3: the user's rule approves the next touch: after the card's
	// decision, the next one comes with no approval asked.
	evs = s.until(agentcore.EventApprovalDecided, 60*time.Second)
	if d := decodeApproval(t, evs[len(evs)-1]); d.ID != asked.ID {
		t.Fatalf("decided %+v before the card's approval %s", d, asked.ID)
	}
	evs = append(evs, s.until(agentcore.EventApprovalDecided, 60*time.Second)...)
	third := decodeApproval(t, evs[len(evs)-1])
	for _, ev := range evs {
		if ev.Type == agentcore.EventApprovalPending {
			t.Fatalf("the user's rule did not apply: %s", ev.Data)
		}
	}
	wantRule := `user ` + added.Rule.ID + `: prefix "touch" except "--reference"`
	if third.Command != "touch again.txt" || third.Rule != wantRule {
		t.Fatalf("third decision: %+v", third)
	}

	// 4: "ls; touch" is asked (;), and denied.
	evs = s.until(agentcore.EventApprovalPending, 60*time.Second)
	fourth := decodeApproval(t, evs[len(evs)-1])
	if fourth.Command != "ls; touch evil.txt" || fourth.ProposedRule != nil {
		t.Fatalf("fourth: %+v", fourth)
	}
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+fourth.ID, map[string]string{"decision": "deny"}, nil)
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	s.close()

	diff := string(a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/diff", nil, nil))
	if !strings.Contains(diff, "made.txt") || !strings.Contains(diff, "again.txt") || strings.Contains(diff, "evil.txt") {
		t.Fatalf("diff:\n%s", diff)
	}

	// The audit log has each decision, with its rule.
	var me struct{ ID string }
	a.must(http.StatusOK, "GET", "/api/v1/me", nil, &me)
	var page api.AuditPage
	p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/admin/audit?kind="+audit.KindApproval, nil, &page)
	rules := map[string]string{}
	for _, r := range page.Records {
		var d map[string]any
		json.Unmarshal(r.Data, &d)
		rule, _ := d["rule"].(string)
		rules[d["command"].(string)] = rule + "|" + d["decided_by"].(string)
	}
	if rules["pwd && ls -a | sort -r"] != first.Rule+"|approver" || rules["touch again.txt"] != wantRule+"|approver" ||
		rules["touch made.txt"] != "|"+me.ID || rules["ls; touch evil.txt"] != "|"+me.ID {
		t.Fatalf("audited approvals: %v", rules)
	}
	p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/admin/audit?kind="+audit.KindApprovalRule, nil, &page)
	if len(page.Records) != 1 || !strings.Contains(string(page.Records[0].Data), `"add"`) || page.Records[0].Source != "127.0.0.1" || page.Records[0].User != me.ID {
		t.Fatalf("audited rules: %+v", page.Records)
	}
}

// TestUserApprovalRules: users add, list and delete their own rules,
// only within sandbox.user_rules, and never see another user's.
func TestUserApprovalRules(t *testing.T) {
	in := newInstance(t, approvalRulesConfig)
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a, b := p.login("alice", pw), p.login("bob", pw)
	var r store.UserRule
	a.must(http.StatusCreated, "POST", "/api/v1/me/approval-rules", map[string]any{"prefix": []string{"touch", "-c"}}, &r)
	a.must(http.StatusCreated, "POST", "/api/v1/me/approval-rules", map[string]any{"command": "touch x"}, nil)
	for _, bad := range []struct {
		status int
		body   any
	}{
		{http.StatusForbidden, map[string]any{"prefix": []string{"rm"}}},
		{http.StatusForbidden, map[string]any{"prefix": []string{"touchy"}}},
		{http.StatusBadRequest, map[string]any{"command": "touch x; rm -rf /"}},
		{http.StatusBadRequest, map[string]any{"command": "touch", "prefix": []string{"touch"}}},
		{http.StatusBadRequest, map[string]any{}},
		{http.StatusBadRequest, `{"prefx":["touch"]}`},
	} {
		a.must(bad.status, "POST", "/api/v1/me/approval-rules", bad.body, nil)
	}
	var list struct {
		Rules  []store.UserRule `json:"rules"`
		Within []struct {
			Prefix []string `json:"prefix"`
		} `json:"within"`
	}
	a.must(http.StatusOK, "GET", "/api/v1/me/approval-rules", nil, &list)
	if len(list.Rules) != 2 || list.Rules[0].ID != r.ID || len(list.Within) != 1 || list.Within[0].Prefix[0] != "touch" {
		t.Fatalf("alice's rules: %+v", list)
	}
	b.must(http.StatusOK, "GET", "/api/v1/me/approval-rules", nil, &list)
	if len(list.Rules) != 0 {
		t.Fatalf("bob sees %+v", list.Rules)
	}
	b.must(http.StatusNotFound, "DELETE", "/api/v1/me/approval-rules/"+r.ID, nil, nil)
	a.must(http.StatusNoContent, "DELETE", "/api/v1/me/approval-rules/"+r.ID, nil, nil)
	a.must(http.StatusNotFound, "DELETE", "/api/v1/me/approval-rules/"+r.ID, nil, nil)
	a.must(http.StatusOK, "GET", "/api/v1/me/approval-rules", nil, &list)
	if len(list.Rules) != 1 || list.Rules[0].Rule.Command != "touch x" {
		t.Fatalf("after delete: %+v", list.Rules)
	}
}

func decodeApproval(t *testing.T, ev sseEvent) agentcore.Approval {
	t.Helper()
	var a agentcore.Approval
	if err := json.Unmarshal(eventData(t, ev), &a); err != nil {
		t.Fatal(err)
	}
	return a
}
