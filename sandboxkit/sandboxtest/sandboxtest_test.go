package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder keeps what Unchanged reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestSnapshotUnchanged(t *testing.T) {
	tests := []struct {
		name   string
		change func(dir string) error
		want   string // in the report; "" means no report
	}{
		{"nothing", func(string) error { return nil }, ""},
		{"content", func(d string) error { return os.WriteFile(filepath.Join(d, "a"), []byte("A2"), 0o644) }, "~ a:"},
		{"mode", func(d string) error { return os.Chmod(filepath.Join(d, "a"), 0o600) }, "~ a:"},
		{"added", func(d string) error { return os.WriteFile(filepath.Join(d, "sub/new"), nil, 0o644) }, "+ sub/new"},
		{"deleted", func(d string) error { return os.Remove(filepath.Join(d, "sub/b")) }, "- sub/b"},
		{"retargeted", func(d string) error {
			os.Remove(filepath.Join(d, "l"))
			return os.Symlink("sub/b", filepath.Join(d, "l"))
		}, "~ l:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			os.WriteFile(filepath.Join(dir, "a"), []byte("A"), 0o644)
			os.WriteFile(filepath.Join(dir, "sub/b"), []byte("B"), 0o644)
			os.Symlink("a", filepath.Join(dir, "l"))
			before := Take(t, dir)
			if err := tt.change(dir); err != nil {
				t.Fatal(err)
			}
			r := &recorder{TB: t}
			before.Unchanged(r, dir)
			switch {
			case tt.want == "" && len(r.errs) > 0:
				t.Errorf("reported a change: %v", r.errs)
			case tt.want != "" && (len(r.errs) != 1 || !strings.Contains(r.errs[0], tt.want)):
				t.Errorf("report %q, want one with %q", r.errs, tt.want)
			}
		})
	}
}

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("ab"))
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("ab", 800) {
		t.Fatalf("8 writers: %d bytes, want 1600 of \"ab\"", len(got))
	}
	bounded := Buffer{Max: 5}
	for _, s := range []string{"abc", "defg", "hijklmn"} {
		if n, err := bounded.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := bounded.String(); got != "jklmn" {
		t.Fatalf("bounded: %q, want the last 5 bytes \"jklmn\"", got)
	}
}

// fakeT records what a helper reports instead of ending the test.
type fakeT struct {
	*testing.T
	mu      sync.Mutex
	skipped string
	failed  string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Skipf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.skipped = fmt.Sprintf(format, args...)
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = fmt.Sprintf(format, args...)
}

func TestRequireSandbox(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			f := &fakeT{T: t}
			RequireSandbox(f, func(ctx context.Context) error {
				if ctx == nil {
					t.Error("check got no context")
				}
				return errors.New("bwrap: not found")
			})
			// Under CI=true the fake's Fatalf returns, so Skipf follows it.
			got := f.skipped
			if ci == "true" {
				got = f.failed
			}
			if !strings.Contains(got, "bwrap: not found") || (ci == "" && f.failed != "") {
				t.Errorf("skipped %q, failed %q: want the check's error reported, as a failure under CI=true", f.skipped, f.failed)
			}
			if os.Geteuid() == 0 {
				return // RequireUnprivileged reported too
			}
			f = &fakeT{T: t}
			RequireSandbox(f, func(context.Context) error { return nil })
			if f.skipped != "" || f.failed != "" {
				t.Errorf("a passing check: skipped %q, failed %q", f.skipped, f.failed)
			}
		})
	}
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, time.Minute, func() error {
		if n++; n < 3 {
			return fmt.Errorf("call %d", n)
		}
		return nil
	})
	if n != 3 {
		t.Errorf("cond called %d times, want 3 (until it returns nil)", n)
	}

	f := &fakeT{T: t}
	calls := 0
	start := time.Now()
	Eventually(f, 30*time.Millisecond, func() error {
		calls++
		if f.failed != "" {
			return nil // the fake Fatalf returns; end the loop
		}
		return fmt.Errorf("not yet (%d)", calls)
	})
	if !strings.Contains(f.failed, "stuck") || !strings.Contains(f.failed, "not yet") || time.Since(start) < 30*time.Millisecond {
		t.Errorf("after the timeout: failed %q after %v, want stuck with cond's last error, not before 30ms", f.failed, time.Since(start))
	}
}
