package daemon

import (
	"context"
	"slices"
	"strings"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/approvalrule"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
)

// ruleApprover is the engine's Approver: it approves the shell commands
// that the operator's approval rules (sandbox.approval_rules and, with
// sandbox.default_rules, the ready read-only set) or the owner's own
// rules (within sandbox.user_rules) match, and proposes a rule for the
// others where the owner may add one.
type ruleApprover struct {
	sandbox func() config.Sandbox
	rules   *store.ApprovalRules
	convs   *store.Conversations
}

// source is a rule with where it comes from, as the audit log names it.
type source struct {
	rule approvalrule.Rule
	from string
}

func (r *ruleApprover) Review(ctx context.Context, a agentcore.Approval) (agentcore.Verdict, error) {
	// Only a workspace command; never one whose text hides characters
	// or names a secret (its value enters the command unseen).
	if a.Tool != "shell" || a.Kind != "" || len(a.Invisible) > 0 || strings.Contains(a.Command, "{{secret:") {
		return agentcore.Verdict{}, nil
	}
	// An investigation reads the host: each of its commands is asked.
	if host, err := r.convs.HostReadOnly(ctx, a.User, a.Conversation); err != nil || host {
		return agentcore.Verdict{}, err
	}
	sb := r.sandbox()
	var all []source
	if sb.DefaultRules {
		for _, x := range approvalrule.Defaults() {
			all = append(all, source{x, "default"})
		}
	}
	for _, x := range sb.ApprovalRules {
		all = append(all, source{x, "operator"})
	}
	if len(sb.UserRules) > 0 {
		mine, err := r.rules.Rules(ctx, a.User)
		if err != nil {
			return agentcore.Verdict{}, err
		}
		for _, u := range mine {
			// Checked again: the operator may have narrowed user_rules.
			if eff, ok := approvalrule.Allowed(u.Rule, sb.UserRules); ok {
				all = append(all, source{eff, "user " + u.ID})
			}
		}
	}
	rules := make([]approvalrule.Rule, len(all))
	for i, s := range all {
		rules[i] = s.rule
	}
	if used, err := approvalrule.Match(a.Command, rules); err == nil {
		var names []string
		for _, u := range used {
			i := slices.IndexFunc(all, func(s source) bool { return s.rule.String() == u.String() })
			if n := all[i].from + ": " + u.String(); !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		return agentcore.Verdict{Decision: agentcore.DecisionApprove, Rule: strings.Join(names, "; ")}, nil
	}
	if p, ok := approvalrule.Propose(a.Command); ok {
		if _, ok := approvalrule.Allowed(p, sb.UserRules); ok {
			return agentcore.Verdict{ProposedRule: p.Prefix}, nil
		}
	}
	return agentcore.Verdict{}, nil
}
