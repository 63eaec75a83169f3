package repos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/randid"
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
func service(t testing.TB, o Options) (*Service, *jobs.Queue) {
	t.Helper()
	db := storetest.Open(t)
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
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		j, err = q.Get(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != jobs.StatusSucceeded && j.Status != jobs.StatusFailed {
			return fmt.Errorf("sync still %s", j.Status)
		}
		return nil
	})
	return j
}

// The indexing step runs after the fetch, from the last indexed commit
// to the new head, and only its success moves indexed_commit.
func TestSyncIndexer(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	fail := true
	s, q := service(t, Options{Indexer: func(ctx context.Context, repoID, branch, gitDir, from, to string, progress func(done, total int64)) error {
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
	// The GC keeps what Snapshot made while a conversation is on its
	// commit: the store names the pairs in use as Snapshot does.
	convs, err := store.NewConversations(s.o.DB)
	if err != nil {
		t.Fatal(err)
	}
	conv, err := convs.CreateWith(ctx, "user_1", store.New{Repository: r.ID, BaseCommit: commit}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inUse := func(ctx context.Context) (map[string]bool, error) { return convs.RepositoryCommits(ctx, SnapshotName) }
	if removed, err := s.GCSnapshots(ctx, inUse); err != nil || len(removed) != 0 {
		t.Fatalf("GC of a used snapshot removed %v, %v", removed, err)
	}
	if _, err := os.Stat(a); err != nil {
		t.Fatalf("the used snapshot is gone: %v", err)
	}
	if err := convs.Delete(ctx, "user_1", conv.ID); err != nil {
		t.Fatal(err)
	}
	name := SnapshotName(r.ID, commit)
	if removed, err := s.GCSnapshots(ctx, inUse); err != nil || len(removed) != 1 || removed[0] != name {
		t.Fatalf("GC of an unused snapshot removed %v, %v", removed, err)
	}
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the snapshot is still there: %v", err)
	}
}

// A checkout held up (on a FIFO in the mirror that git opens when it
// reads the object store, until the test opens its other end) delays
// neither another repository's snapshot nor the GC; calls for the same
// snapshot share that one checkout, and a caller that gives up does not
// end it for the others.
func TestSnapshotSingleFlight(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(context.Background(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "sandbox: %v", err)
	}
	var launches atomic.Int32
	s, q := service(t, Options{Sandbox: git.Sandbox{Settings: sandboxkit.Settings{Launching: func(context.Context, sandboxkit.LaunchRecord) error {
		launches.Add(1)
		return nil
	}}}})
	ctx := context.Background()
	var rs []Repository
	for _, name := range []string{"slow", "other"} {
		url, _ := remote(t)
		r, err := s.Add(ctx, Add{Name: name, URL: url})
		if err != nil {
			t.Fatal(err)
		}
		syncNow(t, s, q, r.ID)
		r, _ = s.Get(ctx, r.ID)
		rs = append(rs, r)
	}
	slow, other := rs[0], rs[1]
	fifo := filepath.Join(s.Mirror(slow.ID), "objects", "info", "alternates")
	os.MkdirAll(filepath.Dir(fifo), 0o755)
	os.Remove(fifo)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	launches.Store(0)
	joined := make(chan string, 1)
	s.snapMu.Lock()
	s.joined = func(name string) { joined <- name }
	s.snapMu.Unlock()

	stuck := time.After(2 * time.Minute)
	type result struct {
		dir string
		err error
	}
	snapshot := func(ctx context.Context, r Repository) chan result {
		c := make(chan result, 1)
		go func() {
			d, err := s.Snapshot(ctx, r.ID, r.Head)
			c <- result{d, err}
		}()
		return c
	}
	wait := func(what string, c chan result) result {
		t.Helper()
		select {
		case r := <-c:
			return r
		case <-stuck:
			t.Fatalf("%s: stuck", what)
			return result{}
		}
	}
	first := snapshot(ctx, slow)
	opened := make(chan *os.File, 1)
	go func() {
		// Returns once the checkout has opened the FIFO.
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
		}
		opened <- w
	}()
	var w *os.File
	select {
	case w = <-opened:
	case <-stuck:
		t.Fatal("the checkout never opened the mirror's FIFO")
	}
	defer w.Close()

	if r := wait("the other repository's snapshot", snapshot(ctx, other)); r.err != nil {
		t.Fatalf("the other repository's snapshot: %v", r.err)
	}
	gcDone := make(chan error, 1)
	go func() {
		removed, err := s.GCSnapshots(ctx, func(context.Context) (map[string]bool, error) {
			return map[string]bool{SnapshotName(other.ID, other.Head): true}, nil
		})
		if err == nil && len(removed) > 0 {
			err = fmt.Errorf("removed %v, a checkout under way", removed)
		}
		gcDone <- err
	}()
	select {
	case err := <-gcDone:
		if err != nil {
			t.Fatalf("GC during a checkout: %v", err)
		}
	case <-stuck:
		t.Fatal("GC waited for a checkout")
	}

	second := snapshot(ctx, slow)
	join := func(what string) {
		t.Helper()
		select {
		case name := <-joined:
			if name != SnapshotName(slow.ID, slow.Head) {
				t.Fatalf("%s joined %s", what, name)
			}
		case <-stuck:
			t.Fatalf("%s did not join the checkout under way", what)
		}
	}
	join("the second call")
	gone, cancel := context.WithCancel(ctx)
	third := snapshot(gone, slow)
	join("the third call")
	cancel()
	if r := wait("a cancelled call", third); !errors.Is(r.err, ErrSnapshot) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a cancelled call = %q, %v; want ErrSnapshot and context.Canceled", r.dir, r.err)
	}

	w.Close() // the checkout reads no alternates and goes on
	r1, r2 := wait("the first call", first), wait("the second call", second)
	if r1.err != nil || r2.err != nil || r1.dir != r2.dir || r1.dir != s.snapshotDir(slow.ID, slow.Head) {
		t.Fatalf("the two calls: %q, %v and %q, %v", r1.dir, r1.err, r2.dir, r2.err)
	}
	if n := launches.Load(); n != 2 {
		t.Fatalf("%d sandboxed checkouts, want 2 (one per repository)", n)
	}
	ents, err := os.ReadDir(filepath.Join(s.o.Dir, "snapshots"))
	if err != nil || len(ents) != 2 {
		t.Fatalf("snapshots/: %v, %v; want the two snapshots and no leftover", ents, err)
	}
}

// A URL with a token, stored before Add refused them, loses it when the
// service opens; Add refuses it now.
func TestStoredURLCredentialsStripped(t *testing.T) {
	s, _ := service(t, Options{})
	old := []Repository{
		{ID: randid.New("repo_"), Name: "token", URL: "https://ghp_T0KEN@example.com/org/r.git", Branch: "main"},
		{ID: randid.New("repo_"), Name: "userpw", URL: "https://bot:pw-s3cr3t@example.com/org/r.git", Branch: "main"},
		{ID: randid.New("repo_"), Name: "sshpw", URL: "ssh://git:pw-s3cr3t@example.com/org/r.git", Branch: "main"},
		{ID: randid.New("repo_"), Name: "clean", URL: "ssh://git@example.com/org/r.git", Branch: "main"},
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
