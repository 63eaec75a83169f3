package daemon

import (
	"context"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/config"
)

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

// recordLaunch puts a command about to start in a sandbox in the audit
// log (agentcore.Config.Launching), with a use of each secret substituted
// into it, in one transaction: the command does not start unless it is
// recorded.
func recordLaunch(ctx context.Context, db *gorm.DB, l agentcore.Launch) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, name := range l.Secrets {
			if _, err := audit.Append(tx, audit.Entry{Kind: audit.KindSecretUse, User: l.User, Data: map[string]string{"name": name, "conversation": l.Conversation}}); err != nil {
				return err
			}
		}
		_, err := audit.Append(tx, audit.Entry{Kind: audit.KindSandboxLaunch, User: l.User, Data: map[string]any{
			"conversation": l.Conversation, "profile": l.Profile, "argv_sha256": l.ArgvSHA256, "cwd": l.Cwd,
			"seccomp": l.Seccomp, "filter_sha256": l.FilterSHA256,
		}})
		return err
	})
}
