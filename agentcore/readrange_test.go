package agentcore_test

import (
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
