package retrieval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
)

// branchRepo is a bare repository with two branches: main (one commit)
// and release-1.x forked from it, which changes one file and adds one,
// then (a second commit) changes one more. Made by git fast-import.
type branchRepo struct {
	dir                      string
	main, release1, release2 string
}

func makeBranchRepo(t testing.TB) branchRepo {
	t.Helper()
	dir, mainCommit := makeRepo(t, []repoFile{
		{path: "shared/util.go", content: "package shared\n\n// sharedHelper is on every branch.\nfunc sharedHelper() {}\n"},
		{path: "feature/flag.go", content: "package feature\n\n// mainlineFeature is only on main.\nfunc mainlineFeature() {}\n"},
		{path: "docs/notes.md", content: "# Notes\n\nThe quokka documentation.\n"},
	})
	file := func(path, content string) string {
		return fmt.Sprintf("M 100644 inline %s\ndata %d\n%s\n", path, len(content), content)
	}
	stream := "commit refs/heads/release-1.x\ncommitter t <t@example.org> 1700000100 +0000\ndata 2\nr\nfrom " + mainCommit + "\n" +
		file("feature/flag.go", "package feature\n\n// releaseBackport is only on release-1.x.\nfunc releaseBackport() {}\n") +
		file("release/only.go", "package release\n\n// pinnedVersion tells.\nfunc pinnedVersion() {}\n")
	if _, err := gitT(dir, strings.NewReader(stream), "fast-import", "--quiet"); err != nil {
		t.Fatal(err)
	}
	r1, err := gitT(dir, nil, "rev-parse", "release-1.x")
	if err != nil {
		t.Fatal(err)
	}
	stream = "commit refs/heads/release-1.x\ncommitter t <t@example.org> 1700000200 +0000\ndata 2\nr\nfrom " + r1 + "\n" +
		file("docs/notes.md", "# Notes\n\nThe wallaby documentation.\n")
	if _, err := gitT(dir, strings.NewReader(stream), "fast-import", "--quiet"); err != nil {
		t.Fatal(err)
	}
	r2, err := gitT(dir, nil, "rev-parse", "release-1.x")
	if err != nil {
		t.Fatal(err)
	}
	return branchRepo{dir: dir, main: mainCommit, release1: r1, release2: r2}
}

// Several branches of a repository: each is indexed under its own key,
// incrementally from the commit it was indexed at before; a search
// without branch: finds the default branch only, branch: (and -branch:)
// choose; on every backend.
func TestBranches(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			repo := makeBranchRepo(t)
			other, otherCommit := makeRepo(t, []repoFile{{path: "lib/helper.py", content: "def shared_helper():\n    pass\n"}})
			ix, err := New(Options{Backend: bk.open(t)})
			if err != nil {
				t.Fatal(err)
			}
			ingest := func(key, from, to string) Stats {
				t.Helper()
				st, err := ix.IngestStats(t.Context(), key, repo.dir, from, to, nil)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			ingest("a", "", repo.main)
			rel := BranchKey("a", "release-1.x")
			if st := ingest(rel, "", repo.release1); st.Indexed != 4 {
				t.Errorf("release-1.x first indexed %d files, want 4", st.Indexed)
			}
			// The re-sync reads only the file that changed on the branch.
			if st := ingest(rel, repo.release1, repo.release2); st.Indexed != 1 || st.Files != 1 || st.Removed != 0 {
				t.Errorf("release-1.x re-sync: %+v, want 1 file indexed of 1 changed", st)
			}
			if err := ix.Ingest(t.Context(), "b", other, "", otherCommit, nil); err != nil {
				t.Fatal(err)
			}

			s := &Searcher{
				Index: ix,
				Readable: func(_ context.Context, user string) ([]string, bool, error) {
					if user == "root" {
						return nil, true, nil
					}
					return []string{"a"}, false, nil
				},
				Branches: func(context.Context) (map[string][]string, error) {
					return map[string][]string{"a": {"main", "release-1.x"}, "b": {"trunk"}}, nil
				},
			}
			type found struct{ repo, branch, path string }
			for _, tc := range []struct {
				user, repo, query string
				want              []found
			}{
				// The default branch only: no duplicates of shared/util.go.
				{"alice", "", "sharedHelper", []found{{"a", "main", "shared/util.go"}}},
				{"alice", "a", "sharedHelper", []found{{"a", "main", "shared/util.go"}}},
				{"root", "", "sharedHelper", []found{{"a", "main", "shared/util.go"}, {"b", "trunk", "lib/helper.py"}}},
				{"alice", "", "releaseBackport", nil},
				{"alice", "", "releaseBackport branch:release-1.x", []found{{"a", "release-1.x", "feature/flag.go"}}},
				{"alice", "", "mainlineFeature branch:release-1.x", nil},
				{"alice", "", "pinnedVersion branch:release-1.x", []found{{"a", "release-1.x", "release/only.go"}}},
				{"alice", "", "sharedHelper branch:main", []found{{"a", "main", "shared/util.go"}}},
				{"alice", "", "sharedHelper branch:release-1.x", []found{{"a", "release-1.x", "shared/util.go"}}},
				// The re-sync's change is in, the old text out.
				{"alice", "", "wallaby branch:release-1.x", []found{{"a", "release-1.x", "docs/notes.md"}}},
				{"alice", "", "quokka branch:release-1.x", nil},
				{"alice", "", "quokka", []found{{"a", "main", "docs/notes.md"}}},
				{"alice", "", "sharedHelper -branch:main", []found{{"a", "release-1.x", "shared/util.go"}}},
				{"root", "", "sharedHelper branch:trunk", []found{{"b", "trunk", "lib/helper.py"}}},
				// repo: matches the repository, never the branch in its key.
				{"alice", "", "sharedHelper branch:release-1.x repo:release", nil},
				{"alice", "", "sharedHelper branch:release-1.x -repo:a", nil},
				{"alice", "", "sharedHelper branch:nope", nil},
				// alice may not read b: branch: does not widen that.
				{"alice", "", "shared_helper branch:trunk", nil},
			} {
				hits, err := s.SearchIn(t.Context(), tc.user, tc.repo, tc.query, 10)
				if err != nil {
					t.Errorf("%s %q: %v", tc.user, tc.query, err)
					continue
				}
				var got []found
				for _, h := range hits {
					got = append(got, found{h.Repository, h.Branch, h.Path})
				}
				slices.SortFunc(got, func(x, y found) int { return strings.Compare(x.repo+x.path, y.repo+y.path) })
				if !slices.Equal(got, tc.want) {
					t.Errorf("%s %q: %v, want %v", tc.user, tc.query, got, tc.want)
				}
			}

			// search_code: the conversation's branch by default, with the
			// scope's note; the query's own branch: instead, without it.
			s.Scope = func(context.Context, string, string) (Scope, error) {
				return Scope{Repository: "a", Branch: "release-1.x", Note: "Note: searched release-1.x."}, nil
			}
			for _, tc := range []struct{ query, want, notWant string }{
				{"sharedHelper", "Note: searched release-1.x.\n\nshared/util.go:1-4 (repository a, branch release-1.x)\n", "main"},
				{"releaseBackport", "feature/flag.go:1-4 (repository a, branch release-1.x)", "mainlineFeature"},
				{"sharedHelper branch:main", "shared/util.go:1-4 (repository a)\n", "Note:"},
			} {
				out, err := s.Tool().Run(t.Context(), &agentcore.Call{Name: "search_code", User: "alice", Conversation: "c", Arguments: json.RawMessage(`{"query":"` + tc.query + `"}`)})
				if err != nil || !strings.HasPrefix(out, tc.want) && !strings.Contains(out, tc.want) || strings.Contains(out, tc.notWant) {
					t.Errorf("search_code %q: %q, %v; want %q, not %q", tc.query, out, err, tc.want, tc.notWant)
				}
			}
		})
	}
}

// Hostile branch: values are 400s with a position (ErrBadQuery), never
// another error: nothing typed reaches the index or git.
func TestBranchQueryHostile(t *testing.T) {
	ix, err := New(Options{Backend: backends[0].open(t)})
	if err != nil {
		t.Fatal(err)
	}
	s := &Searcher{Index: ix, Branches: func(context.Context) (map[string][]string, error) {
		return map[string][]string{"a": {"main"}}, nil
	}}
	for _, tc := range []struct{ query, msg string }{
		{`x branch:"; DROP`, "column 10: unterminated phrase"},
		{`x branch:"; DROP TABLE retrieval_chunks; --"`, "column 10: branch: refused branch name"},
		{"x branch:ma\x00in", "control character"},
		{"x branch:" + strings.Repeat("a", 10<<10), "longer than 1024 bytes"},
		{"x branch:refs/heads/main", "column 10: branch: refused branch name"},
		{"x branch:-delete", "column 10: branch: refused branch name"},
		{"x branch:a..b", "contains '..'"},
		{"x branch:", "branch: needs a value"},
		{"branch:main", "branch: only chooses where to search"},
		{"-branch:main", "branch: only chooses where to search"},
	} {
		hits, err := s.SearchIn(t.Context(), "u", "", tc.query, 10)
		var se *SyntaxError
		if !errors.Is(err, ErrBadQuery) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%.40q: %v, %v; want a bad query with %q", tc.query, hits, err, tc.msg)
		}
		if strings.Contains(tc.msg, "column") && !errors.As(err, &se) {
			t.Errorf("%.40q: %v is not a SyntaxError", tc.query, err)
		}
	}
}
