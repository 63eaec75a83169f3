package agentcore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// ReadWorkspace shows the merged view the sandbox sees, confined like
// read_file, without starting a sandbox.
func TestReadWorkspace(t *testing.T) {
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("c1", "echo new > src/new.go && rm gone.txt && echo changed > README.md")}},
		{Text: "done"},
	}}, func(c *agentcore.Config) { c.ShellAlwaysAllow = true; c.MaxFileSize = 64 })
	// Before any turn: the lower tree only.
	f, err := h.e.ReadWorkspace(t.Context(), "alice", "conv1", "README.md", "")
	if err != nil || string(f.Content) != "# demo\nhello world\n" {
		t.Fatalf("before the turn: %+v, %v", f, err)
	}
	if err := h.wait(h.start("conv1", "change things")); err != nil {
		t.Fatal(err)
	}
	// A symlink in the upper layer that leaves the workspace.
	if err := os.Symlink(h.dir, filepath.Join(h.upper("conv1"), "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.lower, "big.txt"), make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, content string
		err           error // errors.Is; nil: any error when content is ""
		entries       []string
	}{
		{path: "README.md", content: "changed\n"},
		{path: "src/new.go", content: "new\n"},
		{path: "src/../src/new.go", content: "new\n"},
		{path: "gone.txt"},
		{path: "big.txt"},
		{path: "/etc/passwd", err: agentcore.ErrOutsideWorkspace},
		{path: "../lower/README.md", err: agentcore.ErrOutsideWorkspace},
		{path: "escape/lower/README.md", err: agentcore.ErrOutsideWorkspace},
		{path: "src", entries: []string{"main.go", "new.go", "util.go"}},
		{path: "", entries: []string{"README.md", "big.txt", "bin", "dir", "docs", "dup.txt", "escape", "nested", "src"}},
	} {
		f, err := h.e.ReadWorkspace(t.Context(), "alice", "conv1", tc.path, "")
		switch {
		case tc.err != nil || tc.content == "" && tc.entries == nil:
			if err == nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("%q: %+v, %v; want error %v", tc.path, f, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.path, err)
		case tc.entries != nil:
			var names []string
			for _, e := range f.Entries {
				names = append(names, e.Name)
			}
			if !f.Dir || len(names) != len(tc.entries) {
				t.Errorf("%q: entries %v, want %v", tc.path, names, tc.entries)
				continue
			}
			for i := range names {
				if names[i] != tc.entries[i] {
					t.Errorf("%q: entries %v, want %v", tc.path, names, tc.entries)
					break
				}
			}
		case string(f.Content) != tc.content:
			t.Errorf("%q: %q, want %q", tc.path, f.Content, tc.content)
		}
	}
}

// Forget cancels the conversation's turn and closes its sandbox, so its
// layer can be removed.
func TestForget(t *testing.T) {
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("c1", "touch started && sleep 60")}},
		{Text: "done"},
	}}, func(c *agentcore.Config) { c.ShellAlwaysAllow = true })
	turn := h.start("conv1", "sleep")
	// Wait until the command runs in the sandbox.
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(h.upper("conv1"), "started")); err != nil {
			return fmt.Errorf("the command did not start: %v", err)
		}
		return nil
	})
	h.e.Forget("conv1")
	select {
	case <-turn.Done():
	default:
		t.Fatal("Forget returned before the turn ended")
	}
	if h.e.Turn("conv1") != nil {
		t.Fatal("the conversation still has a turn")
	}
	if err := h.layers.Remove("conv1"); err != nil {
		t.Fatalf("removing the layer after Forget: %v", err)
	}
}
