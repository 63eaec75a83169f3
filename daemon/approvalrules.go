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
	all, err := r.sources(ctx, sb, a.User)
	if err != nil {
		return agentcore.Verdict{}, err
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

// sources are the rules that approve user's workspace commands.
func (r *ruleApprover) sources(ctx context.Context, sb config.Sandbox, user string) ([]source, error) {
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
		mine, err := r.rules.Rules(ctx, user)
		if err != nil {
			return nil, err
		}
		for _, u := range mine {
			// Checked again: the operator may have narrowed user_rules.
			if eff, ok := approvalrule.Allowed(u.Rule, sb.UserRules); ok {
				all = append(all, source{eff, "user " + u.ID})
			}
		}
	}
	return all, nil
}

// autoApproved describes, for the system prompt, the rules that approve
// user's workspace commands: "git status", "go test …", "rg … (not
// --pre)". None when the sandbox runs every command unasked.
func (r *ruleApprover) autoApproved(ctx context.Context, user string) ([]string, error) {
	sb := r.sandbox()
	if sb.ShellAlwaysAllow {
		return nil, nil
	}
	all, err := r.sources(ctx, sb, user)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range all {
		d := s.rule.Command
		if d == "" {
			d = strings.Join(s.rule.Prefix, " ") + " …"
		}
		if len(s.rule.Except) > 0 {
			d += " (not " + strings.Join(s.rule.Except, ", ") + ")"
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out, nil
}
