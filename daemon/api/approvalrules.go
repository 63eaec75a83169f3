package api

import (
	"errors"
	"net/http"
	"slices"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/approvalrule"
	"github.com/codumentor/codumentor/daemon/store"
)

// userRules is what the operator lets users add rules within.
func (s *Server) userRules() []approvalrule.Rule {
	if s.d.UserRules == nil || s.d.ApprovalRules == nil {
		return nil
	}
	return s.d.UserRules()
}

func (s *Server) listRules(c *fiber.Ctx) error {
	var mine []store.UserRule
	if s.d.ApprovalRules != nil {
		var err error
		if mine, err = s.d.ApprovalRules.Rules(c.UserContext(), user(c).ID); err != nil {
			return err
		}
	}
	within := s.userRules()
	if mine == nil {
		mine = []store.UserRule{}
	}
	if within == nil {
		within = []approvalrule.Rule{}
	}
	return c.JSON(fiber.Map{"rules": mine, "within": within})
}

// addUserRule checks r against what the operator allows and stores it.
func (s *Server) addUserRule(c *fiber.Ctx, r approvalrule.Rule) (store.UserRule, error) {
	if err := r.Validate(); err != nil {
		return store.UserRule{}, badRequest("rule: %v", err)
	}
	within := s.userRules()
	if len(within) == 0 {
		return store.UserRule{}, apiError(http.StatusForbidden, "rules_not_allowed", "the operator lets users add no approval rules (sandbox.user_rules)")
	}
	if _, ok := approvalrule.Allowed(r, within); !ok {
		return store.UserRule{}, apiError(http.StatusForbidden, "rule_not_allowed", "%s is not within the rules the operator lets users add (see within in GET /api/v1/me/approval-rules)", r)
	}
	u, err := s.d.ApprovalRules.AddRule(c.UserContext(), user(c).ID, s.clientIP(c), r)
	if errors.Is(err, store.ErrTooManyRules) {
		return store.UserRule{}, apiError(http.StatusConflict, "too_many_rules", "%v", err)
	}
	return u, err
}

func (s *Server) addRule(c *fiber.Ctx) error {
	var r approvalrule.Rule
	if err := decode(c, &r); err != nil {
		return err
	}
	u, err := s.addUserRule(c, r)
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(u)
}

func (s *Server) deleteRule(c *fiber.Ctx) error {
	if s.d.ApprovalRules == nil {
		return errNotFound
	}
	err := s.d.ApprovalRules.DeleteRule(c.UserContext(), user(c).ID, s.clientIP(c), c.Params("rid"))
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}

// allowRule adds the rule the server proposed with a pending approval
// for its owner (the approval card's "always allow commands like this")
// and approves the command. The rule is the stored proposal, never one
// the client names.
func (s *Server) allowRule(c *fiber.Ctx) error {
	u, conv := user(c), conversation(c)
	a, err := s.d.Conversations.Approval(c.UserContext(), c.Params("aid"))
	if errors.Is(err, store.ErrNotFound) || err == nil && (a.User != u.ID || a.Conversation != conv.ID) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	if a.Status != agentcore.ApprovalPending {
		return apiError(http.StatusConflict, "already_decided", "the approval is %s", a.Status)
	}
	if len(a.ProposedRule) == 0 {
		return apiError(http.StatusConflict, "no_proposed_rule", "the server proposed no rule for this command; approve or deny it")
	}
	rule, err := s.addUserRule(c, approvalrule.Rule{Prefix: slices.Clone(a.ProposedRule)})
	if err != nil {
		return err
	}
	err = s.d.Engine.Decide(c.UserContext(), u.ID, conv.ID, a.ID, agentcore.DecisionApprove)
	switch {
	case errors.Is(err, agentcore.ErrNotFound):
		return errNotFound
	case errors.Is(err, agentcore.ErrApprovalDecided):
		// The rule stays: it applies from the next command on.
		return apiError(http.StatusConflict, "already_decided", "the rule was added, but %v", err)
	case err != nil:
		return err
	}
	if a, err = s.d.Conversations.Approval(c.UserContext(), a.ID); err != nil {
		return err
	}
	return c.JSON(fiber.Map{"approval": a, "rule": rule})
}
