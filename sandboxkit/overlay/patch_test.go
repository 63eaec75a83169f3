package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gitHash asks git for a blob's object name, to check ours independently.
func gitHash(t *testing.T, content string) string {
	t.Helper()
	requireTool(t, "git")
	cmd := exec.Command("git", "hash-object", "--stdin")
	cmd.Stdin = strings.NewReader(content)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func TestWritePatchFormat(t *testing.T) {
	var old, cur strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&old, "line %d\n", i)
		switch i {
		case 2:
			cur.WriteString("line two\n")
		case 19:
			// dropped
		default:
			fmt.Fprintf(&cur, "line %d\n", i)
		}
	}
	cur.WriteString("tail")
	c := layerCase{
		lower: []node{file("f.txt", old.String())},
		upper: []node{exe("f.txt", cur.String()), file("new", "n\n")},
	}
	lower, upper := buildLayers(t, c)
	var patch bytes.Buffer
	if err := WritePatch(&patch, lower, upper); err != nil {
		t.Fatal(err)
	}
	want := `diff --git a/f.txt b/f.txt
old mode 100644
new mode 100755
index ` + gitHash(t, old.String()) + ".." + gitHash(t, cur.String()) + `
--- a/f.txt
+++ b/f.txt
@@ -1,5 +1,5 @@
 line 1
-line 2
+line two
 line 3
 line 4
 line 5
@@ -16,5 +16,5 @@ line 15
 line 16
 line 17
 line 18
-line 19
 line 20
+tail
\ No newline at end of file
diff --git a/new b/new
new file mode 100644
index 0000000000000000000000000000000000000000..` + gitHash(t, "n\n") + `
--- /dev/null
+++ b/new
@@ -0,0 +1 @@
+n
`
	if got := patch.String(); got != want {
		t.Errorf("patch:\n%s\nwant:\n%s", got, want)
	}
}

// A hunk's heading is the one git diff writes without a diff driver: the
// nearest line before the hunk that starts like an identifier (ASCII
// letter, '_' or '$'), cut to 80 bytes, without trailing white space; a
// hunk with none before it since the last heading keeps that one.
func TestWritePatchHeadingsAsGit(t *testing.T) {
	requireTool(t, "git")
	candidates := []string{
		"def f():", "# a comment", "_private = 1", "$var", "1st line", "\u00e9t\u00e9", "func x()   \t",
		"func y()\r", "func z()\v", "func w()\f", strings.Repeat("a", 100), "x" + strings.Repeat("\u00e9", 50),
		"class Foo:", "", " indented", "\ttabbed", "Z", "caf\xe9 latin-1 \t", "ok \xef\xbf\xbe tail", "s\xed\xa0\x80 surrogate",
		"o\xc0\xaf overlong", "end \xf4\x90\x80\x80", "fine \U0001F600 emoji",
	}
	var old, cur strings.Builder
	old.WriteString("    first\n    e\n    f\n    g\n    h\n")
	cur.WriteString("    FIRST\n    e\n    f\n    g\n    h\n") // a hunk with no line before it
	for i, c := range candidates {
		block := c + "\n    a\n    b\n    c\n    d\n"
		old.WriteString(block + fmt.Sprintf("    target %d\n    e\n    f\n    g\n    h\n", i))
		cur.WriteString(block + fmt.Sprintf("    TARGET %d\n    e\n    f\n    g\n    h\n", i))
	}
	lower, upper := buildLayers(t, layerCase{lower: []node{file("f", old.String())}, upper: []node{file("f", cur.String())}})
	var patch bytes.Buffer
	if err := WritePatch(&patch, lower, upper); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "diff", "--no-index", "--no-color", "--no-ext-diff", filepath.Join(lower, "f"), filepath.Join(upper, "f"))
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("git diff --no-index: %v\n%s", err, out)
	}
	hunks := func(p string) string {
		_, h, _ := strings.Cut(p, "\n@@ ")
		return h
	}
	if got, want := hunks(patch.String()), hunks(string(out)); got != want {
		t.Errorf("hunks:\n%q\ngit diff's:\n%q", got, want)
	}
	if !strings.Contains(patch.String(), "@@ def f():\n") {
		t.Errorf("no heading in the patch:\n%s", patch.String())
	}
}

// Random edits of many text files: git must apply the patch and get the
// edited files, whatever shape the hunks take.
func TestWritePatchRandomEdits(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var lowerNodes, upperNodes, merged []node
	for f := 0; f < 60; f++ {
		var lines []string
		for i := r.IntN(40); i > 0; i-- {
			lines = append(lines, fmt.Sprintf("l%d\n", r.IntN(8)))
		}
		edited := append([]string(nil), lines...)
		for e := 1 + r.IntN(6); e > 0; e-- {
			p := r.IntN(len(edited) + 1)
			switch r.IntN(3) {
			case 0:
				edited = append(edited[:p], append([]string{fmt.Sprintf("new%d\n", r.IntN(3))}, edited[p:]...)...)
			case 1:
				if p < len(edited) {
					edited = append(edited[:p], edited[p+1:]...)
				}
			case 2:
				if p < len(edited) {
					edited[p] = "changed\n"
				}
			}
		}
		name := fmt.Sprintf("f%02d", f)
		lowerNodes = append(lowerNodes, file(name, strings.Join(lines, "")))
		upperNodes = append(upperNodes, file(name, strings.Join(edited, "")))
		merged = append(merged, file(name, strings.Join(edited, "")))
	}
	lower, upper := buildLayers(t, layerCase{lower: lowerNodes, upper: upperNodes})
	var patch bytes.Buffer
	if err := WritePatch(&patch, lower, upper); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "work")
	copyTree(t, lower, work)
	gitApply(t, work, patch.Bytes())
	if d := diffTrees(readTree(t, work), treeOf(merged...)); d != "" {
		t.Errorf("lower + patch is not the merged view:\n%s", d)
	}
}

// A text file over maxTextSize is written whole as binary, and still applies.
func TestWritePatchHugeText(t *testing.T) {
	line := "a line of text that repeats to make a big file\n"
	big := strings.Repeat(line, maxTextSize/len(line)+10)
	edited := "changed first line\n" + big[len(line):]
	lower, upper := buildLayers(t, layerCase{lower: []node{file("big.txt", big)}, upper: []node{file("big.txt", edited)}})
	var patch bytes.Buffer
	if err := WritePatch(&patch, lower, upper); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(patch.String(), "GIT binary patch\nliteral "+fmt.Sprint(len(edited))+"\n") {
		t.Fatalf("a %d-byte text file should be a binary literal; patch starts:\n%.400s", len(edited), patch.String())
	}
	work := filepath.Join(t.TempDir(), "work")
	copyTree(t, lower, work)
	gitApply(t, work, patch.Bytes())
	got, err := os.ReadFile(filepath.Join(work, "big.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != edited {
		t.Errorf("big.txt after git apply: %d bytes, want the %d edited ones", len(got), len(edited))
	}
}

func TestQuotePath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain/path.go", "a/plain/path.go"},
		{"sp ace", "a/sp ace"},
		{"tab\tnl\ncr\r", `"a/tab\tnl\ncr\r"`},
		{`q"b\`, `"a/q\"b\\"`},
		{"é", `"a/\303\251"`},
		{"\x01\x7f", `"a/\001\177"`},
	} {
		if got := quotePath("a/", c.in); got != c.want {
			t.Errorf("quotePath(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

// A path component that a file system where the patch may be applied
// takes for .git is one: any case, Windows' trailing dots and spaces,
// alternate data streams and 8.3 short name (git~1), and the code
// points HFS+ ignores, as git's own protectNTFS and protectHFS checks.
func TestGitPrefix(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{".git", ".git"},
		{".git/config", ".git"},
		{"sub/.GIT/hooks/x", "sub/.GIT"},
		{".Git", ".Git"},
		{".git./config", ".git."},
		{".git . /config", ".git . "},
		{"GIT~1/config", "GIT~1"},
		{".git::$INDEX_ALLOCATION/config", ".git::$INDEX_ALLOCATION"},
		{".g\u200cit/config", ".g\u200cit"},
		{"a/\ufeff.git\u200d/config", "a/\ufeff.git\u200d"},
		{".gitignore", ""},
		{".github/workflows/x.yml", ""},
		{"a.git/x", ""},
		{"git/x", ""},
		{".git2/x", ""},
		{"git~2/x", ""},
	} {
		if got := gitPrefix(c.in); got != c.want {
			t.Errorf("gitPrefix(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// PatchOptions.Ignore leaves out the added paths it ignores (listed in
// the "#" lines, a directory once, nothing below it asked about), and is
// never asked about what lower has.
func TestPatchIgnore(t *testing.T) {
	c := layerCase{
		lower: []node{file("kept.pyc", "tracked\n"), file("gone.pyc", "g\n"), file("src/a.py", "a\n")},
		upper: []node{
			file("kept.pyc", "changed\n"), whiteout("gone.pyc"), file("src/a.py", "b\n"), file("src/a.pyc", "\x00bin"),
			dir("src/__pycache__"), file("src/__pycache__/a.cpython.pyc", "\x00"), dir("src/__pycache__/deep"), file("src/__pycache__/deep/x", "x"),
			file("src/new.py", "n\n"),
		},
	}
	lower, upper := buildLayers(t, c)
	var asked []string
	ignore := func(p string, isDir bool) (bool, error) {
		asked = append(asked, fmt.Sprintf("%s %v", p, isDir))
		return strings.HasSuffix(p, ".pyc") || isDir && path.Base(p) == "__pycache__", nil
	}
	p, err := NewPatch(lower, upper, PatchOptions{Ignore: ignore, NoteTag: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var b bytes.Buffer
	if _, err := p.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	head := "# app: not exported: ignored (the repository's .gitignore or .git/info/exclude):\n#   src/__pycache__/\n#   src/a.pyc\n"
	if !strings.HasPrefix(out, head) {
		t.Errorf("the patch does not start with the ignored paths:\n%s", out)
	}
	for _, want := range []string{"diff --git a/kept.pyc b/kept.pyc\n", "diff --git a/gone.pyc b/gone.pyc\ndeleted file", "diff --git a/src/a.py b/src/a.py\n", "diff --git a/src/new.py b/src/new.py\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the patch:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "diff --git"); n != 4 {
		t.Errorf("%d files in the patch, want 4:\n%s", n, out)
	}
	if want := []string{"src/__pycache__ true", "src/a.pyc false", "src/new.py false"}; !slices.Equal(asked, want) {
		t.Errorf("Ignore was asked about %q, want %q", asked, want)
	}
	// The notes name the caller's tag, or none.
	untagged, err := NewPatch(lower, upper, PatchOptions{Ignore: func(string, bool) (bool, error) { return true, nil }})
	if err != nil {
		t.Fatal(err)
	}
	var ub bytes.Buffer
	if _, err := untagged.WriteTo(&ub); err != nil {
		t.Fatal(err)
	}
	untagged.Close()
	if head := "# not exported: ignored (the repository's .gitignore or .git/info/exclude):\n#   src/__pycache__/\n"; !strings.HasPrefix(ub.String(), head) {
		t.Errorf("the untagged patch does not start with the ignored paths:\n%s", ub.String())
	}

	boom := errors.New("too many rules")
	if _, err := NewPatch(lower, upper, PatchOptions{Ignore: func(string, bool) (bool, error) { return false, boom }}); !errors.Is(err, boom) {
		t.Errorf("an Ignore error: NewPatch = %v, want it wrapped", err)
	}
}
