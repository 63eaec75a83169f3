package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/integrations/mcp"
)

// MCPServers is the body of GET /api/v1/admin/mcp.
type MCPServers struct {
	// Servers is empty when the mcp plugin is not enabled.
	Servers []mcp.Status `json:"servers"`
}

// adminMCP lists the configured MCP servers with their state, tools,
// restarts and last error.
func (s *Server) adminMCP(c *fiber.Ctx) error {
	out := MCPServers{Servers: []mcp.Status{}}
	if s.d.MCP != nil {
		out.Servers = s.d.MCP.Status()
	}
	return c.JSON(out)
}
