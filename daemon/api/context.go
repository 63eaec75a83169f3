package api

import (
	"net/http"

	"github.com/gofiber/fiber/v2"
)

// conversationContext answers what the conversation's next model request
// would send (agentcore.Context): its messages' roles, sizes and
// estimated tokens, what is elided or summarized, and the budget.
func (s *Server) conversationContext(c *fiber.Ctx) error {
	cv, err := s.d.Engine.Context(c.UserContext(), user(c).ID, conversation(c).ID)
	if err != nil {
		// The conversation's model cannot be used now (a deleted model
		// profile, an endpoint no longer allowed): its turn would fail
		// the same way.
		return apiError(http.StatusConflict, "context_unavailable", "%v", err)
	}
	return c.JSON(cv)
}
