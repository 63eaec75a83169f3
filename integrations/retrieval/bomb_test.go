package retrieval

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// bomb describes a "git bomb": a tree that refers to one subtree width
// times at each of depth levels, width^depth paths to one blob from
// depth+2 objects.
type bomb struct {
	width, depth int
	mode         string // of the leaves (default 100644; 120000: symlinks)
	nameLen      int    // bytes of each entry's name (default 2: "d0")
}

// makeBomb writes b into the bare repository dir (created if missing)
// with git hash-object and mktree, and returns its commit.
func makeBomb(t testing.TB, dir string, b bomb) string {
	t.Helper()
	if _, err := gitT(dir, nil, "init", "-q", "--bare", dir); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, err := gitT(dir, strings.NewReader(stdin), args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	mode := b.mode
	if mode == "" {
		mode = "100644"
	}
	name := func(i int) string {
		n := fmt.Sprintf("d%d", i)
		return strings.Repeat("x", max(0, b.nameLen-len(n))) + n
	}
	obj := run("package bomb\n\nfunc bombMarker() {}\n", "hash-object", "-w", "--stdin")
	typ := "blob"
	for level := range b.depth {
		var tree strings.Builder
		for i := range b.width {
			fmt.Fprintf(&tree, "%s %s %s\t%s\n", mode, typ, obj, name(i))
		}
		obj = run(tree.String(), "mktree")
		if level == 0 {
			mode, typ = "040000", "tree"
		}
	}
	return run("bomb\n", "commit-tree", obj)
}

// countingBackend counts the writes reaching a real backend.
type countingBackend struct {
	Backend
	writes atomic.Int64
}

func (c *countingBackend) Replace(ctx context.Context, repository string, remove []string, chunks []Chunk) error {
	c.writes.Add(1)
	return c.Backend.Replace(ctx, repository, remove, chunks)
}

// A commit past a cap of ingestion fails with ErrTooManyEntries naming
// the cap, in seconds, before anything is written: ten levels of ten
// entries (10^10 paths), a listing of long paths, a million symlinks,
// too many files for MaxFiles, too many bytes for MaxBytes (many paths
// to one blob), and the same through diff-tree from an indexed commit.
func TestIngestCaps(t *testing.T) {
	base := t.TempDir()
	small, smallCommit := makeRepo(t, []repoFile{{path: "ok.go", content: "package ok\n\nfunc fineHere() {}\n"}})
	for _, tc := range []struct {
		name  string
		bomb  bomb
		o     Options
		from  bool // ingest from the small commit (diff-tree)
		want  string
		maxed time.Duration
	}{
		{name: "10^10 paths", bomb: bomb{width: 10, depth: 10}, want: "more than 200000 files (retrieval.max_files)"},
		{name: "10^10 paths, from an indexed commit", bomb: bomb{width: 10, depth: 10}, from: true, want: "more than 200000 files (retrieval.max_files)"},
		{name: "long paths", bomb: bomb{width: 10, depth: 5, nameLen: 250}, want: fmt.Sprintf("longer than %d bytes together", maxListBytes)},
		{name: "a path longer than a record", bomb: bomb{width: 1, depth: 2, nameLen: maxRecord}, want: fmt.Sprintf("longer than %d bytes", maxRecord)},
		{name: "10^7 symlinks", bomb: bomb{width: 10, depth: 7, mode: "120000"}, want: fmt.Sprintf("lists more than %d entries", maxListed)},
		{name: "max_files", bomb: bomb{width: 3, depth: 4}, o: Options{MaxFiles: 80}, want: "more than 80 files (retrieval.max_files)"},
		{name: "max_repository_bytes", bomb: bomb{width: 10, depth: 2}, o: Options{MaxBytes: 3000}, want: "are 3500 bytes together, more than 3000 (retrieval.max_repository_bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := small
			if !tc.from {
				dir = filepath.Join(base, strings.ReplaceAll(tc.name, " ", "_")+".git")
			}
			commit := makeBomb(t, dir, tc.bomb)
			be := &countingBackend{Backend: backends[0].open(t)}
			tc.o.Backend = be
			ix, err := New(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			from := ""
			if tc.from {
				if err := ix.Ingest(t.Context(), "r", dir, "", smallCommit, nil); err != nil {
					t.Fatal(err)
				}
				from = smallCommit
			}
			writes := be.writes.Load()
			start := time.Now()
			err = ix.Ingest(t.Context(), "r", dir, from, commit, nil)
			took := time.Since(start)
			if !errors.Is(err, ErrTooManyEntries) || !strings.HasPrefix(err.Error(), "too_many_entries: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Ingest: %v, want ErrTooManyEntries naming %q", err, tc.want)
			}
			t.Logf("%v in %v", err, took)
			if took > 60*time.Second {
				t.Errorf("took %v to fail", took)
			}
			if n := be.writes.Load() - writes; n != 0 {
				t.Errorf("%d writes to the index before the failure", n)
			}
			rs, err := ix.Search(t.Context(), Query{Text: "bombMarker", Repositories: []string{"r"}})
			if err != nil || len(rs) != 0 {
				t.Errorf("search after the failure: %v %v", paths(rs), err)
			}
		})
	}

	// Just under the caps: indexed.
	dir := filepath.Join(base, "under.git")
	commit := makeBomb(t, dir, bomb{width: 3, depth: 4})
	ix, _ := New(Options{Backend: backends[0].open(t), MaxFiles: 81, MaxBytes: 81 * 35})
	st, err := ix.IngestStats(t.Context(), "r", dir, "", commit, nil)
	if err != nil || st.Indexed != 81 {
		t.Fatalf("81 files under MaxFiles 81: %+v %v", st, err)
	}
}
