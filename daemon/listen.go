package daemon

import (
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/connlimit"
)

// limits are the caps on what clients hold open: config.yaml's server
// section, its zero counts derived from the descriptor limit.
func limits(c config.Server) (connlimit.Options, api.Limits) {
	conns, perIP := connlimit.Defaults()
	if c.MaxConnections > 0 {
		conns, perIP = c.MaxConnections, max(c.MaxConnections/4, 1)
	}
	if c.MaxConnectionsPerIP > 0 {
		perIP = c.MaxConnectionsPerIP
	}
	streams := c.MaxStreams
	if streams == 0 {
		streams = max(conns/4, 1)
	}
	return connlimit.Options{MaxConns: conns, MaxPerIP: perIP}, api.Limits{
		HeaderTimeout:     c.HeaderTimeout.Std(),
		IdleTimeout:       c.IdleTimeout.Std(),
		MaxStreams:        streams,
		MaxStreamsPerUser: c.MaxStreamsPerUser,
		MaxBodyBytes:      int64(c.MaxBodyBytes),
	}
}
