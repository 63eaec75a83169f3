package sandboxkit

import (
	"os"
	"os/exec"
	"testing"
)

// BenchmarkTrue measures the cost of running /bin/true: directly, as the
// raw bwrap argv that Policy builds, and through sandboxkit. scripts/bench
// reports medians and the ratios against the baselines.
func BenchmarkTrue(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})

	requireSandbox(b)
	p := &Policy{UID: os.Getuid(), GID: os.Getgid()}
	b.Run("raw-bwrap", func(b *testing.B) {
		l, err := p.Build("true")
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			cmd := exec.Command(l.Path, l.Args[1:]...)
			cmd.Env = l.Env
			files, err := memFiles(l)
			if err != nil {
				b.Fatal(err)
			}
			cmd.ExtraFiles = files
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			closeAll(cmd.ExtraFiles)
		}
	})
	b.Run("run", func(b *testing.B) {
		for b.Loop() {
			if err := Command(b.Context(), p, "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("session", func(b *testing.B) {
		// A warm session: one foreground command, no bwrap start.
		s := startSession(b, p, SessionOptions{})
		for b.Loop() {
			if err := s.Command(b.Context(), "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
