package api

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/store"
)

// errNoPushAccess: the user may read the repository but not push to it.
var errNoPushAccess = &Error{Status: http.StatusForbidden, Code: "no_push_access", Message: "you may read this repository but not push to it: an administrator can give you push access"}

// errRepoAdmin: the route needs admin access to the repository.
var errRepoAdmin = &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "this needs admin access to the repository"}

// errAccessLost: the conversation's user may no longer read its
// repository.
var errAccessLost = &Error{Status: http.StatusForbidden, Code: "repository_access_lost",
	Message: "you no longer have access to this conversation's repository: its history and workspace stay, but new turns, search and push on it are refused; an administrator can give you access again"}

// repository is the one repository access check: repository id as the
// user may use it at level need. One the user may not read answers the
// same 404 as an unknown one (repos.Service.Access looks both up the same
// way); one they may read but not at need, refusal (a 403).
func (s *Server) repository(c *fiber.Ctx, id string, need repos.Level, refusal *Error) (repos.Repository, error) {
	r, l, err := s.d.Repositories.Access(c.UserContext(), user(c), id)
	if err != nil {
		return repos.Repository{}, repoAnswer(err)
	}
	if l < need {
		if refusal == nil {
			refusal = errForbidden
		}
		return repos.Repository{}, refusal
	}
	return r, nil
}

// readable admits the routes under /repositories/{id} for a user who
// may read it, with it in the request's locals.
func (s *Server) readable(c *fiber.Ctx) error {
	r, err := s.repository(c, c.Params("id"), repos.LevelRead, nil)
	if err != nil {
		return err
	}
	c.Locals(localRepository, r)
	return c.Next()
}

// repoAdmin follows readable on the routes that need admin access to
// the repository.
func (s *Server) repoAdmin(c *fiber.Ctx) error {
	if _, err := s.repository(c, c.Params("id"), repos.LevelAdmin, errRepoAdmin); err != nil {
		return err
	}
	return c.Next()
}

func repository(c *fiber.Ctx) repos.Repository {
	return c.Locals(localRepository).(repos.Repository)
}

// conversationRepository checks that the user of conversation conv may
// still use its repository at level need (turns and search: read; push:
// push). A conversation without one, or whose repository was deleted
// (its snapshot stays until the conversation goes), passes.
func (s *Server) conversationRepository(c *fiber.Ctx, conv store.Conversation, need repos.Level) error {
	if conv.Repository == "" {
		return nil
	}
	if _, err := s.d.Repositories.Get(c.UserContext(), conv.Repository); errors.Is(err, repos.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	refusal := errNoPushAccess
	if need == repos.LevelRead {
		refusal = errAccessLost
	}
	_, err := s.repository(c, conv.Repository, need, refusal)
	if errors.Is(err, errNotFound) {
		return errAccessLost
	}
	return err
}

func (s *Server) getAccess(c *fiber.Ctx) error {
	es, err := s.d.Repositories.AccessEntries(c.UserContext(), repository(c).ID)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"entries": es})
}

// putAccess replaces the repository's access entries; the change is an
// audit record (repos.Service.SetAccess).
func (s *Server) putAccess(c *fiber.Ctx) error {
	var req struct {
		Entries []repos.AccessEntry `json:"entries"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Entries == nil {
		return badRequest("entries is required: the whole list of access entries ([] leaves the repository to administrators)")
	}
	es, err := s.d.Repositories.SetAccess(c.UserContext(), user(c).ID, repository(c).ID, req.Entries)
	if err != nil {
		return repoAnswer(err)
	}
	s.log.Info("repository access changed", "repository", repository(c).ID, "entries", len(es), "by", user(c).Name)
	return c.JSON(fiber.Map{"entries": es})
}

// groupAnswer maps the auth package's group errors to answers.
func groupAnswer(err error) error {
	switch {
	case errors.Is(err, auth.ErrInvalidGroup):
		return badRequest("%v", err)
	case errors.Is(err, auth.ErrGroupExists):
		return apiError(http.StatusConflict, "exists", "%v", err)
	case errors.Is(err, auth.ErrGroupNotFound), errors.Is(err, auth.ErrUserNotFound):
		return errNotFound
	case errors.Is(err, auth.ErrNotAdmin):
		return errUnauthorized // disabled meanwhile: as its next request
	}
	return err
}

func (s *Server) listGroups(c *fiber.Ctx) error {
	gs, err := s.d.Users.Groups(c.UserContext())
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"groups": gs})
}

func (s *Server) createGroup(c *fiber.Ctx) error {
	var req struct {
		Name string `json:"name"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	g, err := s.d.Users.AddGroup(c.UserContext(), user(c).ID, req.Name)
	if err != nil {
		return groupAnswer(err)
	}
	return c.Status(http.StatusCreated).JSON(g)
}

// pathParam is the path parameter name, unescaped (group names may hold
// spaces).
func pathParam(c *fiber.Ctx, name string) (string, error) {
	v, err := url.PathUnescape(c.Params(name))
	if err != nil {
		return "", badRequest("%s is not a valid path segment", name)
	}
	return v, nil
}

func (s *Server) deleteGroup(c *fiber.Ctx) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	if err := s.d.Users.DeleteGroup(c.UserContext(), user(c).ID, name); err != nil {
		return groupAnswer(err)
	}
	return c.SendStatus(http.StatusNoContent)
}

// setGroupMember is PUT (add) and DELETE (remove) of
// /admin/groups/{name}/members/{user}: local memberships.
func (s *Server) setGroupMember(member bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		name, err := pathParam(c, "name")
		if err != nil {
			return err
		}
		if err := s.d.Users.SetMember(c.UserContext(), user(c).ID, name, c.Params("user"), member); err != nil {
			return groupAnswer(err)
		}
		return c.SendStatus(http.StatusNoContent)
	}
}
