package overlay

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func added(p string) Change    { return Change{Path: p, Kind: Added} }
func addedDir(p string) Change { return Change{Path: p, Kind: Added, Dir: true} }
func modified(p string) Change { return Change{Path: p, Kind: Modified} }
func deleted(p string) Change  { return Change{Path: p, Kind: Deleted} }
func deletedDir(p string) Change {
	return Change{Path: p, Kind: Deleted, Dir: true}
}

// layerCase is a lower tree, an upper layer over it as overlayfs would
// leave it, the changes Diff must find and the merged view a patch must
// reproduce from lower.
type layerCase struct {
	name   string
	lower  []node
	upper  []node
	want   []Change
	merged []node
}

var binData = string([]byte{0, 1, 2, 3, 'x', 0, 0xff, '\n', 0xfe})

var layerCases = []layerCase{
	{
		name:   "copy-up of unchanged files is no change",
		lower:  []node{file("a.txt", "hi\n"), exe("run.sh", "echo\n"), dir("src"), file("src/x", "x\n")},
		upper:  []node{file("a.txt", "hi\n"), exe("run.sh", "echo\n"), dir("src")},
		want:   nil,
		merged: []node{file("a.txt", "hi\n"), exe("run.sh", "echo\n"), file("src/x", "x\n")},
	},
	{
		name:   "content modified",
		lower:  []node{file("a.txt", "1\n2\n3\n"), file("same-size", "abc")},
		upper:  []node{file("a.txt", "1\ntwo\n3\n"), file("same-size", "abd")},
		want:   []Change{modified("a.txt"), modified("same-size")},
		merged: []node{file("a.txt", "1\ntwo\n3\n"), file("same-size", "abd")},
	},
	{
		name:   "executable bit set and cleared",
		lower:  []node{file("m.sh", "echo\n"), exe("n.sh", "echo n\n")},
		upper:  []node{exe("m.sh", "echo\n"), file("n.sh", "echo n\nexit\n")},
		want:   []Change{modified("m.sh"), modified("n.sh")},
		merged: []node{exe("m.sh", "echo\n"), file("n.sh", "echo n\nexit\n")},
	},
	{
		name:   "permission bits git cannot record",
		lower:  []node{file("secret", "s\n")},
		upper:  []node{modeFile("secret", "s\n", 0o600)},
		want:   []Change{modified("secret")},
		merged: []node{file("secret", "s\n")},
	},
	{
		name:   "files and directories added",
		lower:  []node{file("a", "a\n")},
		upper:  []node{file("n/a", "a\n"), file("n/deep/b", "b\n"), dir("empty")},
		want:   []Change{addedDir("empty"), addedDir("n"), added("n/a"), addedDir("n/deep"), added("n/deep/b")},
		merged: []node{file("a", "a\n"), file("n/a", "a\n"), file("n/deep/b", "b\n")},
	},
	{
		name:   "file deleted",
		lower:  []node{file("a", "a\n"), file("b", "b\n"), file("d/c", "c\n")},
		upper:  []node{whiteout("a"), dir("d"), whiteout("d/c")},
		want:   []Change{deleted("a"), deleted("d/c")},
		merged: []node{file("b", "b\n")},
	},
	{
		name:  "directory deleted: itself and every entry below",
		lower: []node{file("d/f", "f\n"), file("d/sub/g", "g\n"), link("d/l", "f"), file("keep", "k\n")},
		upper: []node{whiteout("d")},
		want: []Change{deletedDir("d"), deleted("d/f"), deleted("d/l"), deletedDir("d/sub"),
			deleted("d/sub/g")},
		merged: []node{file("keep", "k\n")},
	},
	{
		name:   "whiteout over nothing",
		lower:  []node{file("a", "a\n")},
		upper:  []node{whiteout("ghost")},
		want:   nil,
		merged: []node{file("a", "a\n")},
	},
	{
		name: "opaque directory hides lower below it",
		lower: []node{file("e/h", "h\n"), file("e/keep", "k\n"), file("e/sub/x", "x\n"),
			file("e/sub/same", "s\n")},
		upper: []node{opaqueDir("e"), file("e/keep", "k\n"), file("e/new", "q\n"), dir("e/sub"),
			file("e/sub/y", "y\n"), file("e/sub/same", "s\n")},
		want:   []Change{deleted("e/h"), added("e/new"), deleted("e/sub/x"), added("e/sub/y")},
		merged: []node{file("e/keep", "k\n"), file("e/new", "q\n"), file("e/sub/y", "y\n"), file("e/sub/same", "s\n")},
	},
	{
		name:   "symlinks",
		lower:  []node{file("a", "a\n"), link("l1", "a"), link("l2", "b")},
		upper:  []node{link("l1", "a"), link("l2", "c"), link("l3", "../a")},
		want:   []Change{modified("l2"), added("l3")},
		merged: []node{file("a", "a\n"), link("l1", "a"), link("l2", "c"), link("l3", "../a")},
	},
	{
		name:   "file replaced by directory",
		lower:  []node{file("f", "x\n")},
		upper:  []node{opaqueDir("f"), file("f/g", "g\n")},
		want:   []Change{deleted("f"), addedDir("f"), added("f/g")},
		merged: []node{file("f/g", "g\n")},
	},
	{
		name:   "directory replaced by file",
		lower:  []node{file("d/x", "x\n")},
		upper:  []node{file("d", "d\n")},
		want:   []Change{deletedDir("d"), added("d"), deleted("d/x")},
		merged: []node{file("d", "d\n")},
	},
	{
		name:   "file replaced by symlink and back",
		lower:  []node{file("f", "x\n"), link("l", "f")},
		upper:  []node{link("f", "l"), file("l", "now a file\n")},
		want:   []Change{modified("f"), modified("l")},
		merged: []node{link("f", "l"), file("l", "now a file\n")},
	},
	{
		name:   "copied-up directory reports only its changed file",
		lower:  []node{file("src/a", "1\n"), file("src/b", "2\n")},
		upper:  []node{dir("src"), file("src/a", "one\n")},
		want:   []Change{modified("src/a")},
		merged: []node{file("src/a", "one\n"), file("src/b", "2\n")},
	},
	{
		name:   "missing final newline",
		lower:  []node{file("t", "a\nb"), file("u", "a\nb\n"), file("v", "x")},
		upper:  []node{file("t", "a\nb\n"), file("u", "a\nc"), file("v", "y")},
		want:   []Change{modified("t"), modified("u"), modified("v")},
		merged: []node{file("t", "a\nb\n"), file("u", "a\nc"), file("v", "y")},
	},
	{
		name:   "empty files",
		lower:  []node{file("gone", ""), file("full", "x\n"), file("fill", "")},
		upper:  []node{whiteout("gone"), file("full", ""), file("fill", "y\n"), file("new", "")},
		want:   []Change{modified("fill"), modified("full"), deleted("gone"), added("new")},
		merged: []node{file("full", ""), file("fill", "y\n"), file("new", "")},
	},
	{
		name:  "names git quotes",
		lower: []node{file("sp ace", "a\n"), file("gone one", "g\n")},
		upper: []node{file("sp ace", "b\n"), file("é.txt", "e\n"), file("tab\there", "t\n"),
			file(`quo"te\`, "q\n"), whiteout("gone one"), file("new one", "n\n")},
		want: []Change{deleted("gone one"), added("new one"), added(`quo"te\`), modified("sp ace"),
			added("tab\there"), added("é.txt")},
		merged: []node{file("sp ace", "b\n"), file("é.txt", "e\n"), file("tab\there", "t\n"),
			file(`quo"te\`, "q\n"), file("new one", "n\n")},
	},
	{
		name:   "binary files",
		lower:  []node{file("bin", binData), file("gone.bin", "\x00gone"), file("text", "t\n")},
		upper:  []node{file("bin", binData+"more"), file("new.bin", strings.Repeat(binData, 300)), whiteout("gone.bin"), file("text", "t\x00\n")},
		want:   []Change{modified("bin"), deleted("gone.bin"), added("new.bin"), modified("text")},
		merged: []node{file("bin", binData+"more"), file("new.bin", strings.Repeat(binData, 300)), file("text", "t\x00\n")},
	},
}

func buildLayers(t *testing.T, c layerCase) (lower, upper string) {
	t.Helper()
	lower, upper = filepath.Join(t.TempDir(), "lower"), filepath.Join(t.TempDir(), "upper")
	for _, d := range []string{lower, upper} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build(t, lower, c.lower)
	build(t, upper, c.upper)
	return lower, upper
}

func TestDiff(t *testing.T) {
	for _, c := range layerCases {
		t.Run(c.name, func(t *testing.T) {
			lower, upper := buildLayers(t, c)
			got, err := Diff(lower, upper)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("Diff:\n got %v\nwant %v", got, c.want)
			}
		})
	}
}

func TestWritePatchApplies(t *testing.T) {
	for _, c := range layerCases {
		t.Run(c.name, func(t *testing.T) {
			lower, upper := buildLayers(t, c)
			var patch bytes.Buffer
			if err := WritePatch(&patch, lower, upper); err != nil {
				t.Fatal(err)
			}
			work := filepath.Join(t.TempDir(), "work")
			copyTree(t, lower, work)
			if patch.Len() > 0 {
				gitApply(t, work, patch.Bytes())
			}
			if d := diffTrees(readTree(t, work), treeOf(c.merged...)); d != "" {
				t.Errorf("lower + patch is not the merged view:\n%s\npatch:\n%s", d, patch.String())
			}
		})
	}
}

func TestDiffMissingDir(t *testing.T) {
	_, err := Diff(filepath.Join(t.TempDir(), "nope"), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Diff of a missing lower: got %v, want an error naming it", err)
	}
}

func TestChangeKindString(t *testing.T) {
	for k, want := range map[ChangeKind]string{Added: "added", Modified: "modified", Deleted: "deleted", 0: "ChangeKind(0)"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(k), got, want)
		}
	}
}
