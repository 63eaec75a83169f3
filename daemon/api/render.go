package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/integrations/browser"
)

// DiagramRenderer renders mermaid diagrams (the mermaid_render plugin's
// *browser.Browser). Errors wrapping browser.ErrDiagram are the request's
// fault.
type DiagramRenderer interface {
	RenderDiagram(ctx context.Context, source string, format browser.Format) ([]byte, error)
}

// svgCSP keeps an SVG opened from the API inert: mermaid's strict level
// already strips scripts, this stops whatever would be left.
const svgCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; sandbox"

// renderDiagram is POST /api/v1/render/diagram {source, format}: the
// image itself (image/svg+xml or image/png).
func (s *Server) renderDiagram(c *fiber.Ctx) error {
	if s.d.Diagrams == nil {
		return apiError(http.StatusServiceUnavailable, "not_enabled", "diagram rendering is off: the mermaid_render plugin is not enabled")
	}
	var req struct {
		Source string         `json:"source"`
		Format browser.Format `json:"format"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Format == "" {
		req.Format = browser.SVG
	}
	if req.Format != browser.SVG && req.Format != browser.PNG {
		return badRequest("format %q: want svg or png", req.Format)
	}
	// A start of the browser is recorded for the caller.
	out, err := s.d.Diagrams.RenderDiagram(audit.ForConversation(c.UserContext(), user(c).ID, ""), req.Source, req.Format)
	switch {
	case errors.Is(err, browser.ErrDiagram):
		return apiError(http.StatusUnprocessableEntity, "unrenderable", "%s", err.Error())
	case err != nil:
		// The browser's (not started, no mermaid, no sandbox): the
		// details name host paths.
		s.log.Error("diagram rendering unavailable", "err", err)
		return apiError(http.StatusServiceUnavailable, "unavailable", "diagram rendering is unavailable on this server; the server log says why")
	}
	c.Set("X-Content-Type-Options", "nosniff")
	if req.Format == browser.PNG {
		c.Set(fiber.HeaderContentType, "image/png")
	} else {
		c.Set(fiber.HeaderContentType, "image/svg+xml")
		c.Set("Content-Security-Policy", svgCSP)
	}
	return c.Send(out)
}
