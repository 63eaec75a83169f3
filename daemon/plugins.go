package daemon

import (
	"context"
	"log/slog"
	"strings"

	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/integrations/externalagent"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// plugin is a capability config.yaml's plugins list enables. Plugins are
// compiled into the server (trusted code); enabling one is the operator's
// decision. The table is fixed at build time.
type plugin struct {
	// start wires the plugin into the server being built.
	start func(ctx context.Context, s *server, cfg config.Config) error
	// checks are its readiness checks, part of GET /readyz.
	checks func(ctx context.Context, s *server, cfg config.Config) []api.Check
}

// plugins are the known plugins by name; config.Validate refuses others.
var plugins = map[string]plugin{
	config.PluginWorkspaceIsolation: {start: startWorkspaceIsolation, checks: workspaceIsolationChecks},
	config.PluginExternalAgent:      {start: startExternalAgent, checks: noChecks},
	config.PluginMCP:                {start: startMCP, checks: mcpChecks},
	config.PluginOffice:             {start: startOffice, checks: officeChecks},
	config.PluginWebRetrieve:        {start: startWebRetrieve, checks: browserChecks},
	config.PluginMermaidRender:      {start: startMermaidRender, checks: mermaidChecks},
}

func noChecks(context.Context, *server, config.Config) []api.Check { return nil }

// startExternalAgent registers the external_agent tool. A tier-0 agent
// while isolation is enabled, without allow_unsandboxed_external_agents,
// stops the server from starting (the error names the setting).
func startExternalAgent(ctx context.Context, s *server, cfg config.Config) error {
	tool, err := externalagent.New(externalagent.Options{
		Agents:           cfg.ExternalAgents,
		Isolation:        cfg.Enabled(config.PluginWorkspaceIsolation),
		AllowUnsandboxed: cfg.AllowUnsandboxedExternalAgents,
		Engine:           s.engine,
		Logger:           slog.New(slogHandler{log: s.log.Named("external_agent")}),
	})
	if err != nil {
		return err
	}
	return s.engine.Register(tool)
}

// externalAgentPrograms are the agents' programs the conversation
// sandboxes show (engine Config.Programs).
func externalAgentPrograms(cfg config.Config) []sandboxkit.Bind {
	if !cfg.Enabled(config.PluginExternalAgent) {
		return nil
	}
	return externalagent.Programs(cfg.ExternalAgents, cfg.Enabled(config.PluginWorkspaceIsolation))
}

// startWorkspaceIsolation: the engine's shell and file tools run in a
// per-conversation sandbox (the engine is built with them when the plugin
// is enabled), and layers unused for sandbox.workspace_ttl are collected.
// An unavailable sandbox is logged; the tools then fail closed.
func startWorkspaceIsolation(ctx context.Context, s *server, cfg config.Config) error {
	s.queue.Handle(jobs.KindWorkspaceGC, jobs.WorkspaceGC(s.layers, cfg.Sandbox.WorkspaceTTL.Std()))
	s.queue.EveryNode("workspace_gc", cfg.Sandbox.GCInterval.Std(), jobs.KindWorkspaceGC, nil) // its workspaces/layers
	rep := sandboxReport(ctx, s, cfg)
	if err := rep.Err(); err != nil {
		s.log.Error("workspace isolation is enabled but unavailable: shell and file tools refuse to run until it is fixed (nothing runs unsandboxed)", "err", sandboxkit.UnavailableDetail(err))
	}
	for _, c := range rep.Checks {
		if c.Name == "limits" && c.OK && c.Warning {
			s.log.Warn("sandbox limits: "+c.Detail, "fix", c.Remedy)
		}
	}
	return nil
}

// workspaceIsolationChecks are the sandbox Doctor's checks, on the
// filesystem of the workspace layers; the seccomp check counts only when
// a filter is loaded.
func workspaceIsolationChecks(ctx context.Context, s *server, cfg config.Config) []api.Check {
	var out []api.Check
	for _, c := range sandboxReport(ctx, s, cfg).Checks {
		if c.Name == "seccomp" && cfg.Sandbox.Seccomp == seccomp.Off {
			continue
		}
		out = append(out, api.Check{Name: "sandbox/" + c.Name, OK: c.OK, Detail: c.Detail, Remedy: c.Remedy, Warning: c.Warning})
	}
	return out
}

func sandboxReport(ctx context.Context, s *server, cfg config.Config) *sandboxkit.Report {
	return sandboxkit.Doctor(ctx, cfg.Sandbox.DoctorOptions(s.layers.Base()))
}

// sandboxWarnings are the sandbox checks that passed with less
// protection than they could have (a passing check with a remedy: limits
// without a delegated cgroup, "rlimits only"; no Landlock abstract socket
// scope), and the other checks marked Warning (the browser without
// Chrome's sandbox), each with its remedy.
func sandboxWarnings(checks []api.Check) []string {
	var out []string
	for _, c := range checks {
		if name, ok := strings.CutPrefix(c.Name, "sandbox/"); ok && c.OK && c.Remedy != "" {
			out = append(out, name+": "+c.Detail+"; fix: "+c.Remedy)
		} else if !ok && c.OK && c.Warning {
			out = append(out, c.Name+": "+c.Detail+"; fix: "+c.Remedy)
		}
	}
	return out
}
