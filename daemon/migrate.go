package daemon

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/cluster"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/setup"
	"github.com/codumentor/codumentor/daemon/store"
)

// Migrate creates, or brings up to date, every table the server keeps in
// db: each package's own migration, as its constructor runs it, without
// anything else a server does at its start (no recovery, no directories,
// no records). The server runs it first (openStores); codumentorctl
// migrate and restore make an empty PostgreSQL database with it before
// they copy rows in. Every table a server makes must be made here
// (TestMigrateSchema checks): a table missing from this list is one
// codumentorctl migrate refuses to copy.
func Migrate(ctx context.Context, db *gorm.DB) error {
	db = db.WithContext(ctx)
	if err := audit.Migrate(db); err != nil {
		return err
	}
	if _, err := store.NewConversations(db); err != nil {
		return err
	}
	if _, err := store.NewApprovalRules(db); err != nil {
		return err
	}
	users, err := auth.NewUsers(db)
	if err != nil {
		return err
	}
	// Made whether or not OIDC is configured, so that a deployment
	// that configures it later finds them with the rest.
	if _, err := auth.NewOIDC(users, auth.OIDCOptions{}); err != nil {
		return err
	}
	if _, err := secrets.New(db, secrets.NewKeyring("", nil)); err != nil {
		return err
	}
	if _, err := jobs.New(db, jobs.Options{}); err != nil {
		return err
	}
	if _, err := store.NewUsage(db); err != nil {
		return err
	}
	if _, err := repos.Migrate(db); err != nil {
		return err
	}
	if err := setup.Migrate(db); err != nil {
		return err
	}
	if _, err := store.NewAttachments(db); err != nil {
		return err
	}
	if store.Backend(db) == store.BackendPostgres {
		// The servers sharing the database check their secret in it.
		if err := auth.MigrateSharedSecret(db); err != nil {
			return err
		}
		// The nodes, as cluster.Open migrates them.
		if err := db.AutoMigrate(&cluster.Node{}); err != nil {
			return fmt.Errorf("cluster: migrating the nodes table: %w", err)
		}
	}
	return nil
}
