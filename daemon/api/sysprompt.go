package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/agentcore"
)

// SystemPrompt is the server's system prompt template, as the engine
// was given it.
type SystemPrompt struct {
	// Source is where it comes from: built-in, llm.system_prompt or
	// llm.system_prompt_file.
	Source string
	Text   string
}

// The example conversation GET /admin/system-prompt renders the
// template for.
const (
	exampleRepository = "example/project"
	exampleCommit     = "0123456789abcdef0123456789abcdef01234567"
)

// adminSystemPrompt shows the system prompt template and what a
// workspace conversation of an example repository would be sent: the
// engine's tools, and the caller's approval rules.
func (s *Server) adminSystemPrompt(c *fiber.Ctx) error {
	ctx := c.UserContext()
	pc := agentcore.PromptContext{Repository: exampleRepository, Commit: exampleCommit}
	if s.d.AutoApproved != nil {
		var err error
		if pc.AutoApproved, err = s.d.AutoApproved(ctx, user(c).ID); err != nil {
			return err
		}
	}
	if pc.AutoApproved == nil {
		pc.AutoApproved = []string{} // JSON [], not null
	}
	rendered, err := s.d.Engine.PreviewPrompt(ctx, pc)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{
		"source":   s.d.SystemPrompt.Source,
		"template": s.d.SystemPrompt.Text,
		"rendered": rendered,
		"example":  fiber.Map{"repository": pc.Repository, "commit": pc.Commit, "auto_approved": pc.AutoApproved},
	})
}
