package agentcore_test

import (
	"context"
	"fmt"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// TestSwappedSymlinkListsNoHostNames races the file tools and
// ReadWorkspace against a process that keeps exchanging a workspace
// directory with a symlink to a host directory (renameat2
// RENAME_EXCHANGE, as a background job in the sandbox can): a listing
// re-resolved by path after its check would show the host entries. Not
// one host name may come back, over many iterations.
func TestSwappedSymlinkListsNoHostNames(t *testing.T) {
	const rounds = 60
	s := &llmtest.Script{Steps: []llmtest.Step{{}, {Text: "done"}}}
	var calls []agentcore.ToolCall
	for i := range rounds {
		calls = append(calls,
			call(fmt.Sprintf("l%d", i), "list_files", map[string]any{"path": "sw"}),
			call(fmt.Sprintf("r%d", i), "list_files", map[string]any{"recursive": true}),
			call(fmt.Sprintf("s%d", i), "search_files", map[string]any{"pattern": "needle"}),
		)
	}
	s.Steps[0].ToolCalls = calls
	h := newHarness(t, s, alwaysAllow)
	// ReadWorkspace makes the layer; the tree is then built in it as the
	// sandbox would.
	if _, err := h.e.ReadWorkspace(t.Context(), "alice", "conv1", "", ""); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(h.dir, "hostside")
	upper := h.upper("conv1")
	for _, d := range []string{host + "/HOSTLEAK-dir", upper + "/sw/sub"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{host + "/HOSTLEAK-file.txt", host + "/HOSTLEAK-dir/HOSTLEAK-deep.txt", upper + "/sw/inside.txt", upper + "/sw/sub/deep.txt"} {
		if err := os.WriteFile(f, []byte("needle\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(host, upper+"/swl"); err != nil {
		t.Fatal(err)
	}
	defer sandboxtest.Exchange(t, upper+"/sw", upper+"/swl")()

	seen := 0 // listings that did show sw's own entries
	for i := range 2000 {
		p := []string{"sw", "sw/sub", ""}[i%3]
		f, err := h.e.ReadWorkspace(t.Context(), "alice", "conv1", p, "")
		if err != nil {
			if strings.Contains(err.Error(), "HOSTLEAK") || strings.Contains(err.Error(), upper) {
				t.Fatalf("ReadWorkspace(%q) error shows the host: %v", p, err)
			}
			continue
		}
		for _, e := range f.Entries {
			if strings.Contains(e.Name, "HOSTLEAK") {
				t.Fatalf("ReadWorkspace(%q) listed the host entry %q", p, e.Name)
			}
			if e.Name == "inside.txt" {
				seen++
			}
		}
	}
	if err := h.wait(h.start("conv1", "list")); err != nil {
		t.Fatal(err)
	}
	for id, out := range h.toolResults("conv1") {
		if strings.Contains(out, "HOSTLEAK") || strings.Contains(out, upper) {
			t.Errorf("%s shows the host: %q", id, out)
		}
		if strings.Contains(out, "inside.txt") {
			seen++
		}
	}
	if seen == 0 {
		t.Error("no listing showed sw/inside.txt: the race was not exercised")
	}
}

// TestFileErrorsShowNoHostPath: errors the model (or an API client)
// gets name workspace paths, never the layer directories on the host.
func TestFileErrorsShowNoHostPath(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("setup", "mkdir -p locked/sub && echo x > locked/sub/f && chmod 000 locked")}},
		{ToolCalls: []agentcore.ToolCall{
			call("read", "read_file", map[string]any{"path": "locked/sub/f"}),
			call("list", "list_files", map[string]any{"path": "locked"}),
			call("search", "search_files", map[string]any{"pattern": "x", "path": "locked/sub"}),
			call("write", "write_file", map[string]any{"path": "locked/sub/g", "content": "y"}),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, alwaysAllow)
	if err := h.wait(h.start("conv1", "go")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("conv1")
	if !strings.Contains(res["setup"], "exit status 0") {
		t.Fatalf("setup: %q", res["setup"])
	}
	for _, id := range []string{"read", "list", "search"} {
		if out := res[id]; strings.Contains(out, h.dir) || !strings.Contains(out, "locked") || !strings.Contains(out, "permission denied") {
			t.Errorf("%s: %q; want the workspace path and the reason, no host path", id, out)
		}
	}
	if strings.Contains(res["write"], h.dir) {
		t.Errorf("write: %q shows a host path", res["write"])
	}
	_, err := h.e.ReadWorkspace(t.Context(), "alice", "conv1", "locked/sub/f", "")
	if err == nil || strings.Contains(err.Error(), h.dir) || !strings.Contains(err.Error(), "locked") {
		t.Errorf("ReadWorkspace: %v; want an error naming the workspace path only", err)
	}
}

// TestReadWorkspacePages: a big directory comes a page at a time, in
// name order, merged over lower, each entry once.
func TestReadWorkspacePages(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{
			shellCall("setup", "cd src && rm util.go && seq -f 'f%05g' 1 2500 | xargs touch"),
			call("list", "list_files", map[string]any{"path": "src"}),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, alwaysAllow)
	if err := h.wait(h.start("conv1", "go")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("conv1")
	if !strings.Contains(res["setup"], "exit status 0") {
		t.Fatalf("setup: %q", res["setup"])
	}
	lines := strings.Split(res["list"], "\n")
	if len(lines) != 1001 || lines[0] != "f00001" || !strings.Contains(lines[1000], "stopped after 1000") {
		t.Errorf("list_files src: %d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
	var names []string
	cursor, pages := "", 0
	for {
		f, err := h.e.ReadWorkspace(t.Context(), "alice", "conv1", "src", cursor)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if len(f.Entries) > agentcore.WorkspacePageSize {
			t.Fatalf("page %d has %d entries", pages, len(f.Entries))
		}
		for _, e := range f.Entries {
			names = append(names, e.Name)
		}
		if cursor = f.NextCursor; cursor == "" {
			break
		}
	}
	want := []string{}
	for i := 1; i <= 2500; i++ {
		want = append(want, fmt.Sprintf("f%05d", i))
	}
	want = append(want, "main.go")
	if pages != 3 || !slices.Equal(names, want) {
		t.Errorf("%d pages, %d names (first %v); want 3 pages of %d names in order", pages, len(names), names[:min(3, len(names))], len(want))
	}
	if _, err := h.e.ReadWorkspace(t.Context(), "alice", "conv1", "src", "!!"); err == nil || !strings.Contains(err.Error(), "cursor") {
		t.Errorf("bad cursor: %v", err)
	}
}

// TestWriteFileFIFOTimesOut: a FIFO swapped in after write_file's check
// must not hold the write (and the turn) until the turn is cancelled. A
// background job keeps f a file until another process starts in the
// sandbox (a write's command), then renames a FIFO over f, and makes f
// a file again once that process is gone; the model asks for each write
// once f is a file. The rename wins the race most times (4 in 5 here),
// so at least one of the writes must time out.
func TestWriteFileFIFOTimesOut(t *testing.T) {
	const writes = 6
	// Builtins only from counting the processes to the rename, and f
	// stays a FIFO until no more processes run than before.
	const swap = `while :; do rm -f f p; mkfifo p; set -- /proc/[0-9]*; k=$#; : > f
until [ $# -gt $k ]; do set -- /proc/[0-9]*; done; mv -f p f
until [ $# -le $k ]; do set -- /proc/[0-9]*; done; done`
	model := &fifoLLM{swap: swap, writes: writes}
	h := newHarness(t, nil, func(c *agentcore.Config) {
		c.LLM, c.ShellAlwaysAllow, c.CommandTimeout = model, true, 500*time.Millisecond
		c.RepeatLimit = writes + 1 // the same write, each once f is a file again
	})
	model.file = filepath.Join(h.upper("conv1"), "f")
	start := time.Now()
	if err := h.wait(h.start("conv1", "go")); err != nil {
		t.Fatal(err)
	}
	timedOut := 0
	for id, out := range h.toolResults("conv1") {
		if strings.HasPrefix(id, "w") && strings.Contains(out, "timed out") {
			timedOut++
		}
	}
	t.Logf("%d of %d writes met a FIFO and timed out; the turn took %v", timedOut, writes, time.Since(start))
	if timedOut == 0 {
		t.Errorf("no write met the FIFO: the race was not exercised")
	}
}

// fifoLLM starts the background job swap, then makes writes write_file
// calls of f, one a reply, each once file is a regular file.
type fifoLLM struct {
	swap, file string
	writes     int
	mu         sync.Mutex
	n          int
}

func (l *fifoLLM) Stream(ctx context.Context, req agentcore.Request) (agentcore.Stream, error) {
	l.mu.Lock()
	n := l.n
	l.n++
	l.mu.Unlock()
	var c agentcore.ToolCall
	switch {
	case n == 0:
		c = call("bg", "shell", map[string]any{"command": l.swap, "background": true})
	case n <= l.writes:
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if fi, err := os.Lstat(l.file); err == nil && fi.Mode().IsRegular() || time.Now().After(deadline) {
				break
			}
		}
		c = call(fmt.Sprintf("w%d", n), "write_file", map[string]any{"path": "f", "content": "data"})
	default:
		return &sliceStream{ctx: ctx, chunks: textPieces("done")}, nil
	}
	return &sliceStream{ctx: ctx, chunks: []agentcore.Chunk{{ToolCall: &c}, {FinishReason: "tool_calls"}}}, nil
}

// TestSandboxStartErrorShowsNoHostPath: a sandbox that cannot start
// (its layer is locked by another) is reported to the model without the
// layer's host path.
func TestSandboxStartErrorShowsNoHostPath(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("run", "true")}},
		{Text: "done"},
	}}
	h := newHarness(t, s, alwaysAllow)
	if _, err := h.e.ReadWorkspace(t.Context(), "alice", "conv1", "", ""); err != nil {
		t.Fatal(err)
	}
	unlock, err := overlay.Lock(h.upper("conv1"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if err := h.wait(h.start("conv1", "go")); err != nil {
		t.Fatal(err)
	}
	out := h.toolResults("conv1")["run"]
	if !strings.Contains(out, "in use") || strings.Contains(out, h.dir) {
		t.Errorf("result %q: want the layer in use, without a host path", out)
	}
}

// TestWorkspaceChmod000Readable: a sandbox that takes its owner's access
// to /workspace itself (chmod 000) does not make the file tools and
// ReadWorkspace fail until the next sandbox starts.
func TestWorkspaceChmod000Readable(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("lock", "echo x > made.txt && chmod 000 /workspace")}},
		{ToolCalls: []agentcore.ToolCall{call("list", "list_files", map[string]any{})}},
		{Text: "done"},
	}}
	h := newHarness(t, s, alwaysAllow)
	if err := h.wait(h.start("conv1", "go")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("conv1")
	if !strings.Contains(res["lock"], "exit status 0") {
		t.Fatalf("lock: %q", res["lock"])
	}
	if !strings.Contains(res["list"], "made.txt") {
		t.Errorf("list_files after chmod 000 /workspace: %q", res["list"])
	}
	f, err := h.e.ReadWorkspace(t.Context(), "alice", "conv1", "made.txt", "")
	if err != nil {
		t.Errorf("ReadWorkspace after chmod 000 /workspace: %v", err)
	} else if string(f.Content) != "x\n" {
		t.Errorf("ReadWorkspace after chmod 000 /workspace: %q", f.Content)
	}
}
