package daemon

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/sandboxkit"
)

// logAuditHeads writes the audit log's head to the server's log every
// interval until ctx ends, so that a log shipped elsewhere anchors the
// database (codumentorctl audit verify --head).
func (s *server) logAuditHeads(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.logAuditHead(ctx)
		}
	}
}

// logAuditHead writes the audit log's head to the server's log: the
// line "audit head: head=SEQ:MAC".
func (s *server) logAuditHead(ctx context.Context) {
	h, err := audit.LastHead(ctx, s.db)
	switch {
	case err != nil:
		s.log.Warn("audit head: cannot be read", "err", err)
	case h.Seq > 0:
		s.log.Info("audit head", "head", h.String())
	}
}

// recordConfig puts the configuration the server starts with in the
// audit log, every secret in it masked.
func recordConfig(ctx context.Context, db *gorm.DB, cfg config.Config) error {
	if err := audit.Migrate(db); err != nil {
		return err
	}
	m, err := audit.Mask(cfg)
	if err != nil {
		return err
	}
	return audit.Write(ctx, db, audit.Entry{Kind: audit.KindConfig, User: "server", Data: map[string]any{"config": m}})
}

// launchRecorder is the Launching hook of every sandbox the server
// starts (sandboxkit.Settings.Launching): each start is recorded before
// it runs, for the conversation the engine tells (agentcore.LaunchOf:
// its workspace, investigation and external-agent sandboxes) or that
// ctx names (audit.ForConversation: the office worker, git checkouts
// and push commits), if any; MCP servers are recorded for none.
func launchRecorder(db *gorm.DB, m *sandboxMetrics) func(context.Context, sandboxkit.LaunchRecord) error {
	return func(ctx context.Context, r sandboxkit.LaunchRecord) error {
		if l, ok := agentcore.LaunchOf(ctx); ok {
			return recordLaunch(ctx, db, m, l)
		}
		user, conv := audit.ConversationOf(ctx)
		if user == "" {
			user = "server"
		}
		return recordLaunch(ctx, db, m, agentcore.Launch{
			User: user, Conversation: conv, Kind: r.Kind, Profile: r.Profile, ArgvSHA256: r.ArgvSHA256(),
			Cwd: r.Cwd, Seccomp: r.Seccomp, FilterSHA256: r.FilterSHA256,
		})
	}
}

// recordLaunch puts a start in a sandbox in the audit log
// (launchRecorder), with a use of each
// secret substituted into the command, in one transaction: nothing
// starts unless it is recorded.
func recordLaunch(ctx context.Context, db *gorm.DB, m *sandboxMetrics, l agentcore.Launch) error {
	m.started(string(l.Kind), l.Profile)
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, name := range l.Secrets {
			if _, err := audit.Append(tx, audit.Entry{Kind: audit.KindSecretUse, User: l.User, Data: map[string]string{"name": name, "conversation": l.Conversation}}); err != nil {
				return err
			}
		}
		_, err := audit.Append(tx, audit.Entry{Kind: audit.KindSandboxLaunch, User: l.User, Data: map[string]any{
			"conversation": l.Conversation, "profile": l.Profile, "argv_sha256": l.ArgvSHA256, "cwd": l.Cwd,
			"seccomp": l.Seccomp, "filter_sha256": l.FilterSHA256, "launch": l.Kind,
		}})
		return err
	})
}
