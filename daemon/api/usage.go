package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/store"
)

// UsageReport is the body of GET /me/usage and GET /admin/usage: token
// totals of the model calls since Since, grouped.
type UsageReport struct {
	Since   time.Time    `json:"since"`
	GroupBy string       `json:"group_by"`
	Groups  []UsageGroup `json:"groups"`
	// Total is over all the groups.
	Total store.UsageTotals `json:"total"`
	// Quota is the caller's (GET /me/usage), or the user's of user=
	// (GET /admin/usage).
	Quota *store.Quota `json:"quota,omitempty"`
}

// UsageGroup is the totals of one model, day (YYYY-MM-DD, UTC) or user
// (Key is its ID, Name its name).
type UsageGroup struct {
	Key  string `json:"key"`
	Name string `json:"name,omitempty"`
	store.UsageTotals
}

// usageDays is how far back a usage report goes without since=: the
// last 30 UTC days, today included.
const usageDays = 30

// myUsage is GET /me/usage: the caller's usage, since= (RFC 3339 or a
// date), group_by= model (default) or day.
func (s *Server) myUsage(c *fiber.Ctx) error {
	u := user(c)
	return s.usageReport(c, u.ID, []string{store.GroupByModel, store.GroupByDay})
}

// adminUsage is GET /admin/usage: everyone's usage or user='s (an ID
// or name), since=, group_by= user (default), model or day.
func (s *Server) adminUsage(c *fiber.Ctx) error {
	id := ""
	if v := c.Query("user"); v != "" {
		u, err := s.findUser(c, v)
		if err != nil {
			return err
		}
		id = u.ID
	}
	return s.usageReport(c, id, []string{store.GroupByUser, store.GroupByModel, store.GroupByDay})
}

// findUser is the user with ID or name v; an unknown one is a 400.
func (s *Server) findUser(c *fiber.Ctx, v string) (auth.User, error) {
	ctx := c.UserContext()
	u, err := s.d.Users.ByID(ctx, v)
	if errors.Is(err, auth.ErrUserNotFound) {
		u, err = s.d.Users.ByName(ctx, strings.ToLower(v))
	}
	if errors.Is(err, auth.ErrUserNotFound) {
		return auth.User{}, badRequest("user: there is no user with the ID or name %q", clip(v))
	}
	return u, err
}

// usageReport answers the usage of user (all users if empty) grouped by
// one of groups (the first is the default).
func (s *Server) usageReport(c *fiber.Ctx, user string, groups []string) error {
	now := time.Now().UTC()
	f := store.UsageFilter{User: user, GroupBy: groups[0], Since: now.Truncate(24*time.Hour).AddDate(0, 0, 1-usageDays)}
	if v := c.Query("group_by"); v != "" {
		if !slices.Contains(groups, v) {
			return badRequest("group_by must be %s, not %q", strings.Join(groups, ", "), clip(v))
		}
		f.GroupBy = v
	}
	if v := c.Query("since"); v != "" {
		t, err := parseSince(v)
		if err != nil {
			return err
		}
		f.Since = t
	}
	ctx := c.UserContext()
	gs, err := s.d.Usage.Totals(ctx, f)
	if err != nil {
		return err
	}
	r := UsageReport{Since: f.Since, GroupBy: f.GroupBy, Groups: make([]UsageGroup, len(gs))}
	names := map[string]string{}
	for i, g := range gs {
		r.Groups[i] = UsageGroup{Key: g.Key, UsageTotals: g.UsageTotals}
		if f.GroupBy == store.GroupByUser {
			if _, ok := names[g.Key]; !ok {
				if u, err := s.d.Users.ByID(ctx, g.Key); err == nil {
					names[g.Key] = u.Name
				} else if !errors.Is(err, auth.ErrUserNotFound) {
					return err
				}
			}
			r.Groups[i].Name = names[g.Key]
		}
		t := &r.Total
		t.Calls += g.Calls
		t.PromptTokens += g.PromptTokens
		t.CompletionTokens += g.CompletionTokens
		t.TotalTokens += g.TotalTokens
		t.Estimated += g.Estimated
	}
	if user != "" {
		q, err := s.d.Usage.Quota(ctx, user, now)
		if err != nil {
			return err
		}
		r.Quota = &q
	}
	return c.JSON(r)
}

// parseSince reads since=: an RFC 3339 time or a date (its midnight UTC).
func parseSince(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, badRequest("since must be an RFC 3339 time such as 2026-11-30T08:00:00Z or a date such as 2026-11-30 (UTC), not %q", clip(v))
}

// putQuota sets or removes a user's own daily token quota (admin) and
// answers the quota that now applies.
func (s *Server) putQuota(c *fiber.Ctx) error {
	var req map[string]*int64
	if err := decode(c, &req); err != nil {
		return err
	}
	v, ok := req["daily_tokens"]
	if !ok || len(req) != 1 {
		return badRequest(`the body must be {"daily_tokens": N} (0: no quota for this user) or {"daily_tokens": null} (the default applies)`)
	}
	ctx := c.UserContext()
	u, err := s.d.Users.ByID(ctx, c.Params("id"))
	if errors.Is(err, auth.ErrUserNotFound) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	err = s.d.Usage.SetQuota(ctx, user(c).ID, u.ID, v)
	if errors.Is(err, store.ErrBadQuota) {
		return badRequest("%v", err)
	}
	if err != nil {
		return err
	}
	s.log.Info("user's daily token quota set", "user", u.Name, "daily_tokens", v, "by", user(c).Name)
	return s.answerQuota(c, u.ID)
}

// getQuota answers a user's daily token quota and today's use (admin).
func (s *Server) getQuota(c *fiber.Ctx) error {
	u, err := s.d.Users.ByID(c.UserContext(), c.Params("id"))
	if errors.Is(err, auth.ErrUserNotFound) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	return s.answerQuota(c, u.ID)
}

func (s *Server) answerQuota(c *fiber.Ctx, user string) error {
	q, err := s.d.Usage.Quota(c.UserContext(), user, time.Now())
	if err != nil {
		return err
	}
	return c.JSON(q)
}

// quotaAnswer is the 429 of a turn refused by the user's quota, with
// Retry-After at the quota's reset.
func quotaAnswer(qe *store.QuotaError) *Error {
	wait := math.Ceil(time.Until(qe.Quota.Resets).Seconds())
	return &Error{Status: http.StatusTooManyRequests, Code: "quota_exceeded", retryAfter: int(max(wait, 1)),
		Message: fmt.Sprintf("your daily token quota is used up: %d of %d tokens used today (UTC); it resets at %s. Nothing was stored: send the message again then (an administrator can raise your quota)",
			qe.Quota.UsedToday, qe.Quota.DailyTokens, qe.Quota.Resets.Format(time.RFC3339))}
}
