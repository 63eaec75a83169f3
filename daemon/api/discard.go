package api

import (
	"errors"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
)

var errDiscardUnrecorded = &Error{Status: http.StatusServiceUnavailable, Code: "audit_unavailable", Message: "the discard could not be recorded in the audit log, so nothing was discarded; the server log has the details"}

// discardWorkspace is POST …/workspace/discard: the owner drops every
// change the conversation made to its workspace, and its disk space
// comes back at once. It is recorded before it happens, and refused
// while a turn or a background job may write to the workspace.
func (s *Server) discardWorkspace(c *fiber.Ctx) error {
	conv := conversation(c)
	if s.d.Engine.Turn(conv.ID) != nil {
		return apiError(http.StatusConflict, "turn_in_progress", "a turn is running and may still write to the workspace; discard after its turn_finished event, or cancel it")
	}
	if err := audit.Write(c.UserContext(), s.d.DB, audit.Entry{Kind: audit.KindWorkspaceDiscard, User: user(c).ID, Source: s.clientIP(c), Data: map[string]string{"conversation": conv.ID}}); err != nil {
		s.log.Error("recording a workspace discard failed", "conversation", conv.ID, "err", err)
		return errDiscardUnrecorded
	}
	if err := s.d.Engine.DiscardWorkspace(conv.ID); err != nil {
		if errors.Is(err, agentcore.ErrWorkspaceBusy) {
			return apiError(http.StatusConflict, "workspace_busy", "%s", err.Error())
		}
		return apiError(http.StatusInternalServerError, "discard_failed", "%s", err.Error())
	}
	return c.JSON(fiber.Map{"conversation": conv.ID, "status": "discarded"})
}
