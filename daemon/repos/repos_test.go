package repos

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func TestMain(m *testing.M) {
	sandboxkit.Main()
	os.Exit(m.Run())
}

// remote makes a bare repository with one commit on main and returns its
// file:// URL and path.
func remote(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", "work"},
		{"-C", "work", "commit", "-q", "--allow-empty", "-m", "first"},
		{"clone", "-q", "--bare", "work", "remote.git"},
	} {
		run(t, dir, args...)
	}
	return "file://" + filepath.Join(dir, "remote.git"), filepath.Join(dir, "work")
}

func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// service opens a Service on a fresh database, with its queue running.
func service(t *testing.T, o Options) (*Service, *jobs.Queue) {
	t.Helper()
	db, err := store.Open(context.Background(), filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(db) })
	q, err := jobs.New(db, jobs.Options{Poll: 10 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(db, secrets.NewKeyring("", nil))
	if err != nil {
		t.Fatal(err)
	}
	o.DB, o.Queue, o.Secrets, o.Dir = db, q, sec, filepath.Join(t.TempDir(), "repos")
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, q
}

func syncNow(t *testing.T, s *Service, q *jobs.Queue, id string) jobs.Job {
	t.Helper()
	j, err := s.Sync(context.Background(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err = q.Get(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == jobs.StatusSucceeded || j.Status == jobs.StatusFailed {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("sync still %s", j.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The indexing step runs after the fetch, from the last indexed commit
// to the new head, and only its success moves indexed_commit.
func TestSyncIndexer(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	fail := true
	s, q := service(t, Options{Indexer: func(ctx context.Context, repoID, gitDir, from, to string, progress func(done, total int64)) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, from+">"+to)
		progress(2, 2)
		if fail {
			return errors.New("index unavailable")
		}
		return nil
	}})
	url, work := remote(t)
	r, err := s.Add(context.Background(), Add{Name: "demo", URL: url})
	if err != nil {
		t.Fatal(err)
	}
	head := run(t, work, "rev-parse", "HEAD")
	if j := syncNow(t, s, q, r.ID); j.Status != jobs.StatusFailed || !strings.Contains(j.LastError, "index unavailable") {
		t.Fatalf("sync with a failing index: %+v", j)
	}
	r, _ = s.Get(context.Background(), r.ID)
	if r.Head != head || r.IndexedCommit != "" {
		t.Fatalf("after a failed index: head %q indexed %q", r.Head, r.IndexedCommit)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	j := syncNow(t, s, q, r.ID)
	if j.Status != jobs.StatusSucceeded || j.Progress == nil || j.Progress.Unit != "files" {
		t.Fatalf("sync: %+v %+v", j, j.Progress)
	}
	r, _ = s.Get(context.Background(), r.ID)
	if r.IndexedCommit != head {
		t.Fatalf("indexed %q, want %q", r.IndexedCommit, head)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[len(calls)-1] != ">"+head {
		t.Fatalf("indexer calls %q", calls)
	}
}

// Conversations on one commit share one snapshot; the GC removes it once
// none uses it.
func TestSnapshots(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(context.Background(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "sandbox: %v", err)
	}
	s, q := service(t, Options{})
	url, _ := remote(t)
	ctx := context.Background()
	r, err := s.Add(ctx, Add{Name: "demo", URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, r, ""); !errors.Is(err, ErrNotSynced) {
		t.Fatalf("Resolve before a sync: %v", err)
	}
	syncNow(t, s, q, r.ID)
	r, _ = s.Get(ctx, r.ID)
	commit, err := s.Resolve(ctx, r, "main")
	if err != nil || commit != r.Head {
		t.Fatalf("Resolve(main) = %s, %v", commit, err)
	}
	if _, err := s.Resolve(ctx, r, "--output=/tmp/x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Resolve of an option: %v", err)
	}
	a, err := s.Snapshot(ctx, r.ID, commit)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Snapshot(ctx, r.ID, commit)
	if err != nil || a != b {
		t.Fatalf("second snapshot %s, %v; want the shared %s", b, err, a)
	}
	name := SnapshotName(r.ID, commit)
	if removed, err := s.GCSnapshots(ctx, func(context.Context) (map[string]bool, error) { return map[string]bool{name: true}, nil }); err != nil || len(removed) != 0 {
		t.Fatalf("GC of a used snapshot removed %v, %v", removed, err)
	}
	if removed, err := s.GCSnapshots(ctx, func(context.Context) (map[string]bool, error) { return nil, nil }); err != nil || len(removed) != 1 || removed[0] != name {
		t.Fatalf("GC of an unused snapshot removed %v, %v", removed, err)
	}
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the snapshot is still there: %v", err)
	}
}

// A URL with a token, stored before Add refused them, loses it when the
// service opens; Add refuses it now.
func TestStoredURLCredentialsStripped(t *testing.T) {
	s, _ := service(t, Options{})
	old := []Repository{
		{ID: newID(), Name: "token", URL: "https://ghp_T0KEN@example.com/org/r.git", Branch: "main"},
		{ID: newID(), Name: "userpw", URL: "https://bot:pw-s3cr3t@example.com/org/r.git", Branch: "main"},
		{ID: newID(), Name: "sshpw", URL: "ssh://git:pw-s3cr3t@example.com/org/r.git", Branch: "main"},
		{ID: newID(), Name: "clean", URL: "ssh://git@example.com/org/r.git", Branch: "main"},
	}
	for _, r := range old {
		r.Created, r.Updated = time.Now(), time.Now()
		if err := s.o.DB.Create(&r).Error; err != nil {
			t.Fatal(err)
		}
	}
	o := s.o
	o.Queue = nil
	s2, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s2.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"token":  "https://example.com/org/r.git",
		"userpw": "https://example.com/org/r.git",
		"sshpw":  "ssh://git@example.com/org/r.git",
		"clean":  "ssh://git@example.com/org/r.git",
	}
	for _, r := range rs {
		if r.URL != want[r.Name] {
			t.Errorf("%s: stored URL %q, want %q", r.Name, r.URL, want[r.Name])
		}
	}
	if _, err := s2.Add(context.Background(), Add{Name: "new", URL: "https://ghp_T0KEN@example.com/org/r.git"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "instance secret") {
		t.Errorf("Add with a token in the URL = %v, want ErrInvalid naming instance secrets", err)
	}
}
