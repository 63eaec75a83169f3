package api

import (
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/integrations/llm"
)

// ModelProfile is a model profile as the API shows it: its API key is
// write-only, so only whether it has one.
type ModelProfile struct {
	Name      string `json:"name"`
	Endpoint  string `json:"endpoint"`
	Model     string `json:"model"`
	HasAPIKey bool   `json:"has_api_key"`
	// Sampling are the profile's own settings (temperature, top_p,
	// max_tokens, stop, extra_body); unset ones are the server's.
	llm.Sampling
	// ToolCalls is the profile's own tool call mode (native, text or
	// auto); empty: the server's llm.tool_calls.
	ToolCalls agentcore.ToolCallMode `json:"tool_calls,omitempty"`
	// ContextWindow is the profile's own context length in tokens; 0:
	// the server's (llm.context_window, or what the endpoint reports).
	ContextWindow int `json:"context_window,omitempty"`
	// SystemPrompt is the profile's own system prompt template; empty:
	// the server's.
	SystemPrompt string    `json:"system_prompt,omitempty"`
	Updated      time.Time `json:"updated"`
	// Unreadable: stored under a jwt_secret the server no longer has, so
	// neither its endpoint nor its key can be read; store it again.
	Unreadable bool `json:"unreadable,omitempty"`
}

func profileView(m secrets.Meta, p secrets.ModelProfile) ModelProfile {
	return ModelProfile{Name: m.Name, Endpoint: p.BaseURL, Model: p.Model, HasAPIKey: p.APIKey != "", Sampling: p.Sampling, ToolCalls: p.ToolCalls, ContextWindow: p.ContextWindow, SystemPrompt: p.SystemPrompt, Updated: m.Updated}
}

// maxModelName bounds a profile's model name, in bytes.
const maxModelName = 256

// MaxProfilePrompt bounds a profile's system prompt template, in bytes:
// the whole profile is one secret (secrets.MaxValueSize).
const MaxProfilePrompt = 32 << 10

// llmConfig is the current llm configuration (nil Deps.LLM: none).
func (s *Server) llmConfig() config.LLM {
	if s.d.LLM == nil {
		return config.LLM{}
	}
	return s.d.LLM()
}

func (s *Server) listModelProfiles(c *fiber.Ctx) error {
	ctx, uid := c.UserContext(), user(c).ID
	metas, err := s.d.Secrets.Profiles(ctx, uid)
	if err != nil {
		return err
	}
	out := make([]ModelProfile, 0, len(metas))
	for _, m := range metas {
		p, err := s.d.Secrets.Profile(ctx, uid, m.Name)
		if errors.Is(err, agentcore.ErrNotFound) {
			continue // deleted meanwhile
		}
		if errors.Is(err, secrets.ErrUnknownKey) {
			// One profile under a dropped secret must not hide the others.
			s.log.Warn("model profile stored under a jwt_secret that is no longer configured; its owner must store it again", "user", uid, "profile", m.Name)
			out = append(out, ModelProfile{Name: m.Name, Updated: m.Updated, Unreadable: true})
			continue
		}
		if err != nil {
			return err
		}
		out = append(out, profileView(m, p))
	}
	return c.JSON(fiber.Map{"model_profiles": out, "allowed_endpoints": s.llmConfig().Endpoints()})
}

// modelProfile reads the caller's profile named in the path: a name that
// cannot exist is as absent as another user's profile (404).
func (s *Server) modelProfile(c *fiber.Ctx) (secrets.Meta, secrets.ModelProfile, error) {
	ctx, uid, name := c.UserContext(), user(c).ID, c.Params("name")
	m, err := s.d.Secrets.ProfileMeta(ctx, uid, name)
	if err == nil {
		var p secrets.ModelProfile
		if p, err = s.d.Secrets.Profile(ctx, uid, name); err == nil {
			return m, p, nil
		}
	}
	if errors.Is(err, agentcore.ErrNotFound) || errors.Is(err, secrets.ErrBadName) {
		return m, secrets.ModelProfile{}, errNotFound
	}
	return m, secrets.ModelProfile{}, err
}

func (s *Server) getModelProfile(c *fiber.Ctx) error {
	m, p, err := s.modelProfile(c)
	if errors.Is(err, secrets.ErrUnknownKey) {
		return c.JSON(ModelProfile{Name: m.Name, Updated: m.Updated, Unreadable: true})
	}
	if err != nil {
		return err
	}
	return c.JSON(profileView(m, p))
}

// putModelProfile creates or replaces a profile. Its endpoint must be one
// of llm.allowed_endpoints: the server connects where its operator's
// configuration says, never to a URL a user typed. Without api_key a
// replaced profile keeps its key, for the same endpoint only.
func (s *Server) putModelProfile(c *fiber.Ctx) error {
	var req struct {
		Endpoint string `json:"endpoint"`
		Model    string `json:"model"`
		APIKey   string `json:"api_key"`
		llm.Sampling
		ToolCalls     string `json:"tool_calls"`
		ContextWindow int    `json:"context_window"`
		SystemPrompt  string `json:"system_prompt"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	ctx, uid, name := c.UserContext(), user(c).ID, c.Params("name")
	req.Model = strings.TrimSpace(req.Model)
	switch {
	case req.Endpoint == "":
		return badRequest("endpoint is required: one of the server's allowed endpoints (GET /api/v1/model-profiles lists them)")
	case req.Model == "":
		return badRequest("model is required: the model's name at the endpoint")
	case len(req.Model) > maxModelName || !utf8.ValidString(req.Model) || strings.ContainsFunc(req.Model, unicode.IsControl):
		return badRequest("model must be at most %d bytes of text without control characters", maxModelName)
	}
	if req.ToolCalls != "" {
		if _, err := agentcore.ParseToolCallMode(req.ToolCalls); err != nil {
			return badRequest("tool_calls: %v", err)
		}
	}
	if req.SystemPrompt != "" {
		if _, err := config.ParsePrompt("system_prompt", req.SystemPrompt, MaxProfilePrompt); err != nil {
			return badRequest("%v", err)
		}
	}
	endpoint, err := s.llmConfig().AllowedEndpoint(req.Endpoint)
	if errors.Is(err, config.ErrEndpointNotAllowed) {
		return apiError(http.StatusBadRequest, "endpoint_not_allowed", "%v: the server connects only to the model endpoints its operator lists; ask them to add it, or pick one of those (GET /api/v1/model-profiles lists them)", err)
	}
	if err != nil {
		return badRequest("%v", err)
	}
	key := req.APIKey
	if key == "" {
		old, err := s.d.Secrets.Profile(ctx, uid, name)
		switch {
		case errors.Is(err, secrets.ErrBadName):
			return badRequest("%v", err)
		case errors.Is(err, secrets.ErrUnknownKey):
			return badRequest("model profile %q is stored under a key the server no longer has, so its API key cannot be kept: send api_key", name)
		case err != nil && !errors.Is(err, agentcore.ErrNotFound):
			return err
		case old.APIKey != "" && old.BaseURL != endpoint:
			// The key was given for the old endpoint: it goes to another
			// one only if its owner sends it again.
			return badRequest("model profile %q's API key was given for %s: send api_key to use it with another endpoint", name, old.BaseURL)
		}
		key = old.APIKey
	}
	// The client the turns will build, built now: a key with whitespace
	// or a "Bearer " prefix is refused here rather than at the turn.
	if _, err := llm.New(llm.Config{BaseURL: endpoint, Model: req.Model, APIKey: key, Sampling: req.Sampling, ContextWindow: req.ContextWindow}); err != nil {
		return badRequest("%s", profileKeys.Replace(err.Error()))
	}
	p := secrets.ModelProfile{BaseURL: endpoint, Model: req.Model, APIKey: key, Sampling: req.Sampling, ToolCalls: agentcore.ToolCallMode(req.ToolCalls), ContextWindow: req.ContextWindow, SystemPrompt: req.SystemPrompt}
	m, err := s.d.Secrets.PutProfile(ctx, uid, name, p)
	if errors.Is(err, secrets.ErrBadName) || errors.Is(err, secrets.ErrBadValue) {
		return badRequest("%v", err)
	}
	if err != nil {
		return err
	}
	return c.JSON(profileView(m, p))
}

// profileKeys names a profile's fields in llm.New's errors, which name
// the server's configuration keys.
var profileKeys = strings.NewReplacer("llm.api_key", "api_key", "llm.temperature", "temperature", "llm.top_p", "top_p", "llm.max_tokens", "max_tokens", "llm.stop", "stop", "llm.extra_body", "extra_body", "llm.context_window", "context_window")

func (s *Server) deleteModelProfile(c *fiber.Ctx) error {
	err := s.d.Secrets.DeleteProfile(c.UserContext(), user(c).ID, c.Params("name"))
	if errors.Is(err, agentcore.ErrNotFound) || errors.Is(err, secrets.ErrBadName) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}

// checkModelProfile answers a conversation's model_profile that the
// caller has not got, or whose endpoint is no longer allowed, with 400.
func (s *Server) checkModelProfile(c *fiber.Ctx, name string) error {
	p, err := s.d.Secrets.Profile(c.UserContext(), user(c).ID, name)
	if errors.Is(err, agentcore.ErrNotFound) || errors.Is(err, secrets.ErrBadName) {
		return badRequest("model_profile %q: you have no such model profile (PUT /api/v1/model-profiles/{name} creates one)", name)
	}
	if errors.Is(err, secrets.ErrUnknownKey) {
		return badRequest("model_profile %q is stored under a key the server no longer has: store it again with its api_key", name)
	}
	if err != nil {
		return err
	}
	if _, err := s.llmConfig().AllowedEndpoint(p.BaseURL); err != nil {
		return apiError(http.StatusBadRequest, "endpoint_not_allowed", "model_profile %q: %v; change the profile's endpoint", name, err)
	}
	return nil
}
