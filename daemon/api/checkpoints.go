package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/store"
)

// listMessages is GET …/messages: the active branch of the history, or
// with ?all=true every branch's messages in the order written (each names
// its parent).
func (s *Server) listMessages(c *fiber.Ctx) error {
	conv := conversation(c)
	var msgs []agentcore.Message
	var err error
	switch c.Query("all") {
	case "", "false":
		msgs, err = s.d.Conversations.Messages(c.UserContext(), conv.ID)
	case "true":
		msgs, err = s.d.Conversations.AllMessages(c.UserContext(), conv.ID)
	default:
		return badRequest("all must be true or false")
	}
	if err != nil {
		return err
	}
	if msgs == nil {
		msgs = []agentcore.Message{}
	}
	return c.JSON(fiber.Map{"messages": msgs})
}

// turnError answers the engine's refusals of a turn (a new message, an
// edit or a regeneration), a revert or a fork.
func turnError(err error) error {
	var qe *store.QuotaError
	switch {
	case errors.As(err, &qe):
		return quotaAnswer(qe)
	case errors.Is(err, agentcore.ErrTurnInProgress):
		return apiError(http.StatusConflict, "turn_in_progress", "this conversation has a turn running; wait for its turn_finished event, or cancel it")
	case errors.Is(err, agentcore.ErrWorkspaceBusy):
		return apiError(http.StatusConflict, "workspace_busy", "%s", strings.TrimPrefix(err.Error(), "agentcore: "))
	case errors.Is(err, agentcore.ErrNoCheckpoint):
		return apiError(http.StatusNotFound, "no_checkpoint", "%s", strings.TrimPrefix(err.Error(), "agentcore: "))
	case errors.Is(err, agentcore.ErrNotUserMessage):
		return badRequest("%s", strings.TrimPrefix(err.Error(), "agentcore: "))
	case errors.Is(err, agentcore.ErrClosed):
		return apiError(http.StatusServiceUnavailable, "shutting_down", "the server is shutting down; retry shortly")
	case errors.Is(err, agentcore.ErrNotFound):
		return errNotFound
	}
	return err
}

// revertTurn is POST …/turns/{tid}/revert: the workspace goes back to what
// it was when the turn began.
func (s *Server) revertTurn(c *fiber.Ctx) error {
	conv := conversation(c)
	turn := strings.Clone(c.Params("tid"))
	if err := s.d.Engine.RevertTurn(c.UserContext(), user(c).ID, conv.ID, turn); err != nil {
		return turnError(err)
	}
	return c.JSON(fiber.Map{"turn": turn, "status": "reverted"})
}

// editMessage is PUT …/messages/{mid}: the user message is answered anew
// with content, on a new branch, from the workspace its turn began with.
func (s *Server) editMessage(c *fiber.Ctx) error {
	content, err := decodeContent(c)
	if err != nil {
		return err
	}
	return s.branchTurn(c, strings.Clone(c.Params("mid")), content)
}

// regenerate is POST …/messages/{mid}/regenerate: a user message, or the
// user message a reply answers, is answered again on a new branch.
func (s *Server) regenerate(c *fiber.Ctx) error {
	mid := c.Params("mid")
	msgs, err := s.d.Conversations.Messages(c.UserContext(), conversation(c).ID)
	if err != nil {
		return err
	}
	var from *agentcore.Message
	for i := range msgs {
		if msgs[i].Role == agentcore.RoleUser {
			from = &msgs[i]
		}
		if msgs[i].ID == mid {
			if from == nil {
				return badRequest("message %s answers no user message", mid)
			}
			return s.branchTurn(c, from.ID, from.Content)
		}
	}
	return errNotFound
}

func (s *Server) branchTurn(c *fiber.Ctx, from, content string) error {
	return s.startTurn(c, agentcore.TurnRequest{User: user(c).ID, Conversation: conversation(c).ID, Content: content, From: from})
}

// forkConversation is POST …/messages/{mid}/fork: a new conversation of
// the caller with the history up to that message and the workspace of
// that point (see agentcore.Engine.Fork).
func (s *Server) forkConversation(c *fiber.Ctx) error {
	src := conversation(c)
	mid := strings.Clone(c.Params("mid"))
	title := src.Title
	if title != "" && len(title)+len(" (fork)") <= 200 {
		title += " (fork)"
	} else {
		title = "" // proposed from its first message
	}
	n := store.New{Title: title, Mode: src.Mode, ModelProfile: src.ModelProfile}
	var repo repos.Repository
	if src.Repository != "" {
		// The caller must still be allowed to start on the repository,
		// and is told so if they no longer are.
		if err := s.conversationRepository(c, src, repos.LevelRead); err != nil {
			return err
		}
		r, commit, err := s.startOnRepository(c, src.Repository, src.BaseCommit)
		if err != nil {
			return err
		}
		repo, n.Repository, n.BaseCommit = r, r.ID, commit
	}
	conv, err := s.newConversation(c, src.UserID, n, repo)
	if err != nil {
		return err
	}
	undo := func() {
		s.d.Engine.Forget(conv.ID)
		if derr := s.d.Conversations.Delete(c.UserContext(), conv.UserID, conv.ID); derr != nil {
			s.log.Warn("removing a fork that failed", "conversation", conv.ID, "err", derr)
		}
	}
	if n.Repository != "" {
		if err := s.attachRepository(c, &conv, repo); err != nil {
			return err // conv is removed
		}
		s.startSetup(conv, repo)
	}
	if err := s.d.Engine.Fork(c.UserContext(), conv.UserID, src.ID, mid, conv.ID); err != nil {
		undo()
		return turnError(err)
	}
	got, err := s.d.Conversations.Get(c.UserContext(), conv.UserID, conv.ID)
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(got)
}
