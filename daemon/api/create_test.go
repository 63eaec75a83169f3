package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
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
	if err := sandboxkit.Available(context.Background(), &sandboxkit.Policy{}); err != nil {
		sandboxtest.SkipOrFail(t, "sandbox: %v", err)
	}
	var repo repos.Repository
	a := startAPIWith(t, true, func(db *gorm.DB, dir string, d *Deps) {
		ctx, cancel := context.WithCancel(context.Background())
		q, err := jobs.New(db, jobs.Options{Poll: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		sec, err := secrets.New(db, secrets.NewKeyring("", nil))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := repos.Open(repos.Options{DB: db, Queue: q, Secrets: sec, Dir: filepath.Join(dir, "repos")})
		if err != nil {
			t.Fatal(err)
		}
		queued := make(chan struct{})
		go func() { defer close(queued); q.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-queued })
		ss, err := setup.Open(ctx, setup.Options{Dir: filepath.Join(dir, "setups"), DB: db, Conversations: d.Conversations, Repositories: rs,
			Publish: func(string, string, any) {}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ss.Close)
		d.Repositories, d.Setups = rs, ss
		repo = syncedRepository(t, rs, q, filepath.Join(dir, "remote"))
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

// syncedRepository adds a repository with run_setup (one commit with a
// setup.sh) and syncs it.
func syncedRepository(t *testing.T, rs *repos.Service, q *jobs.Queue, dir string) repos.Repository {
	t.Helper()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", work},
		{"-C", work, "commit", "-q", "--allow-empty", "-m", "first"},
		{"clone", "-q", "--bare", work, bare},
	} {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	ctx := context.Background()
	r, err := rs.Add(ctx, repos.Add{Name: "demo", URL: "file://" + bare, RunSetup: true})
	if err != nil {
		t.Fatal(err)
	}
	j, err := rs.Sync(ctx, r.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); j.Status != jobs.StatusSucceeded; time.Sleep(10 * time.Millisecond) {
		if j, err = q.Get(ctx, j.ID); err != nil || j.Status == jobs.StatusFailed || time.Now().After(deadline) {
			t.Fatalf("sync: %+v %v", j, err)
		}
	}
	return r
}
