package git

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ignoreCorpus is a work tree: its ignore files, and the paths asked
// about (a trailing "/" makes a directory).
var ignoreCorpus = struct {
	rules map[string]string
	paths []string
}{
	rules: map[string]string{
		".git/info/exclude": "*.local\n!keep.local\n",
		".gitignore": strings.Join([]string{
			"# comment", "", "*.pyc", "__pycache__/", "/build", "dist/", "*.log", "!important.log",
			"docs/**/*.tmp", "**/cache", "vendor/**", "!vendor/keep/", "!vendor/keep/**", "out/", "!out/x",
			"\\#hash", "\\!bang", "trailing   ", "a?c", "[ab]x.txt", "/anchored/sub", "deep/dir/", "*.o", "!*.o/",
			"logs/*", "!logs/.gitkeep", "kd/**", "!kd/sub/", "mid/**/leaf", "!mid/x/leaf", "/**/rootany", "*.swp  ", "node_modules",
		}, "\n") + "\n",
		"src/.gitignore":       "*.gen.go\n!keep.gen.go\n/local.txt\nsub/*.txt\n!*.pyc\n",
		"src/inner/.gitignore": "!*.log\nx/\n",
		"other/.gitignore":     "!*.pyc\n*\n!*/\n!*.md\n",
		"crlf/.gitignore":      "\xef\xbb\xbf*.bin\r\n*.dat \r\n",
	},
	paths: []string{
		"a.pyc", "src/a.pyc", "src/inner/a.pyc", "lib/__pycache__/", "lib/__pycache__/m.pyc", "__pycache__",
		"build/", "build/x.o", "src/build/", "src/build/f", "dist/", "dist/f", "src/dist", "x.log", "important.log",
		"src/inner/y.log", "src/y.log", "docs/a.tmp", "docs/x/y/a.tmp", "docs/x/a.txt", "cache/", "a/b/cache/", "a/b/cache/f",
		"vendor/", "vendor/a.go", "vendor/keep/", "vendor/keep/k.go", "out/", "out/x", "#hash", "!bang", "trailing",
		"abc", "aXc", "ac", "ax.txt", "cx.txt", "anchored/sub", "x/anchored/sub", "deep/dir/", "deep/dir/f", "deep/dir",
		"x.o", "y.o/", "y.o/f", "logs/", "logs/a", "logs/.gitkeep", "e.swp", "kd/", "kd/a", "kd/sub/", "kd/sub/f", "mid/leaf", "mid/x/leaf", "mid/y/z/leaf", "mid/y/leaf/f", "rootany", "q/rootany", "node_modules/", "node_modules/m/i.js",
		"f.local", "keep.local", "src/z.gen.go", "src/keep.gen.go", "src/local.txt", "local.txt", "src/q/local.txt",
		"src/sub/a.txt", "src/sub/deeper/a.txt", "src/inner/x/", "src/inner/x/f", "src/inner/z/x", "other/a.txt",
		"other/a.md", "other/d/", "other/d/b.md", "other/d/c.go", "other/p.pyc", "plain.txt", "src/plain.go", "crlf/a.bin", "crlf/a.dat",
	},
}

// Ignore agrees with `git check-ignore` on a corpus of rules: nested
// .gitignore files, info/exclude, negations, anchored and directory-only
// patterns, "**", escapes, trailing spaces.
func TestIgnoreAgreesWithGit(t *testing.T) {
	dir := t.TempDir()
	sh(t, dir, nil, "git", "init", "-q")
	for name, body := range ignoreCorpus.rules {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var asked []string
	for _, p := range ignoreCorpus.paths {
		full := filepath.Join(dir, p)
		if strings.HasSuffix(p, "/") {
			os.MkdirAll(full, 0o755)
		} else if _, err := os.Stat(full); err != nil {
			os.MkdirAll(filepath.Dir(full), 0o755)
			os.WriteFile(full, nil, 0o644)
		}
		asked = append(asked, strings.TrimSuffix(p, "/"))
	}
	cmd := exec.Command("git", "check-ignore", "--no-index", "--stdin")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	cmd.Stdin = strings.NewReader(strings.Join(asked, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("git check-ignore: %v", err)
	}
	byGit := strings.Fields(string(out))
	ig := NewIgnore(os.DirFS(dir))
	var byUs []string
	for _, p := range ignoreCorpus.paths {
		ok, err := ig.Ignored(strings.TrimSuffix(p, "/"), strings.HasSuffix(p, "/") || isDirPath(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			byUs = append(byUs, strings.TrimSuffix(p, "/"))
		}
	}
	slices.Sort(byGit)
	slices.Sort(byUs)
	if len(byGit) < 20 {
		t.Fatalf("git ignores only %v: the corpus does not test much", byGit)
	}
	for _, p := range asked {
		g, u := slices.Contains(byGit, p), slices.Contains(byUs, p)
		if g != u {
			t.Errorf("%s: git says ignored=%v, Ignore says %v", p, g, u)
		}
	}
}

func isDirPath(dir, p string) bool {
	st, err := os.Stat(filepath.Join(dir, p))
	return err == nil && st.IsDir()
}

// Hostile ignore files are refused, not read whole: one too large, too
// many of them.
func TestIgnoreLimits(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("*.x\n", maxIgnoreFileBytes/4+1)
	os.WriteFile(filepath.Join(dir, ".gitignore"), []byte(big), 0o644)
	if _, err := NewIgnore(os.DirFS(dir)).Ignored("a.x", false); !errors.Is(err, ErrIgnoreLimit) {
		t.Errorf("a .gitignore of %d bytes: %v, want ErrIgnoreLimit", len(big), err)
	}

	// Many patterns times many paths: stopped at the work budget.
	dir = t.TempDir()
	var rules strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&rules, "p%d*.x\n", i)
	}
	os.WriteFile(filepath.Join(dir, ".gitignore"), []byte(rules.String()), 0o644)
	ig := NewIgnore(os.DirFS(dir))
	var err error
	for i := 0; err == nil && i < 10000; i++ {
		_, err = ig.Ignored(fmt.Sprintf("a/b/f%d", i), false)
	}
	if !errors.Is(err, ErrIgnoreLimit) {
		t.Errorf("10000 patterns, 10000 paths: %v, want ErrIgnoreLimit", err)
	}

	// More .gitignore files than the bound, one a directory.
	dir = t.TempDir()
	for i := range maxIgnoreFiles + 1 {
		d := filepath.Join(dir, strconv.Itoa(i))
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, ".gitignore"), []byte("*.y\n"), 0o644)
	}
	ig = NewIgnore(os.DirFS(dir))
	err = nil
	for i := 0; err == nil && i <= maxIgnoreFiles; i++ {
		_, err = ig.Ignored(strconv.Itoa(i)+"/f", false)
	}
	if !errors.Is(err, ErrIgnoreLimit) {
		t.Errorf("%d .gitignore files: %v, want ErrIgnoreLimit", maxIgnoreFiles+1, err)
	}
}
