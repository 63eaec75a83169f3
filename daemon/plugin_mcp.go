package daemon

import (
	"context"
	"log/slog"

	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/integrations/mcp"
)

// startMCP offers the tools of mcp.servers to the model. Each server
// starts when a turn first needs the tool list, in its own sandbox
// (fail closed: a server whose sandbox is unavailable does not start and
// its tool says why); mode: off servers are logged as a warning here, at
// every start. A server's egress attempts (egress_allowlist) are logged
// and counted in /metrics (source mcp) and its admin listing, not as a
// conversation's events: every conversation shares it. The servers stop
// when the server does.
func startMCP(ctx context.Context, s *server, cfg config.Config) error {
	m, err := mcp.New(mcp.Options{
		Servers: cfg.MCP.Servers,
		// Started once for every conversation: recorded for none.
		Sandbox:  s.sandbox,
		OnEgress: s.egress.observer("mcp"),
		Logger:   slog.New(slogHandler{log: s.log.Named("mcp")}),
	})
	if err != nil {
		return err
	}
	s.mcp = m
	s.engine.AddSource(m)
	go func() {
		<-ctx.Done()
		m.Close()
	}()
	return nil
}

// mcpChecks report each server that is stopped (it failed to start or
// exited and waits to restart) with its last error.
func mcpChecks(ctx context.Context, s *server, cfg config.Config) []api.Check {
	if s.mcp == nil {
		return nil
	}
	var out []api.Check
	for _, st := range s.mcp.Status() {
		c := api.Check{Name: "mcp/" + st.Name, OK: st.State != mcp.StateStopped, Detail: string(st.State)}
		if !c.OK {
			c.Detail, c.Remedy = st.LastError, "see the server log (mcp); a stopped server is restarted with backoff"
		}
		out = append(out, c)
	}
	return out
}
