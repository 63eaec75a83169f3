package agentcore_test

import (
	"testing"

	"github.com/codumentor/codumentor/agentcore"
)

// A command with bidirectional controls and zero-width characters (which
// make what a person reads differ from what runs) comes to its approval
// with those characters listed and a visible rendering.
func TestApprovalMarksInvisible(t *testing.T) {
	const cmd = "echo safe \u202e# ;rm -rf x\u202c\u200b \x1b[2K done"
	h := newHarness(t, echoScript(cmd, ""), nil)
	h.start("c", "go")
	a, _ := h.pendingApproval("c", 0)
	if a.Command != cmd {
		t.Fatalf("command %q, want it exactly as the model wrote it", a.Command)
	}
	want := []agentcore.InvisibleChar{{Offset: 10, Code: "U+202E"}, {Offset: 24, Code: "U+202C"}, {Offset: 27, Code: "U+200B"}, {Offset: 31, Code: "U+001B"}}
	if len(a.Invisible) != len(want) {
		t.Fatalf("invisible %+v, want %+v", a.Invisible, want)
	}
	for i := range want {
		if a.Invisible[i] != want[i] {
			t.Errorf("invisible[%d] = %+v, want %+v", i, a.Invisible[i], want[i])
		}
	}
	if wantShown := "echo safe [U+202E]# ;rm -rf x[U+202C][U+200B] [U+001B][2K done"; a.CommandShown != wantShown {
		t.Errorf("shown %q, want %q", a.CommandShown, wantShown)
	}
	as, _ := h.store.Approvals(t.Context(), "c")
	if len(as) != 1 || len(as[0].Invisible) != len(want) {
		t.Errorf("stored approval %+v", as)
	}
}

// A command with nothing invisible is shown as it is: command_shown is
// always the field to show.
func TestApprovalShownPlain(t *testing.T) {
	const cmd = "ls -la"
	h := newHarness(t, echoScript(cmd, ""), nil)
	h.start("c", "go")
	a, _ := h.pendingApproval("c", 0)
	if a.CommandShown != cmd || a.Invisible != nil {
		t.Errorf("shown %q, invisible %+v: want %q and none", a.CommandShown, a.Invisible, cmd)
	}
}
