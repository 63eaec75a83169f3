package repos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/integrations/retrieval"
)

// Add takes a list of branches, the default first, checked as git
// check-ref-format would, and bounded.
func TestAddBranches(t *testing.T) {
	s, _ := service(t, Options{})
	url, _ := remote(t)
	many := make([]string, MaxBranches+1)
	for i := range many {
		many[i] = fmt.Sprintf("b%d", i)
	}
	for i, tc := range []struct {
		branch   string
		branches []string
		want     []string // the stored branches; nil: refused
		err      string
	}{
		{"", nil, []string{"main"}, ""},
		{"trunk", nil, []string{"trunk"}, ""},
		{"", []string{"main", "release-1.x"}, []string{"main", "release-1.x"}, ""},
		{"main", []string{"main", "release/1.x"}, []string{"main", "release/1.x"}, ""},
		{"", many[:MaxBranches], many[:MaxBranches], ""},
		{"", many, nil, "at most 16"},
		{"release-1.x", []string{"main", "release-1.x"}, nil, "must be the first of branches"},
		{"", []string{"main", "main"}, nil, "listed twice"},
		{"", []string{"main", "a..b"}, nil, "'..'"},
		{"", []string{"main", "-x"}, nil, "starts with '-'"},
		{"", []string{"main", "refs/heads/x"}, nil, "refs/"},
		{"", []string{"main", "x\x00y"}, nil, "control character"},
		{"", []string{"main", "x y"}, nil, "a space"},
		{"", []string{"main", ""}, nil, "empty"},
		{"", []string{"main", strings.Repeat("a", 10<<10)}, nil, "longer than 255"},
	} {
		r, err := s.Add(t.Context(), Add{Name: fmt.Sprintf("r%d", i), URL: url, Branch: tc.branch, Branches: tc.branches})
		if tc.want == nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %q: %v, want ErrInvalid with %q", tc.branch, tc.branches, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q %q: %v", tc.branch, tc.branches, err)
			continue
		}
		got, err := s.Get(t.Context(), r.ID)
		if err != nil || !slices.Equal(got.Branches, tc.want) || got.Branch != tc.want[0] {
			t.Errorf("%q %q: stored %q %q, %v; want %q", tc.branch, tc.branches, got.Branch, got.Branches, err, tc.want)
		}
	}
}

// A repository of two branches with different files: each is fetched
// and indexed under its own key; a re-sync indexes only the branch that
// moved, and of it only the file that changed; a search without branch:
// finds the default branch's files, branch: the other's; deleting the
// repository empties both.
func TestSyncBranches(t *testing.T) {
	url, work := remote(t)
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("shared.go", "package demo\n\n// sharedHelper is on both branches.\nfunc sharedHelper() {}\n")
	write("feature.go", "package demo\n\n// mainlineOnly is on main.\nfunc mainlineOnly() {}\n")
	run(t, work, "add", ".")
	run(t, work, "commit", "-q", "-m", "main")
	run(t, work, "checkout", "-q", "-b", "release-1.x")
	write("feature.go", "package demo\n\n// releaseOnly is on release-1.x.\nfunc releaseOnly() {}\n")
	write("notes.md", "# Notes\n\nThe quokka release.\n")
	run(t, work, "add", ".")
	run(t, work, "commit", "-q", "-m", "release")
	bare := strings.TrimPrefix(url, "file://")
	run(t, work, "push", "-q", bare, "main", "release-1.x")

	shard, err := retrieval.OpenShard(t.Context(), filepath.Join(t.TempDir(), retrieval.ShardFile(0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shard.Close() })
	be, err := retrieval.NewSQLite(t.Context(), shard)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := retrieval.New(retrieval.Options{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		branch, from, to string
		indexed, files   int
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	s, q := service(t, Options{
		Indexer: func(ctx context.Context, repoID, branch, gitDir, from, to string, progress func(done, total int64)) error {
			st, err := ix.IngestStats(ctx, retrieval.BranchKey(repoID, branch), gitDir, from, to, progress)
			mu.Lock()
			calls = append(calls, call{branch, from, to, st.Indexed, st.Files})
			mu.Unlock()
			return err
		},
		Unindex: func(ctx context.Context, repoID, branch string) error {
			return ix.DeleteRepository(ctx, retrieval.BranchKey(repoID, branch))
		},
	})
	r, err := s.Add(t.Context(), Add{Name: "demo", URL: url, Branches: []string{"main", "release-1.x"}})
	if err != nil {
		t.Fatal(err)
	}
	if j := syncNow(t, s, q, r.ID); j.Status != jobs.StatusSucceeded {
		t.Fatalf("sync: %+v", j)
	}
	mainHead, rel1 := run(t, work, "rev-parse", "main"), run(t, work, "rev-parse", "release-1.x")
	r, _ = s.Get(t.Context(), r.ID)
	if r.Head != mainHead || r.IndexedCommit != mainHead || r.Heads["release-1.x"] != rel1 || r.Indexed("release-1.x") != rel1 || r.Indexed("main") != mainHead {
		t.Fatalf("after the first sync: %+v", r)
	}
	searcher := &retrieval.Searcher{Index: ix, Branches: s.Branches}
	search := func(query string) []string {
		t.Helper()
		hits, err := searcher.SearchIn(t.Context(), "u", r.ID, query, 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hits {
			out = append(out, h.Branch+":"+h.Path)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"sharedHelper", []string{"main:shared.go"}},
		{"releaseOnly", nil},
		{"mainlineOnly", []string{"main:feature.go"}},
		{"releaseOnly branch:release-1.x", []string{"release-1.x:feature.go"}},
		{"mainlineOnly branch:release-1.x", nil},
		{"sharedHelper branch:release-1.x", []string{"release-1.x:shared.go"}},
	} {
		if got := search(tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.query, got, tc.want)
		}
	}

	// Only release-1.x moves, by one file.
	write("notes.md", "# Notes\n\nThe wallaby release.\n")
	run(t, work, "commit", "-q", "-am", "notes")
	run(t, work, "push", "-q", bare, "release-1.x")
	rel2 := run(t, work, "rev-parse", "release-1.x")
	mu.Lock()
	calls = nil
	mu.Unlock()
	if j := syncNow(t, s, q, r.ID); j.Status != jobs.StatusSucceeded {
		t.Fatalf("re-sync: %+v", j)
	}
	mu.Lock()
	if want := []call{{"release-1.x", rel1, rel2, 1, 1}}; !slices.Equal(calls, want) {
		t.Errorf("re-sync indexed %+v, want %+v", calls, want)
	}
	mu.Unlock()
	r, _ = s.Get(t.Context(), r.ID)
	if r.Indexed("release-1.x") != rel2 || r.IndexedCommit != mainHead {
		t.Errorf("after the re-sync: %+v", r)
	}
	if got := search("wallaby branch:release-1.x"); !slices.Equal(got, []string{"release-1.x:notes.md"}) {
		t.Errorf("wallaby: %q", got)
	}
	if got := search("quokka branch:release-1.x"); got != nil {
		t.Errorf("quokka after the change: %q", got)
	}

	// The commit a conversation started from: the branch indexed at it,
	// else the first whose history has it.
	for _, tc := range []struct {
		commit, branch string
		exact          bool
	}{
		{mainHead, "main", true},
		{rel2, "release-1.x", true},
		{rel1, "release-1.x", false},
		{strings.Repeat("0", 40), "", false},
	} {
		b, exact, err := s.BranchOf(t.Context(), r, tc.commit)
		if err != nil || b != tc.branch || exact != tc.exact {
			t.Errorf("BranchOf(%.12s) = %q, %v, %v; want %q, %v", tc.commit, b, exact, err, tc.branch, tc.exact)
		}
	}

	if err := s.Delete(t.Context(), r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	open := &retrieval.Searcher{Index: ix}
	hits, err := open.SearchIn(t.Context(), "u", "", "sharedHelper branch:release-1.x", 10)
	if err != nil || len(hits) != 0 {
		t.Errorf("after Delete: %+v, %v", hits, err)
	}
	for _, key := range []string{r.ID, retrieval.BranchKey(r.ID, "release-1.x")} {
		hits, err := open.SearchIn(t.Context(), "u", key, "sharedHelper", 10)
		if err != nil || len(hits) != 0 {
			t.Errorf("after Delete, key %s: %+v, %v", key, hits, err)
		}
	}
}
