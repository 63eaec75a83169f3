package agentcore_test

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// TestLongOutputAndRanges runs, in a real sandbox Session, a command
// that prints about 200 KB and reads a range of a 100 KB file: the
// model's next request holds the command's last line (a go test -v
// summary) and exactly the numbered lines asked for.
func TestLongOutputAndRanges(t *testing.T) {
	const last = "ok  \texample.com/pkg\t0.123s"
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("long", `seq -f '=== RUN   TestSomething/case_%g of a long test run' 1 5000; printf 'PASS\n`+last+`\n'`)}},
		{ToolCalls: []agentcore.ToolCall{call("range", "read_file", map[string]any{"path": "rows.txt", "offset": 5000, "limit": 3})}},
		{Text: "done"},
	}}
	h := newHarness(t, s, alwaysAllow)
	var rows strings.Builder
	for i := 1; i <= 10000; i++ {
		fmt.Fprintf(&rows, "row %05d\n", i)
	}
	if err := os.WriteFile(filepath.Join(h.lower, "rows.txt"), []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	out := h.llm.lastContent(t, 1)
	if !strings.HasSuffix(out, "PASS\n"+last+"\n[exit status 0]") {
		t.Errorf("the model got output ending %q, want the command's last lines", out[max(0, len(out)-200):])
	}
	if !strings.Contains(out, "=== RUN   TestSomething/case_1 of") || !strings.Contains(out, " bytes elided …]") {
		t.Errorf("the model got no head or no elision count: %.300q", out)
	}
	got := h.llm.lastContent(t, 2)
	want := "rows.txt: lines 5000–5002 of 10,000 (bytes 49,990–50,020 of 100,000)\n" +
		"  5000\trow 05000\n  5001\trow 05001\n  5002\trow 05002\n" +
		"[more lines follow: send offset 5003 to read on (with limit for how many)]"
	if got != want {
		t.Errorf("read_file range:\n%s\nwant:\n%s", got, want)
	}
}

// TestWholeOutputPaged: a command's 200 KB of output is kept whole
// outside the workspace, the model's truncated output names the path, and
// read_file pages it to the last line; the path is not in the workspace's
// upper layer, other conversations cannot read it, and names that are not
// a kept output's are refused.
func TestWholeOutputPaged(t *testing.T) {
	const last = "ok  \texample.com/pkg\t0.123s"
	const kept = ".codumentor/output/long.txt"
	read := func(id, p string, offset, limit int) agentcore.ToolCall {
		return call(id, "read_file", map[string]any{"path": p, "offset": offset, "limit": limit})
	}
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("long", `seq -f '=== RUN   TestSomething/case_%g of a long test run' 1 5000; printf 'PASS\n`+last+`\n'`)}},
		{ToolCalls: []agentcore.ToolCall{
			read("mid", kept, 2500, 2),
			read("end", kept, 5001, 10),
			read("up", ".codumentor/output/../../etc/passwd", 1, 1),
			read("deep", ".codumentor/output/a/b.txt", 1, 1),
			read("area", ".codumentor/output", 1, 1),
			read("none", ".codumentor/output/nosuch.txt", 1, 1),
		}},
		{Text: "done"},
	}, Branches: []llmtest.Branch{{Match: "another conversation", Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{read("other", kept, 1, 1)}},
		{Text: "done"},
	}}}}
	h := newHarness(t, s, alwaysAllow)
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	out := h.llm.lastContent(t, 1)
	if !strings.Contains(out, " bytes elided …]\n[whole output: read_file path \""+kept+"\"]\n") {
		t.Errorf("the truncated output does not name the kept output: %.400q", out[max(0, strings.Index(out, "[…")-50):])
	}
	res := h.toolResults("c")
	want := map[string]string{
		"mid":  kept + ": lines 2500–2501 of 5,002 (bytes ",
		"end":  "  5001\tPASS\n  5002\t" + last + "\n",
		"up":   "no such file", // cleans to etc/passwd of the workspace
		"deep": "not the name of a kept output",
		"area": "kept-output area",
		"none": "no such kept output",
	}
	for id, w := range want {
		if !strings.Contains(res[id], w) {
			t.Errorf("%s: %q, want it to contain %q", id, res[id], w)
		}
	}
	if !strings.Contains(res["mid"], "  2500\t=== RUN   TestSomething/case_2500 of a long test run\n  2501\t") {
		t.Errorf("mid: %q", res["mid"])
	}
	if _, err := os.Lstat(filepath.Join(h.upper("c"), ".codumentor")); !os.IsNotExist(err) {
		t.Errorf("the kept output is in the upper layer (the workspace diff): %v", err)
	}
	if err := h.wait(h.start("d", "another conversation")); err != nil {
		t.Fatal(err)
	}
	if got := h.toolResults("d")["other"]; !strings.Contains(got, "no such kept output") || strings.Contains(got, "TestSomething") {
		t.Errorf("conversation d read c's output: %q", got)
	}
}

// TestKeptOutputRedacted: a secret printed in the elided middle of a long
// output is redacted in the kept copy, on disk and as read_file pages it.
func TestKeptOutputRedacted(t *testing.T) {
	const canary = "canary-Zq8v1Lx-4Pw9s7Tk0Rm2"
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("long", `seq 1 20000; echo "mid {{secret:TOKEN}}"; printf %s {{secret:TOKEN}} | base64; seq 1 20000`)}},
		{ToolCalls: []agentcore.ToolCall{call("page", "read_file", map[string]any{"path": ".codumentor/output/long.txt", "offset": 20001, "limit": 2})}},
		{Text: "done"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) {
		c.ShellAlwaysAllow, c.Secrets = true, secrets{"alice": {"TOKEN": canary}}
	})
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(canary))
	b, err := os.ReadFile(filepath.Join(h.dir, "layers", "c", "output", "long.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), canary) || strings.Contains(string(b), b64) {
		t.Error("the kept output holds the secret")
	}
	if got := h.toolResults("c")["page"]; !hasAll(got, "20001\tmid [secret:TOKEN]\n", "20002\t[secret:TOKEN]") {
		t.Errorf("page: %q", got)
	}
}

// TestKeptOutputBounds: a command's kept output stops at OutputKeep and
// says so; a conversation's kept outputs stay within OutputKeepTotal, the
// oldest dropped first; they go with the workspace's layer.
func TestKeptOutputBounds(t *testing.T) {
	const cmd = `seq -f 'line %g of a long output' 1 8000` // 200 KB
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("o1", cmd), shellCall("o2", cmd), shellCall("o3", cmd), shellCall("o4", cmd)}},
		{ToolCalls: []agentcore.ToolCall{
			call("r1", "read_file", map[string]any{"path": ".codumentor/output/o1.txt"}),
			call("r4", "read_file", map[string]any{"path": ".codumentor/output/o4.txt", "offset": 3000}),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) {
		c.ShellAlwaysAllow, c.OutputKeep, c.OutputKeepTotal = true, 100<<10, 250<<10
	})
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	for _, id := range []string{"o1", "o4"} {
		if !strings.Contains(res[id], `[whole output: read_file path ".codumentor/output/`+id+`.txt" (its first 102,400 bytes: `) || !strings.HasSuffix(res[id], "line 8000 of a long output\n[exit status 0]") {
			t.Errorf("%s: %.300q … %q", id, res[id][strings.Index(res[id], "[…"):], res[id][len(res[id])-60:])
		}
	}
	if !strings.Contains(res["r1"], "no such kept output") || !strings.Contains(res["r1"], "dropped") {
		t.Errorf("r1 (the oldest, dropped): %q", res["r1"])
	}
	if !strings.Contains(res["r4"], "  3000\tline 3000 of a long output\n") || strings.Contains(res["r4"], "line 8000") {
		t.Errorf("r4: %.200q, want the kept part only", res["r4"])
	}
	dir := filepath.Join(h.dir, "layers", "c", "output")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var total int64
	for _, e := range ents {
		fi, _ := e.Info()
		names = append(names, e.Name())
		total += fi.Size()
	}
	if strings.Join(names, " ") != "o3.txt o4.txt" || total > 250<<10 {
		t.Errorf("kept %v, %d bytes; want o3 and o4 within 250 KiB", names, total)
	}
	if err := h.e.DiscardWorkspace("c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the kept outputs outlive the discarded layer: %v", err)
	}
}
