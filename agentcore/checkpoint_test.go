package agentcore_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// A turn's end checkpoint, taken only when needed, is the tree the turn
// left: a fork from its reply sees it after a revert changed the
// workspace, after a restart, and not while a background job writes on.
func TestCheckpointAfterTurn(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("c1", "echo one > a.txt")}},
		{Text: "t1"},
		{ToolCalls: []agentcore.ToolCall{shellCall("c2", "echo two > b.txt")}},
		{Text: "t2"},
		{ToolCalls: []agentcore.ToolCall{shellCall("c3", "echo three > c.txt")}},
		{Text: "t3"},
		{ToolCalls: []agentcore.ToolCall{call("c4", "shell", map[string]any{"command": "echo early > bg.txt; sleep 300", "background": true})}},
		{Text: "t4"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) { c.ShellAlwaysAllow = true })
	turn := func(e *agentcore.Engine) string {
		t.Helper()
		tr, err := e.StartTurn(t.Context(), agentcore.TurnRequest{User: "alice", Conversation: "c", Content: "go"})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.wait(tr); err != nil {
			t.Fatal(err)
		}
		return tr.ID
	}
	// reply is the ID of turn's last message.
	reply := func(turn string) string {
		t.Helper()
		msgs, err := h.store.Messages(t.Context(), "c")
		if err != nil {
			t.Fatal(err)
		}
		id := ""
		for _, m := range msgs {
			if m.Turn == turn {
				id = m.ID
			}
		}
		return id
	}
	// files lists conversation conv's upper layer.
	files := func(conv string) []string {
		t.Helper()
		l, err := h.layers.Get(conv)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		ents, err := os.ReadDir(l.Upper)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			data, err := os.ReadFile(filepath.Join(l.Upper, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e.Name()+"="+string(data))
		}
		return out
	}
	fork := func(e *agentcore.Engine, turn, dst string, want ...string) {
		t.Helper()
		if err := e.Fork(t.Context(), "alice", "c", reply(turn), dst); err != nil {
			t.Fatalf("fork from %s's reply: %v", turn, err)
		}
		if got := files(dst); !slices.Equal(got, want) {
			t.Errorf("fork from %s's reply: %q, want %q", turn, got, want)
		}
	}

	t1 := turn(h.e)
	fork(h.e, t1, "f1", "a.txt=one\n")
	t2 := turn(h.e)
	// Reverting turn 2 leaves its end's checkpoint as the turn left it.
	if err := h.e.RevertTurn(t.Context(), "alice", "c", t2); err != nil {
		t.Fatal(err)
	}
	if got, want := files("c"), []string{"a.txt=one\n"}; !slices.Equal(got, want) {
		t.Fatalf("after the revert: %q, want %q", got, want)
	}
	fork(h.e, t2, "f2", "a.txt=one\n", "b.txt=two\n")
	fork(h.e, t1, "f1b", "a.txt=one\n") // turn 2's begin: the same tree

	// Close takes the checkpoint the last turn is owed; a new engine
	// forks from it.
	t3 := turn(h.e)
	h.e.Close()
	e2, err := agentcore.New(agentcore.Config{LLM: h.llm, Store: h.store, Workspaces: lowers(h.lower), Layers: h.layers, ShellAlwaysAllow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	fork(e2, t3, "f3", "a.txt=one\n", "c.txt=three\n")

	// A background job still runs as turn 4 ends: there is no tree of
	// that moment to fork from, and none is made of what it writes later.
	t4 := turn(e2)
	if err := e2.Fork(t.Context(), "alice", "c", reply(t4), "f4"); !errors.Is(err, agentcore.ErrNoCheckpoint) {
		t.Errorf("fork from a reply while its background job runs: %v, want ErrNoCheckpoint", err)
	}
}

// A turn after its workspace was discarded checkpoints the new layer: a
// revert to its beginning finds the checkpoint.
func TestCheckpointAfterDiscard(t *testing.T) {
	s := &llmtest.Script{Steps: []llmtest.Step{
		{ToolCalls: []agentcore.ToolCall{shellCall("c1", "echo one > a.txt")}},
		{Text: "t1"},
		{ToolCalls: []agentcore.ToolCall{shellCall("c2", "echo two > b.txt")}},
		{Text: "t2"},
	}}
	h := newHarness(t, s, func(c *agentcore.Config) { c.ShellAlwaysAllow = true })
	if err := h.wait(h.start("c", "go")); err != nil {
		t.Fatal(err)
	}
	if err := h.e.DiscardWorkspace("c"); err != nil {
		t.Fatal(err)
	}
	t2 := h.start("c", "go")
	if err := h.wait(t2); err != nil {
		t.Fatal(err)
	}
	if err := h.e.RevertTurn(t.Context(), "alice", "c", t2.ID); err != nil {
		t.Fatalf("revert of the turn after the discard: %v", err)
	}
	l, err := h.layers.Get("c")
	if err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(l.Upper); err != nil || len(ents) != 0 {
		t.Errorf("after the revert the upper layer holds %v (%v), want nothing", ents, err)
	}
}
