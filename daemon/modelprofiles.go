package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/llm"
)

// turnModel is the engine's Config.Model. A conversation created with a
// model profile talks to the profile's endpoint with its key, both read
// as each turn begins, and only while the endpoint is still one of
// llm.allowed_endpoints (the configuration may have changed since the
// profile was stored); otherwise the turn fails, never falling back to
// another endpoint. The key goes only into the client's Authorization
// header: not into the model's context, events, logs or a sandbox.
// Other conversations use the server's own model (nil).
func turnModel(convs *store.Conversations, sec *secrets.Store, live *atomic.Pointer[config.Config]) func(ctx context.Context, user, conversation string) (agentcore.LLM, error) {
	return func(ctx context.Context, user, conversation string) (agentcore.LLM, error) {
		c, err := convs.Get(ctx, user, conversation)
		if err != nil {
			return nil, err
		}
		name := c.ModelProfile
		if name == "" {
			return nil, nil
		}
		p, err := sec.Profile(ctx, user, name)
		if errors.Is(err, agentcore.ErrNotFound) {
			return nil, fmt.Errorf("this conversation's model profile %q no longer exists: create it again (PUT /api/v1/model-profiles/%s) or start a new conversation", name, name)
		}
		if err != nil {
			return nil, fmt.Errorf("this conversation's model profile %q cannot be read: %w", name, err)
		}
		cfg := live.Load()
		endpoint, err := cfg.LLM.AllowedEndpoint(p.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("this conversation's model profile %q: %w; change the profile's endpoint to an allowed one", name, err)
		}
		client, err := llm.New(llm.Config{BaseURL: endpoint, Model: p.Model, APIKey: p.APIKey, Timeout: cfg.LLM.Timeout.Std(), Sampling: cfg.LLM.Sampling.Over(p.Sampling), ContextWindow: cmp.Or(p.ContextWindow, cfg.LLM.ContextWindow)})
		if err != nil {
			return nil, err
		}
		var m agentcore.LLM = client
		if p.ToolCalls != "" {
			m = agentcore.WithToolCalls(m, p.ToolCalls)
		}
		if p.SystemPrompt != "" {
			// Parsed again: the template language may have changed since
			// the profile was stored.
			t, err := config.ParsePrompt("system_prompt", p.SystemPrompt, api.MaxProfilePrompt)
			if err != nil {
				return nil, fmt.Errorf("this conversation's model profile %q: %w; store the profile again with a valid system_prompt", name, err)
			}
			m = agentcore.WithSystemPrompt(m, t)
		}
		return m, nil
	}
}

// promptContext is the engine's Config.PromptContext: the repository's
// name and the commit a conversation's workspace shows, and the approval
// rules that run its owner's commands unasked (read at each model call,
// as the approver reads them). Its sandbox has no network (commands with
// an allow-list run in sandboxes of their own).
func promptContext(convs *store.Conversations, approver *ruleApprover, rs *repos.Service) func(ctx context.Context, user, conversation string) (agentcore.PromptContext, error) {
	return func(ctx context.Context, user, conversation string) (agentcore.PromptContext, error) {
		c, err := convs.Get(ctx, user, conversation)
		if err != nil {
			return agentcore.PromptContext{}, err
		}
		var pc agentcore.PromptContext
		// An investigation's commands are each asked (ruleApprover).
		if c.Mode != store.ModeHostReadOnly {
			if pc.AutoApproved, err = approver.autoApproved(ctx, user); err != nil {
				return agentcore.PromptContext{}, fmt.Errorf("the approval rules: %w", err)
			}
		}
		if c.Repository == "" {
			return pc, nil
		}
		r, err := rs.Get(ctx, c.Repository)
		if err != nil {
			return agentcore.PromptContext{}, fmt.Errorf("the conversation's repository: %w", err)
		}
		pc.Repository, pc.Commit = r.Name, c.BaseCommit
		return pc, nil
	}
}
