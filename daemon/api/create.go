package api

import (
	"github.com/gofiber/fiber/v2"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/store"
)

// newConversation creates user's conversation n, on repository r if
// n has one: the conversation, its repository and its pending setup
// row are one transaction, so that no conversation is kept without the
// setup its tools wait for. The caller then prepares its snapshot
// (attachRepository) and starts its setup (startSetup).
func (s *Server) newConversation(c *fiber.Ctx, user string, n store.New, r repos.Repository) (store.Conversation, error) {
	var also func(*gorm.DB, store.Conversation) error
	if n.Repository != "" && s.d.Setups != nil {
		also = func(tx *gorm.DB, conv store.Conversation) error { return s.d.Setups.Record(tx, conv.ID, r) }
	}
	return s.d.Conversations.CreateWith(c.UserContext(), user, n, also)
}

// startSetup begins the setup newConversation recorded, if any.
func (s *Server) startSetup(conv store.Conversation, r repos.Repository) {
	if s.d.Setups != nil && r.RunSetup {
		s.d.Setups.Start(conv.UserID, conv.ID)
	}
}
