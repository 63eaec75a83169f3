package api

import (
	"net/http"
	"slices"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/store"
)

// Investigation says who may create host read-only conversations
// (config.yaml's investigation section).
type Investigation struct {
	Enabled bool
	// Users may, besides the admins (user names).
	Users []string
}

// checkMode refuses a conversation mode u may not create: an unknown
// one, or host_readonly when investigations are off or u is neither an
// admin nor listed.
func (s *Server) checkMode(u auth.User, mode string) error {
	switch mode {
	case "", "workspace":
		return nil
	case store.ModeHostReadOnly:
	default:
		return badRequest("mode must be workspace (the default) or %s, not %q", store.ModeHostReadOnly, mode)
	}
	inv := s.d.Investigation
	if !inv.Enabled {
		return apiError(http.StatusForbidden, "investigation_disabled", "host read-only investigations are not enabled on this server (investigation.enabled in config.yaml)")
	}
	if u.Role != auth.RoleAdmin && !slices.Contains(inv.Users, u.Name) {
		return apiError(http.StatusForbidden, "forbidden", "host read-only investigations are for admins and the users investigation.users names")
	}
	return nil
}
