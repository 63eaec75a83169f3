package agentcore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLineIndexAgrees: a range read through the line index is the range
// read from the file's start, with the exact total, for offsets at, near
// and past the index's points and the end, with and without a last
// newline; a changed file gets a new index.
func TestLineIndexAgrees(t *testing.T) {
	for _, tail := range []string{"", "last line without newline"} {
		var b strings.Builder
		for i := 1; b.Len() < indexMin+1000; i++ {
			fmt.Fprintf(&b, "line %d %s\n", i, strings.Repeat("y", i%97))
		}
		b.WriteString(tail)
		p := filepath.Join(t.TempDir(), "f.txt")
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		x := indexOf(t.Context(), f)
		if x == nil {
			t.Fatal("no index for a file over indexMin")
		}
		want := strings.Count(b.String(), "\n")
		if tail != "" {
			want++
		}
		if x.lines != want {
			t.Fatalf("index counts %d lines, want %d", x.lines, want)
		}
		for _, off := range []int{1, 2, 255, 256, 257, 513, 1023, 1024, 1025, 2049, 40000, want - 1, want, want + 1, want + 300} {
			plain, plr, perr := readLines(t.Context(), strings.NewReader(b.String()), off, 7, 4000)
			skipped, at := x.seek(off - 1)
			if _, err := f.Seek(at, 0); err != nil {
				t.Fatal(err)
			}
			got, lr, err := readLinesFrom(t.Context(), f, off, 7, 4000, skipped, at, x.lines)
			if got != plain || (err == nil) != (perr == nil) || lr.First != plr.First || lr.Last != plr.Last || lr.Start != plr.Start || lr.End != plr.End {
				t.Errorf("offset %d: indexed %q %+v %v; plain %q %+v %v", off, got, lr, err, plain, plr, perr)
			}
			if err == nil && (lr.Total != want || !lr.Known) {
				t.Errorf("offset %d: total %d (known %v), want %d", off, lr.Total, lr.Known, want)
			}
		}
		f.Close()
		if err := os.WriteFile(p, []byte("changed\n"+strings.Repeat("z\n", indexMin)), 0o644); err != nil {
			t.Fatal(err)
		}
		f, _ = os.Open(p)
		if x2 := indexOf(t.Context(), f); x2 == nil || x2.lines != indexMin+1 {
			t.Errorf("after a change: %+v, want a new index of %d lines", x2, indexMin+1)
		}
		f.Close()
	}
}
