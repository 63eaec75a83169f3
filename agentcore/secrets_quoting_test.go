package agentcore_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// A secret with spaces and a glob character, in a workspace full of files
// the glob matches, reaches the command as one word, quoted or not; a
// placeholder inside single quotes is refused before an approval is
// asked.
func TestSecretQuoting(t *testing.T) {
	const value = "correct horse battery *"
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{
			shellCall("refused", `echo '{{secret:PW}}' > refused.txt`),
			shellCall("words", `printf '[%s]\n' {{secret:PW}} "{{secret:PW}}" "pre {{secret:PW}} post" | tr -c '[]\n' x; printf '%s' "{{secret:PW}}" > one.txt`),
		}},
		{Text: "done"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) {
		c.Secrets = secrets{"alice": {"PW": value}}
	})
	turn := h.start("c", "print it")
	a, _ := h.pendingApproval("c", 0)
	if a.ToolCallID != "words" {
		t.Fatalf("approval asked for %s (%q), want only the call that can run", a.ToolCallID, a.Command)
	}
	if err := h.e.Decide(t.Context(), "alice", "c", a.ID, agentcore.DecisionApprove); err != nil {
		t.Fatal(err)
	}
	if err := h.wait(turn); err != nil {
		t.Fatal(err)
	}
	res := h.toolResults("c")
	if !hasAll(res["refused"], "single quotes", "nothing was run") {
		t.Errorf("single-quoted placeholder: %q", res["refused"])
	}
	// Each value is one word: its characters, masked, between one pair
	// of brackets.
	masked := strings.Repeat("x", len(value))
	want := "[" + masked + "]\n[" + masked + "]\n[" + strings.Repeat("x", len("pre  post")+len(value)) + "]\n"
	if !strings.HasPrefix(res["words"], want) {
		t.Errorf("output %q, want %q", res["words"], want)
	}
	if got := readUpper(t, h, "c", "one.txt"); got != value {
		t.Errorf("one.txt = %q, want the value", got)
	}
	if got := readUpper(t, h, "c", "refused.txt"); got != "" {
		t.Errorf("the refused command ran: refused.txt = %q", got)
	}
}

// readUpper reads a file the sandbox wrote into conv's upper layer ("" if
// it does not exist).
func readUpper(t *testing.T, h *harness, conv, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.upper(conv), name))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}
