package retrieval

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/codumentor/codumentor/integrations/git"
)

// goTree is a bare repository holding a copy of Go's own source tree
// ($(go env GOROOT)/src) in two commits: first the tree, then a commit
// that changes 3 files and deletes 1. Built once per test binary.
type goTree struct {
	dir      string // the bare repository
	first    string // commit of the whole tree
	second   string // the change
	changed  []string
	deleted  string
	newWords string // a word only the changed files hold after the change
	files    int    // regular files in first
	err      error
}

var (
	treeOnce sync.Once
	tree     goTree
	testDir  string
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "retrieval-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = d
	code := m.Run()
	if weaviateSrv != nil {
		weaviateSrv.Close()
	}
	os.RemoveAll(d)
	os.Exit(code)
}

// git runs git in dir (GIT_DIR) with the same scrubbed environment as
// the package, plus an identity for commits.
func gitT(dir string, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = append(git.Env(dir), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org", "GIT_INDEX_FILE="+filepath.Join(dir, "test-index"))
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// goRoot is the GOROOT of the go command on PATH: the tests read its
// source tree.
var goRoot = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %v", err)
	}
	return strings.TrimSpace(string(out)), nil
})

// goTreeRepo returns the Go tree repository, building it on first use.
func goTreeRepo(t testing.TB) goTree {
	t.Helper()
	treeOnce.Do(func() { tree = buildGoTree() })
	if tree.err != nil {
		t.Fatal(tree.err)
	}
	return tree
}

// raceSubset is the part of the tree ingested under the race detector,
// about 3,200 files: every kind of file the full tree has (vendored,
// generated, binary test data, Markdown) and the files the tests change.
var raceSubset = []string{"README.vendor", "bufio", "net", "strconv", "image", "vendor", "encoding", "time",
	"go", "os", "math", "fmt", "sort", "strings", "regexp", "text", "html", "io", "errors", "context", "sync",
	"reflect", "unicode", "path", "log", "flag", "bytes", "archive", "compress", "database", "debug", "mime",
	"testing", "hash", "container", "slices", "maps", "syscall"}

func buildGoTree() goTree {
	g := goTree{
		dir:      filepath.Join(testDir, "go.git"),
		changed:  []string{"strconv/number.go", "net/http/server.go", "README.vendor"},
		deleted:  "bufio/scan.go",
		newWords: "zanzibarquokka",
	}
	if _, err := gitT(testDir, nil, "init", "-q", "--bare", g.dir); err != nil {
		return goTree{err: err}
	}
	root, err := goRoot()
	if err != nil {
		return goTree{err: err}
	}
	// One fast-import stream (a pack, not 11k loose objects): building
	// the repository costs about as much as reading the tree.
	src := filepath.Join(root, "src")
	var stream, second bytes.Buffer
	stream.WriteString("commit refs/heads/main\nmark :1\ncommitter t <t@example.org> 1700000000 +0000\ndata 8\ngo tree\n")
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if raceEnabled && !slices.ContainsFunc(raceSubset, func(dir string) bool {
			return rel == dir || strings.HasPrefix(rel, dir+"/")
		}) {
			return nil
		}
		g.files++
		fmt.Fprintf(&stream, "M 100644 inline %s\ndata %d\n", filepath.ToSlash(rel), len(b))
		stream.Write(b)
		stream.WriteByte('\n')
		if slices.Contains(g.changed, filepath.ToSlash(rel)) {
			changed := fmt.Appendf(slices.Clip(b), "\n// The %s was here.\n", g.newWords)
			fmt.Fprintf(&second, "M 100644 inline %s\ndata %d\n", filepath.ToSlash(rel), len(changed))
			second.Write(changed)
			second.WriteByte('\n')
		}
		return nil
	})
	if err != nil {
		return goTree{err: err}
	}
	stream.WriteString("commit refs/heads/main\nmark :2\ncommitter t <t@example.org> 1700000100 +0000\ndata 19\nchange 3, delete 1\nfrom :1\n")
	stream.Write(second.Bytes())
	fmt.Fprintf(&stream, "D %s\n", g.deleted)
	if _, err := gitT(g.dir, &stream, "-c", "pack.compression=1", "fast-import", "--quiet"); err != nil {
		return goTree{err: err}
	}
	g.first, g.err = gitT(g.dir, nil, "rev-parse", "main~1")
	if g.err == nil {
		g.second, g.err = gitT(g.dir, nil, "rev-parse", "main")
	}
	return g
}

// progressLog records progress calls.
type progressLog struct {
	mu    sync.Mutex
	calls [][2]int64
}

func (p *progressLog) f(done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, [2]int64{done, total})
}

// check fails t unless progress went from 0 to total, never backwards.
func (p *progressLog) check(t *testing.T, total int64) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) < 2 {
		t.Fatalf("progress called %d times, want from 0 to %d", len(p.calls), total)
	}
	if first := p.calls[0]; first != [2]int64{0, total} {
		t.Errorf("first progress %v, want [0 %d]", first, total)
	}
	if last := p.calls[len(p.calls)-1]; last != [2]int64{total, total} {
		t.Errorf("last progress %v, want [%d %d]", last, total, total)
	}
	for i := 1; i < len(p.calls); i++ {
		if p.calls[i][0] < p.calls[i-1][0] || p.calls[i][1] != total {
			t.Errorf("progress went %v then %v", p.calls[i-1], p.calls[i])
		}
	}
}
