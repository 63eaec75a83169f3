package agentcore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// TestFileTools runs the file tools in one turn over a real overlay: the
// calls run in order, so a write is seen by the calls after it.
func TestFileTools(t *testing.T) {
	type args = map[string]any
	tests := []struct {
		name    string
		tool    string
		args    args
		want    []string // in the result
		wantNot []string
	}{
		{"read", "read_file", args{"path": "README.md"}, []string{"hello world"}, nil},
		{"read cleaned inside", "read_file", args{"path": "src/../README.md"}, []string{"hello world"}, nil},
		{"read through a link inside", "read_file", args{"path": "link-main"}, []string{"package main"}, nil},
		{"read through a dir link inside", "read_file", args{"path": "link-src/util.go"}, []string{"return 42"}, nil},
		{"read deleted (whiteout)", "read_file", args{"path": "gone.txt"}, []string{"no such file"}, []string{"gone\n"}},
		{"read hidden by opaque dir", "read_file", args{"path": "dir/a.txt"}, []string{"no such file"}, nil},
		{"read new in opaque dir", "read_file", args{"path": "dir/new.txt"}, []string{"new"}, nil},
		{"read missing", "read_file", args{"path": "missing.txt"}, []string{"no such file"}, nil},
		{"read a directory", "read_file", args{"path": "src"}, []string{"not a regular file"}, nil},
		{"read bigger than MaxFileSize", "read_file", args{"path": "big.txt"}, []string{"big.txt: lines 1–1 of 1 (bytes 0–2,000 of 2,000)\n     1\taaaa"}, nil},
		{"read a range", "read_file", args{"path": "src/main.go", "offset": 3, "limit": 2}, []string{"lines 3–4 of 5", "     3\tfunc main() {\n     4\t\tprintln", "send offset 5"}, []string{"package"}},
		{"read past the end", "read_file", args{"path": "src/main.go", "offset": 9}, []string{"past the end", "5 lines"}, nil},
		{"read negative offset", "read_file", args{"path": "src/main.go", "offset": -1}, []string{"cannot be negative"}, nil},
		{"read unknown argument", "read_file", args{"path": "README.md", "lines": "1-5"}, []string{`unknown argument "lines"; the arguments are: limit, offset, path`}, []string{"hello world"}},
		{"shell unknown argument", "shell", args{"command": "echo ran", "timeout_s": 5}, []string{`unknown argument "timeout_s"; the arguments are: background, command, cwd, timeout`}, []string{"ran"}},
		{"read no path", "read_file", args{}, []string{"not a regular file"}, nil},

		{"write new in new dir", "write_file", args{"path": "w/deep/new.txt", "content": "hello write\n"}, []string{"wrote 12 bytes"}, nil},
		{"shell sees the write", "shell", args{"command": "cat w/deep/new.txt"}, []string{"hello write"}, nil},
		{"overwrite a lower file", "write_file", args{"path": "README.md", "content": "changed\n"}, []string{"wrote 8 bytes"}, nil},
		{"read the overwrite", "read_file", args{"path": "README.md"}, []string{"changed"}, []string{"hello world"}},
		{"write through a link", "write_file", args{"path": "link-main", "content": "x"}, []string{"symlink"}, nil},
		{"write too big", "write_file", args{"path": "huge.txt", "content": strings.Repeat("b", 2000)}, []string{"write limit"}, nil},
		{"write a directory", "write_file", args{"path": "src", "content": "x"}, []string{"not a regular file"}, nil},
		{"write git's config", "write_file", args{"path": ".git/config", "content": "[core]\n\tfsmonitor = ./x\n"}, []string{"in a .git directory"}, []string{"wrote"}},
		{"write a nested gitdir file", "write_file", args{"path": "w/sub/.git", "content": "gitdir: ../../evil\n"}, []string{"in a .git directory"}, []string{"wrote"}},
		{"write a fake repository", "write_file", args{"path": "evil/.git/config", "content": "[core]\n"}, []string{"in a .git directory"}, []string{"wrote"}},
		{"write a name like .git", "write_file", args{"path": "w/x.git/HEAD", "content": "ok\n"}, []string{"wrote 3 bytes"}, nil},
		{"edit git's config", "edit_file", args{"path": ".git/config", "old_string": "a", "new_string": "b"}, []string{".git"}, []string{"replaced"}},

		{"edit once", "edit_file", args{"path": "src/util.go", "old_string": "42", "new_string": "43"}, []string{"replaced 1"}, nil},
		{"read the edit", "read_file", args{"path": "src/util.go"}, []string{"return 43"}, nil},
		{"edit not unique", "edit_file", args{"path": "dup.txt", "old_string": "x", "new_string": "y"}, []string{"occurs 2 times", "nothing changed"}, nil},
		{"edit all", "edit_file", args{"path": "dup.txt", "old_string": "x", "new_string": "y", "replace_all": true}, []string{"replaced 2"}, nil},
		{"read edit all", "read_file", args{"path": "dup.txt"}, []string{"     1\ty\n     2\ty\n"}, nil},
		{"edit absent", "edit_file", args{"path": "src/util.go", "old_string": "nope", "new_string": "x"}, []string{"not found", "nothing changed"}, nil},
		{"edit missing file", "edit_file", args{"path": "nofile.go", "old_string": "a", "new_string": "b"}, []string{"no such file"}, nil},

		{"list root", "list_files", args{}, []string{"README.md\n", "src/\n", "link-main@", "\nw/"}, []string{"gone.txt"}},
		{"list opaque dir", "list_files", args{"path": "dir"}, []string{"new.txt"}, []string{"a.txt", "b.txt"}},
		{"list recursive", "list_files", args{"path": "nested", "recursive": true}, []string{"x/\n", "x/y/\n", "x/y/z.md"}, nil},
		{"list a file", "list_files", args{"path": "README.md"}, []string{"not a directory"}, nil},

		{"search", "search_files", args{"pattern": "hel+o"}, []string{"docs/hello.txt:1: hello docs", "nested/x/y/z.md:1: deep hello", "src/main.go:4:"}, []string{"blob.bin", "README.md"}},
		{"search under", "search_files", args{"pattern": "hello", "path": "docs"}, []string{"docs/hello.txt:1:"}, []string{"src/"}},
		{"search bad pattern", "search_files", args{"pattern": "("}, []string{"invalid pattern"}, nil},
		{"search none", "search_files", args{"pattern": "zzzzqqq"}, []string{"no matches"}, nil},

		{"unknown tool", "no_such_tool", args{}, []string{"unknown tool", "read_file"}, nil},
		{"bad arguments", "read_file", args{"path": 7}, []string{"invalid arguments"}, nil},
	}
	var calls []agentcore.ToolCall
	for i, tt := range tests {
		calls = append(calls, call(fmt.Sprintf("t%d", i), tt.tool, tt.args))
	}
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("setup", "rm gone.txt && rm -r dir && mkdir dir && echo new > dir/new.txt && ln -s src/main.go link-main && ln -s src link-src")}},
		{ToolCalls: calls},
		{Text: "done"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) { c.ShellAlwaysAllow, c.MaxFileSize = true, 1024 })
	if err := os.WriteFile(filepath.Join(h.lower, "big.txt"), []byte(strings.Repeat("a", 2000)), 0o644); err != nil {
		t.Fatal(err)
	}
	before := sandboxtest.Take(t, h.lower)
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	if !strings.Contains(res["setup"], "exit status 0") {
		t.Fatalf("setup: %q", res["setup"])
	}
	for i, tt := range tests {
		got := res[fmt.Sprintf("t%d", i)]
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: result %q lacks %q", tt.name, got, w)
			}
		}
		for _, w := range tt.wantNot {
			if strings.Contains(got, w) {
				t.Errorf("%s: result %q holds %q", tt.name, got, w)
			}
		}
	}
	before.Unchanged(t, h.lower)
	if b, err := os.ReadFile(filepath.Join(h.upper("c"), "w", "deep", "new.txt")); err != nil || string(b) != "hello write\n" {
		t.Errorf("upper w/deep/new.txt %q %v", b, err)
	}
}

// TestPathsOutsideRefused shows every way out of the workspace refused,
// and that the target outside is never opened: it is a FIFO with a
// writer waiting, which an open for reading would release.
func TestPathsOutsideRefused(t *testing.T) {
	paths := []struct{ name, path string }{
		{"dotdot", "../../etc/passwd"},
		{"absolute", "/etc/passwd"},
		{"dotdot to the fifo", "../outside.fifo"},
		{"absolute to the fifo", "ABS_FIFO"},
		{"link to /root", "link-root"},
		{"link to ../../..", "link-up/etc/passwd"},
		{"link to parent", "link-parent/outside.fifo"},
		{"absolute link to the fifo", "link-abs"},
		{"relative link to the fifo", "link-rel"},
		{"link made in the sandbox", "sandbox-link"},
		{"link chain", "link-chain"},
	}
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("setup", "ln -s ../outside.fifo sandbox-link && ln -s link-rel link-chain")}},
		{}, // filled below
		{Text: "done"},
	}}
	var calls []agentcore.ToolCall
	for i, p := range paths {
		calls = append(calls, call(fmt.Sprintf("r%d", i), "read_file", map[string]string{"path": p.path}))
	}
	calls = append(calls,
		call("w", "write_file", map[string]string{"path": "link-parent/outside.txt", "content": "x"}),
		call("e", "edit_file", map[string]string{"path": "link-rel", "old_string": "a", "new_string": "b"}),
		call("l", "list_files", map[string]string{"path": ".."}),
		call("l2", "list_files", map[string]string{"path": "link-up"}),
		call("s", "search_files", map[string]string{"pattern": "root", "path": "/etc"}),
		call("s2", "search_files", map[string]string{"pattern": "root", "path": "link-up/etc"}),
		call("cwd", "shell", map[string]string{"command": "pwd", "cwd": "../"}),
	)
	h := newHarness(t, s, alwaysAllow)
	fifo := filepath.Join(h.dir, "outside.fifo")
	for i := range calls {
		calls[i].Arguments = strings.ReplaceAll(calls[i].Arguments, "ABS_FIFO", fifo)
	}
	s.Steps[1].ToolCalls = calls
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link-root": "/root", "link-up": "../../..", "link-parent": "..", "link-abs": fifo, "link-rel": "../outside.fifo"} {
		if err := os.Symlink(target, filepath.Join(h.lower, name)); err != nil {
			t.Fatal(err)
		}
	}
	opened := make(chan struct{})
	go func() {
		// Blocks until someone opens the FIFO for reading.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		close(opened)
	}()
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	if !strings.Contains(res["setup"], "exit status 0") {
		t.Fatalf("setup: %q", res["setup"])
	}
	for i, p := range paths {
		if got := res[fmt.Sprintf("r%d", i)]; !strings.Contains(got, "leaves the workspace") {
			t.Errorf("%s: read_file(%q) = %q, want it refused", p.name, p.path, got)
		}
	}
	for _, id := range []string{"w", "e", "l", "l2", "s", "s2", "cwd"} {
		if got := res[id]; !strings.Contains(got, "leaves the workspace") {
			t.Errorf("%s: %q, want it refused", id, got)
		}
	}
	if _, err := os.Stat(filepath.Join(h.dir, "outside.txt")); err == nil {
		t.Error("write_file wrote outside the workspace")
	}
	select {
	case <-opened:
		t.Error("the FIFO outside the workspace was opened")
	case <-time.After(100 * time.Millisecond):
	}
	// Release the writer.
	if f, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
		<-opened
		f.Close()
	}
}
