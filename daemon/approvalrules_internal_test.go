package daemon

import (
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/approvalrule"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

// TestRuleApproverAsks: what the rules match runs unasked only where the
// server can see what runs: never with a secret, invisible characters,
// in an investigation, or for another tool; a user's rule outside what
// the operator now allows no longer applies.
func TestRuleApproverAsks(t *testing.T) {
	ctx := t.Context()
	db := storetest.Open(t)
	convs, err := store.NewConversations(db)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := store.NewApprovalRules(db)
	if err != nil {
		t.Fatal(err)
	}
	work, _ := convs.Create(ctx, "alice", "work")
	inv, _ := convs.Create(ctx, "alice", "investigation")
	if err := convs.SetMode(ctx, "alice", inv.ID, store.ModeHostReadOnly); err != nil {
		t.Fatal(err)
	}
	sb := config.Sandbox{DefaultRules: true, UserRules: []approvalrule.Rule{{Prefix: []string{"touch"}}}}
	r := &ruleApprover{sandbox: func() config.Sandbox { return sb }, rules: rules, convs: convs}
	if _, err := rules.AddRule(ctx, "alice", "", approvalrule.Rule{Prefix: []string{"touch"}}); err != nil {
		t.Fatal(err)
	}
	shell := func(conv, cmd string) agentcore.Approval {
		a := agentcore.Approval{User: "alice", Conversation: conv, Tool: "shell", Command: cmd}
		if cmd == "ls \u200b" {
			a.Invisible = []agentcore.InvisibleChar{{Offset: 3}}
		}
		return a
	}
	for _, tc := range []struct {
		name string
		a    agentcore.Approval
		want agentcore.Decision
	}{
		{"a default rule", shell(work.ID, "ls -la"), agentcore.DecisionApprove},
		{"a user's rule", shell(work.ID, "touch x"), agentcore.DecisionApprove},
		{"a secret", shell(work.ID, "cat {{secret:TOKEN}}"), ""},
		{"invisible characters", shell(work.ID, "ls \u200b"), ""},
		{"an investigation", shell(inv.ID, "ls -la"), ""},
		{"another tool", agentcore.Approval{User: "alice", Conversation: work.ID, Tool: "delegate", Command: "ls"}, ""},
		{"the host network question", agentcore.Approval{User: "alice", Conversation: work.ID, Tool: "shell", Kind: agentcore.ApprovalHostNetwork, Command: "ls"}, ""},
	} {
		v, err := r.Review(ctx, tc.a)
		if err != nil || v.Decision != tc.want {
			t.Errorf("%s: %+v, %v; want %q", tc.name, v, err, tc.want)
		}
	}
	// The operator narrows user_rules: alice's touch rule stops.
	sb.UserRules = []approvalrule.Rule{{Prefix: []string{"go"}}}
	if v, _ := r.Review(ctx, shell(work.ID, "touch x")); v.Decision != "" || v.ProposedRule != nil {
		t.Errorf("touch after the operator narrowed user_rules: %+v", v)
	}
	if v, _ := r.Review(ctx, shell(work.ID, "go vet ./...")); v.Decision != "" || len(v.ProposedRule) != 2 {
		t.Errorf("go vet: %+v, want the proposal go vet", v)
	}
}
