package api

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
)

// auditPage bounds one answer of GET /admin/audit; page on with after.
const (
	auditPage    = 500
	auditPageMax = 1000
)

// AuditPage is the body of GET /api/v1/admin/audit.
type AuditPage struct {
	Records []audit.Record `json:"records"`
	// Next is the after= of the next page; 0 when this one is the last.
	Next int64 `json:"next,omitempty"`
}

// adminAudit lists audit records, oldest first: since= (RFC 3339),
// user= (a user's ID or name), kind=, after= (a sequence number) and
// limit= (at most 1000) select them.
func (s *Server) adminAudit(c *fiber.Ctx) error {
	var f audit.Filter
	if v := c.Query("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return badRequest("since must be an RFC 3339 time such as 2026-11-30T08:00:00Z, not %q", clip(v))
		}
		f.Since = t
	}
	f.Kind = c.Query("kind")
	if u := c.Query("user"); u != "" {
		f.User = u
		if !strings.HasPrefix(u, "usr_") {
			// A name: records name the user by ID.
			if found, err := s.d.Users.ByName(c.UserContext(), strings.ToLower(u)); err == nil {
				f.User = found.ID
			} else if !errors.Is(err, auth.ErrUserNotFound) {
				return err
			}
		}
	}
	var err error
	if f.After, err = queryInt(c, "after", 0, 0, 1<<62); err != nil {
		return err
	}
	limit, err := queryInt(c, "limit", auditPage, 1, auditPageMax)
	if err != nil {
		return err
	}
	// One more than asked tells whether there is a next page.
	f.Limit = int(limit) + 1
	rs, err := audit.List(c.UserContext(), s.d.DB, f)
	if err != nil {
		return err
	}
	page := AuditPage{Records: rs}
	if len(rs) > int(limit) {
		page.Records = rs[:limit]
		page.Next = page.Records[limit-1].Seq
	}
	if page.Records == nil {
		page.Records = []audit.Record{}
	}
	return c.JSON(page)
}

// queryInt is the integer query parameter name, def when absent; out of
// [lo, hi] is a 400.
func queryInt(c *fiber.Ctx, name string, def, lo, hi int64) (int64, error) {
	v := c.Query(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("%s must be an integer from %d to %d, not %q", name, lo, hi, clip(v))
	}
	return n, nil
}

// AuditVerdict is the body of GET /api/v1/admin/audit/verify: what
// codumentorctl audit verify says of the instance's audit log.
type AuditVerdict struct {
	Intact bool `json:"intact"`
	// Records is how many records were checked (before the break, if
	// any).
	Records int64 `json:"records"`
	// Head is the newest record checked, SEQ:MAC, to keep elsewhere and
	// pass back as head= later; empty for an empty log or a broken one.
	Head string `json:"head,omitempty"`
	// BrokenAt is the record where the chain breaks; Problem says how
	// (or which key is missing).
	BrokenAt int64  `json:"broken_at,omitempty"`
	Problem  string `json:"problem,omitempty"`
}

// verifyAudit checks the audit log's chain as codumentorctl audit verify
// does, with the server's keys; head= (SEQ:MAC, repeatable) also checks
// that the log still reaches a head kept elsewhere. A broken chain is a
// 200 that says so: the check itself worked.
func (s *Server) verifyAudit(c *fiber.Ctx) error {
	var heads []audit.Head
	for _, v := range c.Context().QueryArgs().PeekMulti("head") {
		h, err := audit.ParseHead(string(v))
		if err != nil {
			return badRequest("head: %s", strings.TrimPrefix(err.Error(), "audit: "))
		}
		heads = append(heads, h)
	}
	ctx := c.UserContext()
	n, err := audit.Verify(ctx, s.d.DB, heads...)
	v := AuditVerdict{Intact: err == nil, Records: n}
	var broken *audit.BrokenError
	switch {
	case errors.As(err, &broken):
		v.BrokenAt, v.Problem = broken.Seq, broken.Problem
	case errors.Is(err, audit.ErrUnknownKey):
		v.Problem = strings.TrimPrefix(err.Error(), "audit: ")
	case err != nil:
		return err
	case n > 0:
		rs, err := audit.List(ctx, s.d.DB, audit.Filter{After: n - 1, Limit: 1})
		if err != nil {
			return err
		}
		if len(rs) == 1 {
			v.Head = audit.Head{Seq: rs[0].Seq, MAC: rs[0].Hash}.String()
		}
	}
	return c.JSON(v)
}
