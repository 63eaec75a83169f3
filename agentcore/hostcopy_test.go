package agentcore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit"
)

// RunOnCopy against a hostile program on the host: what it leaves is
// brought back without following a symlink out of the tree.
func TestRunOnCopyHostile(t *testing.T) {
	h := newHarness(t, &llmtest.Script{}, nil)
	outside := filepath.Join(h.dir, "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		// before prepares the conversation's upper layer.
		before func(upper string)
		run    func(dir string) error
		err    error // errors.Is
		check  func(t *testing.T, upper string)
	}{
		{
			name: "its directory swapped for a symlink",
			run: func(dir string) error {
				if err := os.RemoveAll(dir); err != nil {
					return err
				}
				return os.Symlink(outside, dir)
			},
			err: agentcore.ErrCopyBack,
			check: func(t *testing.T, upper string) {
				if ents, _ := os.ReadDir(upper); len(ents) != 0 {
					t.Errorf("upper layer: %v", ents)
				}
			},
		},
		{
			name: "a symlink of the upper layer turned into a directory",
			before: func(upper string) {
				os.Symlink(outside, filepath.Join(upper, "escape"))
			},
			run: func(dir string) error {
				if target, err := os.Readlink(filepath.Join(dir, "escape")); err != nil || target != outside {
					t.Errorf("the copy's escape: %q %v, want the symlink", target, err)
				}
				os.Remove(filepath.Join(dir, "escape"))
				os.Mkdir(filepath.Join(dir, "escape"), 0o755)
				os.WriteFile(filepath.Join(dir, "escape", "x.txt"), []byte("x\n"), 0o644)
				// And a directory of the project turned into a symlink.
				os.RemoveAll(filepath.Join(dir, "docs"))
				return os.Symlink(outside, filepath.Join(dir, "docs"))
			},
			check: func(t *testing.T, upper string) {
				if fi, err := os.Lstat(filepath.Join(upper, "escape")); err != nil || !fi.IsDir() {
					t.Errorf("upper escape: %v %v, want a directory", fi, err)
				}
				if b, err := os.ReadFile(filepath.Join(upper, "escape", "x.txt")); err != nil || string(b) != "x\n" {
					t.Errorf("upper escape/x.txt: %q %v", b, err)
				}
				if target, err := os.Readlink(filepath.Join(upper, "docs")); err != nil || target != outside {
					t.Errorf("upper docs: %q %v, want the symlink", target, err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conv := fmt.Sprintf("conv%d", i)
			if _, err := h.layers.Create(conv); err != nil {
				t.Fatal(err)
			}
			call := &agentcore.Call{User: "alice", Conversation: conv}
			upper := h.upper(conv)
			if tc.before != nil {
				tc.before(upper)
			}
			ran := false
			err := h.e.RunOnCopy(t.Context(), call, func(ctx context.Context, dir string) error {
				ran = true
				return tc.run(dir)
			})
			if !ran || tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("RunOnCopy: ran %v, %v; want %v", ran, err, tc.err)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("written outside the tree: %v", ents)
			}
			for name, body := range lowerFiles {
				if b, err := os.ReadFile(filepath.Join(h.lower, name)); err != nil || string(b) != body {
					t.Errorf("project %s: %q %v", name, b, err)
				}
			}
			tc.check(t, upper)
		})
	}
}

// RunOnCopy brings back at most the workspace's disk budget of files.
func TestRunOnCopyBudget(t *testing.T) {
	l := sandboxkit.DefaultLimits()
	l.Disk = 1 << 20
	h := newHarness(t, &llmtest.Script{}, func(c *agentcore.Config) { c.Sandbox.Limits = &l })
	call := &agentcore.Call{User: "alice", Conversation: "conv1"}
	err := h.e.RunOnCopy(t.Context(), call, func(ctx context.Context, dir string) error {
		return os.WriteFile(filepath.Join(dir, "big.bin"), make([]byte, 2<<20), 0o644)
	})
	if !errors.Is(err, agentcore.ErrCopyBack) || !strings.Contains(err.Error(), "disk budget of 1 MiB") {
		t.Fatalf("RunOnCopy of 2 MiB, budget 1 MiB: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(h.upper("conv1"), "big.bin")); err == nil {
		t.Error("big.bin was brought back")
	}
}
