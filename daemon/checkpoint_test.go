package daemon_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// upperHash describes every entry of a conversation's upper layer: type,
// mode, content hash, symlink target, device number (whiteouts) and the
// opaque mark. The lower tree stays as it is, so two equal uppers show
// the sandbox the same workspace.
func upperHash(t *testing.T, in *instance, conv string) map[string]string {
	t.Helper()
	root := filepath.Join(in.dir, "workspaces", "layers", conv, "upper")
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("type %o mode %o", st.Mode&unix.S_IFMT, st.Mode&0o7777)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256 %x", sha256.Sum256(data))
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case unix.S_IFCHR:
			desc += fmt.Sprintf(" rdev %d", st.Rdev)
		case unix.S_IFDIR:
			buf := make([]byte, 8)
			if n, err := unix.Lgetxattr(p, "user.overlay.opaque", buf); err == nil {
				desc += " opaque " + string(buf[:n])
			}
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: %q, want %q", k, got[k], v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %q, want none", k, v))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("%s: the workspace differs:\n%s", what, strings.Join(diffs, "\n"))
	}
}

func (c *client) messages(conv string, all bool) []agentcore.Message {
	c.t.Helper()
	var res struct{ Messages []agentcore.Message }
	c.must(http.StatusOK, "GET", fmt.Sprintf("/api/v1/conversations/%s/messages?all=%v", conv, all), nil, &res)
	return res.Messages
}

// contents is each message as role: content (tool calls by name).
func contents(msgs []agentcore.Message) []string {
	var out []string
	for _, m := range msgs {
		s := string(m.Role) + ": " + m.Content
		for _, c := range m.ToolCalls {
			s += " [" + c.Name + "]"
		}
		if m.Role == agentcore.RoleTool {
			s = "tool"
		}
		out = append(out, s)
	}
	return out
}

// bodyContents is contents of the messages of a request the model got.
func bodyContents(t *testing.T, body []byte) []string {
	t.Helper()
	var req struct {
		Messages []struct {
			Role      agentcore.Role
			Content   string
			ToolCalls []struct{ Function struct{ Name string } } `json:"tool_calls"`
		}
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var msgs []agentcore.Message
	for _, m := range req.Messages[1:] { // after the system prompt
		msg := agentcore.Message{Role: m.Role, Content: m.Content}
		for _, c := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, agentcore.ToolCall{Name: c.Function.Name})
		}
		msgs = append(msgs, msg)
	}
	return contents(msgs)
}

// Revert, edit, regenerate and fork, through the API against a real
// sandbox: each workspace is the exact tree of its point, each history
// the one the model is sent, the old branch stays readable, a revert or
// edit during a turn is refused, and another user sees none of it.
func TestCheckpointRevertEditFork(t *testing.T) {
	needSandbox(t)
	srv, err := llmtest.StartServer(&llmtest.Script{
		Steps: []llmtest.Step{
			shellCall("echo one > a.txt && chmod 755 a.txt && echo more >> edit.txt && rm gone.txt && ln -s a.txt la && rm -r sub && mkdir sub && echo fresh > sub/only.txt"),
			{Expect: "exit status 0", Text: "turn1 done"},
			shellCall("echo two > b.txt && rm a.txt && echo changed > keep.txt && chmod 600 edit.txt && rm la && ln -s keep.txt la"),
			{Expect: "exit status 0", Text: "turn2 done"},
			shellCall("cat keep.txt a.txt; test -e b.txt || echo no-b"),
			{Expect: "keep\none\nno-b", Text: "the revert is what the sandbox sees"},
		},
		Branches: []llmtest.Branch{
			{Match: "please stall", Steps: []llmtest.Step{{Text: "thinking", Stall: true}}},
			{Match: "background please", Steps: []llmtest.Step{
				{Text: "Starting it.", ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: `{"command":"echo bg > bg.txt; sleep 120","background":true}`}}},
				{Text: "started"},
			}},
		},
	}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\nsandbox:\n  shell_always_allow: true\n", srv.URL()))
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a, b := p.login("alice", pw), p.login("bob", pw)
	conv := a.newConversation()
	lower := filepath.Join(in.dir, "workspaces", "trees", conv)
	for name, data := range map[string]string{"edit.txt": "edit\n", "gone.txt": "gone\n", "keep.txt": "keep\n", "sub/old.txt": "old\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(lower, name)), 0o700)
		if err := os.WriteFile(filepath.Join(lower, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := a.follow(conv, "")
	defer s.close()
	base := "/api/v1/conversations/" + conv
	diff := func() string { return string(a.must(http.StatusOK, "GET", base+"/workspace/diff", nil, nil)) }

	turn1 := a.send(conv, "first")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	h1, d1 := upperHash(t, in, conv), diff()
	if !strings.Contains(d1, "--- a/gone.txt") || !strings.Contains(d1, "+fresh") {
		t.Fatalf("turn 1 changed nothing?\n%s", d1)
	}
	turn2 := a.send(conv, "second")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	h2 := upperHash(t, in, conv)

	// Undo turn 2: the exact tree of turn 1's end, and the event.
	a.must(http.StatusOK, "POST", base+"/turns/"+turn2+"/revert", nil, nil)
	evs := s.until(agentcore.EventWorkspaceReverted, 30*time.Second)
	var rev agentcore.WorkspaceReverted
	if err := json.Unmarshal(eventData(t, evs[len(evs)-1]), &rev); err != nil || rev.Turn != turn2 || rev.Reason != "revert" {
		t.Fatalf("workspace_reverted %s: %v", evs[len(evs)-1].Data, err)
	}
	sameTree(t, "after reverting turn 2", h1, upperHash(t, in, conv))
	if got := diff(); got != d1 {
		t.Fatalf("diff after the revert:\n%s\nwant:\n%s", got, d1)
	}
	// The sandbox sees the reverted tree (Expect of the script's step 5).
	a.send(conv, "look")
	evs = s.until(agentcore.EventTurnFinished, 60*time.Second)
	if got := replyText(t, evs); !strings.Contains(got, "the revert is what the sandbox sees") {
		t.Fatalf("turn after the revert: %q", got)
	}

	// Edit "second": the history branches before it; the workspace is
	// turn 1's end again, and the same command makes turn 2's tree.
	msgs := a.messages(conv, false)
	id := func(msgs []agentcore.Message, content string) string {
		t.Helper()
		for _, m := range msgs {
			if m.Content == content {
				return m.ID
			}
		}
		t.Fatalf("no message %q in %q", content, contents(msgs))
		return ""
	}
	before := len(srv.Bodies())
	var started struct {
		TurnID string `json:"turn_id"`
	}
	a.must(http.StatusAccepted, "PUT", base+"/messages/"+id(msgs, "second"), map[string]string{"content": "second, edited"}, &started)
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	sameTree(t, "after the edited turn", h2, upperHash(t, in, conv))
	bodies := srv.Bodies()[before:]
	wantFirst := []string{"user: first", "assistant: Running it. [shell]", "tool", "assistant: turn1 done", "user: second, edited"}
	if len(bodies) != 2 || !slices.Equal(bodyContents(t, bodies[0]), wantFirst) {
		t.Fatalf("the edited turn's first request: %q (of %d), want %q", bodyContents(t, bodies[0]), len(bodies), wantFirst)
	}
	if b := string(bodies[0]); strings.Contains(b, `"parent"`) || strings.Contains(b, turn1) {
		t.Errorf("the model was sent message IDs or turns: %s", b)
	}
	active := contents(a.messages(conv, false))
	wantActive := append(wantFirst, "assistant: Running it. [shell]", "tool", "assistant: turn2 done")
	if !slices.Equal(active, wantActive) {
		t.Fatalf("active history %q, want %q", active, wantActive)
	}

	// Regenerate the last reply: the same user message, answered again
	// from the same workspace, on a third branch.
	msgs = a.messages(conv, false)
	before = len(srv.Bodies())
	a.must(http.StatusAccepted, "POST", base+"/messages/"+msgs[len(msgs)-1].ID+"/regenerate", nil, nil)
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	sameTree(t, "after the regenerated turn", h2, upperHash(t, in, conv))
	if got := bodyContents(t, srv.Bodies()[before]); !slices.Equal(got, wantFirst) {
		t.Fatalf("the regenerated turn's first request: %q, want %q", got, wantFirst)
	}
	if got := contents(a.messages(conv, false)); !slices.Equal(got, wantActive) {
		t.Fatalf("active history after regenerate %q, want %q", got, wantActive)
	}
	all := strings.Join(contents(a.messages(conv, true)), "\n")
	for _, old := range []string{"user: second\n", "user: look", "the revert is what the sandbox sees"} {
		if !strings.Contains(all+"\n", old) {
			t.Errorf("the old branches lack %q:\n%s", old, all)
		}
	}
	if n := strings.Count(all, "user: second, edited"); n != 2 {
		t.Errorf("%d branches with the edited message, want 2", n)
	}

	// Fork from turn 1's reply: its history and its workspace; from the
	// first message: nothing of either.
	var fork struct{ ID string }
	msgs = a.messages(conv, false)
	a.must(http.StatusCreated, "POST", base+"/messages/"+id(msgs, "turn1 done")+"/fork", nil, &fork)
	if got, want := contents(a.messages(fork.ID, false)), wantFirst[:4]; !slices.Equal(got, want) {
		t.Fatalf("fork's history %q, want %q", got, want)
	}
	sameTree(t, "the fork", h1, upperHash(t, in, fork.ID))
	var fork0 struct{ ID string }
	a.must(http.StatusCreated, "POST", base+"/messages/"+id(msgs, "first")+"/fork", nil, &fork0)
	if got := a.messages(fork0.ID, false); len(got) != 0 {
		t.Fatalf("fork from the first message has history %q", contents(got))
	}
	sameTree(t, "the fork from the first message", map[string]string{}, upperHash(t, in, fork0.ID))
	// The fork's turns are its own: turn 1 is not one of them.
	a.must(http.StatusNotFound, "POST", "/api/v1/conversations/"+fork.ID+"/turns/"+turn1+"/revert", nil, nil)

	// Another user: the same 404 as for no conversation at all.
	for _, r := range []struct{ method, path string }{
		{"GET", base + "/messages"},
		{"PUT", base + "/messages/" + msgs[0].ID},
		{"POST", base + "/messages/" + msgs[0].ID + "/regenerate"},
		{"POST", base + "/messages/" + msgs[0].ID + "/fork"},
		{"POST", base + "/turns/" + turn1 + "/revert"},
	} {
		if code, body, _ := b.do(r.method, r.path, map[string]string{"content": "x"}); code != http.StatusNotFound {
			t.Errorf("bob %s %s: %d %s, want 404", r.method, r.path, code, body)
		}
	}
	sameTree(t, "after bob's tries", h2, upperHash(t, in, conv))

	// While a turn runs, revert and edit are refused and change nothing.
	a.must(http.StatusOK, "POST", base+"/turns/"+turn1+"/revert", nil, nil)
	s.until(agentcore.EventWorkspaceReverted, 30*time.Second)
	h0 := upperHash(t, in, conv)
	a.send(conv, "please stall")
	s.until(agentcore.EventTextDelta, 60*time.Second)
	if code, body, _ := a.do("POST", base+"/turns/"+turn2+"/revert", nil); code != http.StatusConflict || !strings.Contains(string(body), "turn_in_progress") {
		t.Errorf("revert during a turn: %d %s, want 409 turn_in_progress", code, body)
	}
	if code, body, _ := a.do("PUT", base+"/messages/"+msgs[0].ID, map[string]string{"content": "x"}); code != http.StatusConflict {
		t.Errorf("edit during a turn: %d %s, want 409", code, body)
	}
	a.must(http.StatusOK, "POST", base+"/cancel", nil, nil)
	sameTree(t, "after the refused revert", h0, upperHash(t, in, conv))
	if len(h0) != 0 {
		t.Errorf("reverting turn 1 left %v", h0)
	}

	// A background job still writing: the workspace is not reverted
	// under it.
	bg := a.newConversation()
	sb := a.follow(bg, "")
	defer sb.close()
	bgTurn := a.send(bg, "background please")
	sb.until(agentcore.EventTurnFinished, 60*time.Second)
	code, body, _ := a.do("POST", "/api/v1/conversations/"+bg+"/turns/"+bgTurn+"/revert", nil)
	if code != http.StatusConflict || !strings.Contains(string(body), "workspace_busy") {
		t.Errorf("revert while a background job runs: %d %s, want 409 workspace_busy", code, body)
	}
}
