package daemon_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/retrieval"
)

// ingestInto indexes repository id (a git directory at its commit head)
// into the instance's index files, as its sync job does.
func ingestInto(t *testing.T, in *instance, id, dir, head string) {
	t.Helper()
	ctx := context.Background()
	var dbs []*sql.DB
	for i := range retrieval.Shards {
		db, err := retrieval.OpenShard(ctx, filepath.Join(in.config().DataDir(), retrieval.ShardFile(i)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		dbs = append(dbs, db)
	}
	be, err := retrieval.NewSQLite(ctx, dbs...)
	if err != nil {
		t.Fatal(err)
	}
	ix, _ := retrieval.New(retrieval.Options{Backend: be})
	if err := ix.Ingest(ctx, id, dir, "", head, nil); err != nil {
		t.Fatal(err)
	}
}

// GET /api/v1/search finds what was ingested into the instance's code
// index (the shard files beside its database), with paths and lines; bad
// parameters are 400s, a repository that does not exist is 404.
func TestSearchRoute(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("alice", pw, false)
	in.addUser("root", pw, true)
	p := in.start()

	// A repository, indexed into the running server's index files as
	// the sync job does.
	repo, head := searchRepo(t)
	var added struct{ ID string }
	p.login("root", pw).must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "search", "url": "file://" + repo, "branch": "main"}, &added)
	for i := range retrieval.Shards {
		f := filepath.Join(in.config().DataDir(), retrieval.ShardFile(i))
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the server's index file %s: %v, %v; want it 0600", f, fi, err)
		}
	}
	ingestInto(t, in, added.ID, repo, head)

	alice := p.login("alice", pw)
	var res struct {
		Results []struct {
			Repository, Path, Snippet string
			StartLine                 int `json:"start_line"`
			EndLine                   int `json:"end_line"`
			Score                     float64
		}
	}
	alice.must(http.StatusOK, "GET", "/api/v1/search?q="+url.QueryEscape("load_settings")+"&repository="+added.ID+"&k=3", nil, &res)
	if len(res.Results) != 1 {
		t.Fatalf("results %+v, want conf/load.go", res.Results)
	}
	r := res.Results[0]
	if r.Repository != added.ID || r.Path != "conf/load.go" || r.StartLine != 1 || r.EndLine != 4 || !strings.Contains(r.Snippet, "func loadSettings()") || r.Score <= 0 {
		t.Errorf("hit %+v", r)
	}
	for _, unknown := range []string{"another", "repo_000000000000000000000000", url.QueryEscape(added.ID + "x")} {
		if b := alice.must(http.StatusNotFound, "GET", "/api/v1/search?q=loadSettings&repository="+unknown, nil, nil); !strings.Contains(string(b), `"code":"not_found"`) {
			t.Errorf("repository=%s: %s", unknown, b)
		}
	}
	for _, q := range []string{"", "?q=", "?q=%22%22", "?q=xy&k=0", "?q=xy&k=101", "?q=xy&k=ten", "?q=" + strings.Repeat("a", 1025), "?q=the+a+x"} {
		alice.must(http.StatusBadRequest, "GET", "/api/v1/search"+q, nil, nil)
	}
	p.anon().must(http.StatusUnauthorized, "GET", "/api/v1/search?q=x", nil, nil)
}

// searchRepo is a bare repository with conf/load.go; its head commit.
func searchRepo(t *testing.T) (dir, head string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "r.git")
	stream := "commit refs/heads/main\ncommitter t <t@example.org> 1700000000 +0000\ndata 2\nr\n" +
		"M 100644 inline conf/load.go\ndata 63\npackage conf\n\n// loadSettings reads it.\nfunc loadSettings() {}\n\n"
	for _, args := range [][]string{{"init", "-q", "--bare", dir}, {"--git-dir", dir, "fast-import", "--quiet"}} {
		cmd := exec.Command("git", args...)
		cmd.Stdin = strings.NewReader(stream)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	out, err := exec.Command("git", "--git-dir", dir, "rev-parse", "main").Output()
	if err != nil {
		t.Fatal(err)
	}
	return dir, strings.TrimSpace(string(out))
}

// An index that an older version built in the instance database keeps
// working there: the server opens no index files beside it.
func TestSearchRouteIndexInDatabase(t *testing.T) {
	in := newInstance(t, "store: {backend: sqlite}\n") // the index older versions kept in the SQLite database
	in.addUser("alice", pw, false)
	repo, head := searchRepo(t)
	ctx := context.Background()
	db := in.openDB()
	sqlDB, _ := db.DB()
	be, err := retrieval.NewSQLite(ctx, sqlDB)
	if err != nil {
		t.Fatal(err)
	}
	ix, _ := retrieval.New(retrieval.Options{Backend: be})
	if err := ix.Ingest(ctx, "repo1", repo, "", head, nil); err != nil {
		t.Fatal(err)
	}
	store.Close(db)

	p := in.start()
	var res struct{ Results []struct{ Path string } }
	p.login("alice", pw).must(http.StatusOK, "GET", "/api/v1/search?q=loadSettings", nil, &res)
	if len(res.Results) != 1 || res.Results[0].Path != "conf/load.go" {
		t.Fatalf("results %+v, want conf/load.go", res.Results)
	}
	if _, err := os.Stat(filepath.Join(in.config().DataDir(), retrieval.ShardFile(0))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an index file beside the database with an index in it: %v", err)
	}
}
