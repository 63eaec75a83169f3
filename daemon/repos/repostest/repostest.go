// Package repostest makes a repository Service over a real mirror for
// the tests of its users.
package repostest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
)

// Synced opens a Service on db (its mirrors under dir, its queue
// running until the test ends), adds a repository as add says (its URL
// set) whose one commit on main holds files, and syncs it. It returns
// the Service, the repository and its commit. The sync's fetch runs in
// a sandbox: the test binary calls sandboxkit.Main in TestMain.
func Synced(t testing.TB, db *gorm.DB, dir string, files map[string]string, add repos.Add) (*repos.Service, repos.Repository, string) {
	t.Helper()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	git(t, dir, "init", "-q", "-b", "main", work)
	for name, data := range files {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, work, "add", "-A")
	git(t, work, "commit", "-q", "--allow-empty", "-m", "first")
	git(t, dir, "clone", "-q", "--bare", work, bare)

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
	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan struct{})
	go func() { defer close(queued); q.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-queued })

	add.URL = "file://" + bare
	r, err := rs.Add(ctx, add)
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
	if r, err = rs.Get(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	commit, err := rs.Resolve(ctx, r, "")
	if err != nil {
		t.Fatal(err)
	}
	return rs, r, commit
}

func git(t testing.TB, dir string, args ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
}
