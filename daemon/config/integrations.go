package config

import (
	"errors"

	"github.com/codumentor/codumentor/integrations/mcp"
)

// PluginMCP starts the MCP stdio servers of mcp.servers, each in its own
// long-lived sandbox, and offers their tools to the model.
const PluginMCP = "mcp"

// MCP is config.yaml's mcp section.
type MCP struct {
	// Servers are started once each, when a turn first needs their
	// tools, and shared by every conversation (plugin mcp).
	Servers []mcp.ServerConfig `yaml:"servers"`
}

// Investigation is config.yaml's investigation section: conversations
// created with mode host_readonly, whose sandbox sees the host's
// filesystem read-only (data directories, credentials and sockets
// masked).
type Investigation struct {
	Enabled bool `yaml:"enabled"`
	// Users may start one besides the admins (user names).
	Users []string `yaml:"users"`
}

// validateIntegrations checks the mcp and investigation sections.
func (c Config) validateIntegrations() []error {
	var errs []error
	if err := mcp.ValidateServers(c.MCP.Servers); err != nil {
		errs = append(errs, err)
	}
	if len(c.MCP.Servers) > 0 && !c.Enabled(PluginMCP) {
		errs = append(errs, errors.New("mcp.servers is set but the mcp plugin is not enabled: add mcp to plugins, or remove mcp.servers"))
	}
	if len(c.Investigation.Users) > 0 && !c.Investigation.Enabled {
		errs = append(errs, errors.New("investigation.users is set but investigation.enabled is false"))
	}
	return errs
}
