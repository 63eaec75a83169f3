package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchLayer returns a layer whose upper dir holds files files in
// directories of 100, checkpointed once.
func benchLayer(b *testing.B, files int) *Layer {
	s, err := Open(filepath.Join(b.TempDir(), "workspaces"))
	if err != nil {
		b.Fatal(err)
	}
	l, err := s.Create("bench")
	if err != nil {
		b.Fatal(err)
	}
	for i := range files {
		p := filepath.Join(l.Upper, fmt.Sprintf("d%04d/f%03d.go", i/100, i%100))
		if i%100 == 0 {
			if err := os.Mkdir(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("package p // %d\n", i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := l.Checkpoint("base", CheckpointLimits{}); err != nil {
		b.Fatal(err)
	}
	return l
}

// change10 rewrites 10 files of the layer, as a turn would.
func change10(b *testing.B, l *Layer, files, round int) {
	for j := range 10 {
		i := (round*10 + j*97) % files
		p := filepath.Join(l.Upper, fmt.Sprintf("d%04d/f%03d.go", i/100, i%100))
		if err := os.WriteFile(p, []byte(fmt.Sprintf("package p // %d changed %d\n", i, round)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// A turn changed 10 files; the upper dir holds files entries (what the
// conversation changed so far: the lower tree, however large, is not read).
func BenchmarkCheckpoint(b *testing.B) {
	for _, files := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("upper=%d", files), func(b *testing.B) {
			l := benchLayer(b, files)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				change10(b, l, files, i)
				b.StartTimer()
				if changed, err := l.Checkpoint(fmt.Sprintf("t%d", i), CheckpointLimits{MaxCount: 20}); err != nil || !changed {
					b.Fatal(changed, err)
				}
			}
		})
	}
}

// Revert a turn that changed 10 files.
func BenchmarkRestore(b *testing.B) {
	for _, files := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("upper=%d", files), func(b *testing.B) {
			l := benchLayer(b, files)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				change10(b, l, files, i)
				if _, err := l.Checkpoint("after", CheckpointLimits{MaxCount: 20}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := l.Restore("base"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
