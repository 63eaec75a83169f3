package agentcore

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkReadFileRange reads 50 lines of a 100 MB file through read_file's path (resolve in the merged
// view, open by descriptor, stream lines, count up to countBound more):
// the cost is bounded by the range and countBound, not the file.
func BenchmarkReadFileRange(b *testing.B) {
	dir := b.TempDir()
	lower, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "upper")
	ws := &workspace{view: newView(lower, upper, nil)}
	for _, d := range []string{lower, upper} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(lower, "big.log"))
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	line := strings.Repeat("x", 90)
	for i := 0; i < 1_000_000; i++ { // 100 bytes a line
		fmt.Fprintf(w, "%08d %s\n", i, line)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	// The first read of the file makes its line index (one scan); the
	// reads after it seek to the range.
	start := time.Now()
	if _, err := ws.readLines(b.Context(), "big.log", 1, 1, 30<<10); err != nil {
		b.Fatal(err)
	}
	b.Logf("first read (indexing 100 MB): %v", time.Since(start))
	b.ResetTimer()
	for _, offset := range []int{5000, 500_000} {
		b.Run(fmt.Sprintf("offset=%d", offset), func(b *testing.B) {
			want := fmt.Sprintf("%6d\t%08d ", offset, offset-1)
			for b.Loop() {
				out, err := ws.readLines(b.Context(), "big.log", offset, 50, 30<<10)
				if err != nil || !strings.Contains(out, want) || !strings.Contains(out, " of 1,000,000 (") {
					b.Fatalf("%v %.300q", err, out)
				}
			}
		})
	}
}
