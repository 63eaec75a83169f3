package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/integrations/retrieval"
)

// SearchResults is the body of GET /api/v1/search.
type SearchResults struct {
	Results []agentcore.Hit `json:"results"`
}

// search is GET /api/v1/search?q=&repository=&branch=&k=: code search
// over the repositories the user may read (or the one named), on each
// one's default branch or the one named (q's branch: terms win), in the
// query language of the retrieval package (words, "phrase", /regexp/,
// sym:, path:, lang:, repo:, branch:, -term). A query it cannot read is
// 400 with the column at fault in the message.
func (s *Server) search(c *fiber.Ctx) error {
	if s.d.Search == nil {
		return apiError(http.StatusServiceUnavailable, "search_unavailable", "code search is not configured on this server")
	}
	q := c.Query("q")
	if q == "" {
		return badRequest("q is required: the words or identifiers to search for")
	}
	k := retrieval.DefaultLimit
	if raw := c.Query("k"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > retrieval.MaxLimit {
			return badRequest("k must be a whole number from 1 to %d, not %q", retrieval.MaxLimit, raw)
		}
		k = n
	}
	branch := c.Query("branch")
	if branch != "" {
		if err := git.CheckBranch(branch); err != nil {
			return badRequest("branch: %s", strings.TrimPrefix(err.Error(), "git: "))
		}
	}
	hits, err := s.d.Search.SearchBranch(c.UserContext(), user(c).ID, c.Query("repository"), branch, q, k)
	switch {
	case errors.Is(err, retrieval.ErrBadQuery):
		return badRequest("%s", err.Error()[len("retrieval: "):])
	case errors.Is(err, retrieval.ErrNoRepository):
		return errNotFound
	case err != nil:
		return err
	}
	if hits == nil {
		hits = []agentcore.Hit{}
	}
	return c.JSON(SearchResults{Results: hits})
}
