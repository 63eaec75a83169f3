package api

import (
	"errors"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/daemon/auth"
)

// updateUser disables or re-enables a user and resets a local user's
// password. Both revoke the user's tokens at once (auth.Users raises the
// token version, which every request checks). Every check runs before
// anything changes, and the password (the step that can still be
// refused) is set before the account is disabled: a refused request
// changes nothing.
func (s *Server) updateUser(c *fiber.Ctx) error {
	var req struct {
		Disabled *bool   `json:"disabled"`
		Password *string `json:"password"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Disabled == nil && req.Password == nil {
		return badRequest("nothing to change: send disabled, password or both")
	}
	ctx, admin := c.UserContext(), user(c)
	u, err := s.d.Users.ByID(ctx, c.Params("id"))
	if errors.Is(err, auth.ErrUserNotFound) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	if req.Disabled != nil && *req.Disabled && u.ID == admin.ID {
		return badRequest("you cannot disable your own account: another administrator can (or codumentorctl users disable)")
	}
	if req.Password != nil && u.Source != auth.SourceLocal {
		return badRequest("user %s signs in through %s, which checks the password: change it there (the account can still be disabled here)", u.Name, u.Source)
	}
	if req.Password != nil {
		err := s.d.Users.SetPassword(ctx, admin.ID, u.Name, *req.Password)
		if errors.Is(err, auth.ErrWeakPassword) {
			return badRequest("%v", err)
		}
		if errors.Is(err, auth.ErrNotAdmin) {
			return errUnauthorized // disabled meanwhile: as its next request
		}
		if err != nil {
			return err
		}
		s.log.Info("user's password reset; their tokens are revoked", "user", u.Name, "by", admin.Name)
	}
	if req.Disabled != nil {
		err := s.d.Users.SetDisabled(ctx, admin.ID, u.Name, *req.Disabled)
		if errors.Is(err, auth.ErrNotAdmin) {
			return errUnauthorized
		}
		if err != nil {
			return err
		}
		s.log.Info("user updated", "user", u.Name, "disabled", *req.Disabled, "by", admin.Name)
	}
	if u, err = s.d.Users.ByID(ctx, u.ID); err != nil {
		return err
	}
	return c.JSON(u)
}
