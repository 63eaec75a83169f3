package sandboxkit

import (
	"github.com/codumentor/codumentor/sandboxkit/internal/supervisor"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
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
		l, err := p.build([]string{"true"}, buildOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			cmd := exec.Command(l.Path, l.Args[1:]...)
			cmd.Env = l.Env
			files, err := supervisor.MemFiles(l.Files)
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

// BenchmarkSeccompLaunch measures what the enforce filter adds to a
// one-shot Run of /bin/true. Each iteration runs the pair, off then
// enforce, so load on the machine weighs on both alike; it reports the
// medians of each and of the paired differences.
func BenchmarkSeccompLaunch(b *testing.B) {
	requireSandbox(b)
	off := &Policy{UID: os.Getuid(), GID: os.Getgid()}
	enforce := *off
	enforce.Seccomp = testFilter(b)
	var offT, onT, diff []float64
	for b.Loop() {
		var d [2]time.Duration
		for i, p := range []*Policy{off, &enforce} {
			start := time.Now()
			if err := Command(b.Context(), p, "true").Run(); err != nil {
				b.Fatal(err)
			}
			d[i] = time.Since(start)
		}
		offT = append(offT, float64(d[0].Microseconds()))
		onT = append(onT, float64(d[1].Microseconds()))
		diff = append(diff, float64((d[1] - d[0]).Microseconds()))
	}
	b.ReportMetric(median(offT), "off-µs")
	b.ReportMetric(median(onT), "enforce-µs")
	b.ReportMetric(median(diff), "delta-µs")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkHideOptions measures what passing bwrap's options in a memfd
// (buildOptions.argsFile) adds to preparing a launch: building the argv
// and the inherited files, with and without it. A whole launch is
// milliseconds, too noisy to show it.
func BenchmarkHideOptions(b *testing.B) {
	w := &Workspace{Lower: "/srv/repo", Layers: []string{"/var/ws/c1/upper"}, Upper: "/var/ws/c2/upper", Work: "/var/ws/c2/work"}
	p, err := Settings{}.Workspace("workspace", w)
	if err != nil {
		b.Fatal(err)
	}
	for _, hide := range []bool{false, true} {
		name := "argv"
		if hide {
			name = "args-file"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				l, err := p.build([]string{"sh", "-c", "true"}, buildOptions{status: true, argsFile: hide})
				if err != nil {
					b.Fatal(err)
				}
				files, err := supervisor.MemFiles(l.Files)
				if err != nil {
					b.Fatal(err)
				}
				closeAll(files)
			}
		})
	}
}
