package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/repos/repostest"
	"github.com/codumentor/codumentor/daemon/setup"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func TestMain(m *testing.M) {
	sandboxkit.Main()
	os.Exit(m.Run())
}

// A conversation on a repository with run_setup is created with its
// repository and its pending setup row in one transaction: a failure
// between them, where nothing can undo what was written (the process
// dies), leaves no conversation without the setup its tools wait for.
func TestConversationCreatedWithItsSetupRow(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(context.Background(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "sandbox: %v", err)
	}
	var repo repos.Repository
	a := startAPIWith(t, true, func(db *gorm.DB, dir string, d *Deps) {
		var rs *repos.Service
		rs, repo, _ = repostest.Synced(t, db, filepath.Join(dir, "repo"), nil, repos.Add{Name: "demo", RunSetup: true})
		ss, err := setup.Open(context.Background(), setup.Options{Dir: filepath.Join(dir, "setups"), DB: db, Conversations: d.Conversations, Repositories: rs,
			Publish: func(string, string, any) {}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ss.Close)
		d.Repositories, d.Setups = rs, ss
	})
	create := `{"title":"on demo","repository":"` + repo.ID + `"}`
	st, body := a.do(t, http.DefaultClient, "POST", "/api/v1/conversations", create)
	var conv store.Conversation
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &conv) != nil || conv.Repository != repo.ID {
		t.Fatalf("create: %d %s", st, body)
	}
	var rows int64
	if err := a.db.Table("conversation_setups").Where("conversation = ?", conv.ID).Count(&rows).Error; err != nil || rows != 1 {
		t.Fatalf("%d setup rows (%v) of the new conversation; want one", rows, err)
	}
	// The setup row cannot be written, and neither can anything be
	// undone afterwards.
	fail := func(table string) func(*gorm.DB) {
		return func(tx *gorm.DB) {
			if tx.Statement.Table == table {
				tx.AddError(errors.New("disk I/O error"))
			}
		}
	}
	if err := a.db.Callback().Create().Before("gorm:create").Register("test:fail-setup-row", fail("conversation_setups")); err != nil {
		t.Fatal(err)
	}
	if err := a.db.Callback().Delete().Before("gorm:delete").Register("test:no-undo", fail("conversations")); err != nil {
		t.Fatal(err)
	}
	st, body = a.do(t, http.DefaultClient, "POST", "/api/v1/conversations", create)
	if st != http.StatusInternalServerError || strings.Contains(body, "disk") {
		t.Fatalf("create: %d %s; want a generic 500", st, body)
	}
	var n int64
	if err := a.db.Model(&store.Conversation{}).Count(&n).Error; err != nil || n != 1 {
		t.Fatalf("%d conversations (%v); want only the first", n, err)
	}
}
