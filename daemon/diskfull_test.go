package daemon_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// fill writes 1 MiB every 50 ms until 400 MiB, more than the tmpfs holds:
// the disk watch sees it cross the reserve long before the disk is full.
const fill = `i=0; while [ $i -lt 400 ]; do dd if=/dev/zero bs=1M count=1 status=none >> big || exit 1; i=$((i+1)); sleep 0.05; done; echo filled`

// TestDiskReserve runs the server on a small filesystem that holds the
// whole instance, database included. A command whose workspace is far
// inside its budget (5 GiB) but that fills the disk is stopped at the
// reserve (5 % of the filesystem) with disk_free; meanwhile /readyz fails
// "storage" and no new sandbox starts. Deleting the file in the
// sandbox, or discarding the workspace through the API, brings the space
// back without a restart.
func TestDiskReserve(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, llm(t,
		shellCall(fill), llmtest.Step{Text: "Done."},
		shellCall("rm big && echo removed"), llmtest.Step{Text: "Done."},
		shellCall(fill), llmtest.Step{Text: "Done."},
	)+"sandbox:\n  shell_always_allow: true\n")
	in.smallFS = 160 << 20
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	in.addUser("root", pw, true)
	p := in.start()
	alice, root := p.login("alice", pw), p.login("root", pw)

	storage := func() (ready bool, check string) {
		t.Helper()
		var r struct {
			Checks []struct {
				Name, Detail string
				OK           bool
			}
		}
		root.must(http.StatusOK, "GET", "/api/v1/admin/doctor", nil, &r)
		for _, c := range r.Checks {
			if c.Name == "storage" {
				return c.OK, c.Detail
			}
		}
		t.Fatalf("admin/doctor has no storage check: %+v", r)
		return false, ""
	}
	readyz := func() (int, string) {
		status, body, _ := p.anon().do("GET", "/readyz", nil)
		return status, string(body)
	}
	if ok, d := storage(); !ok {
		t.Fatalf("storage before: %s", d)
	}
	turn := func(s *stream, conv, content string) (output, limit string) {
		t.Helper()
		alice.send(conv, content)
		for _, e := range s.until(agentcore.EventTurnFinished, 2*time.Minute) {
			switch e.Type {
			case agentcore.EventToolOutput:
				output = string(e.Data)
			case agentcore.EventSandboxLimit:
				limit = string(e.Data)
			}
		}
		return output, limit
	}

	a := alice.newConversation()
	as := alice.follow(a, "")
	out, limit := turn(as, a, "fill the disk")
	if !strings.Contains(out, "disk_free") || strings.Contains(out, "filled") || !strings.Contains(limit, `"limit":"disk_free"`) {
		t.Fatalf("the filling command's result %s\nsandbox_limit %s", out, limit)
	}
	if ok, d := storage(); ok {
		t.Errorf("storage after the fill: ok, %s", d)
	}
	if status, body := readyz(); status != http.StatusServiceUnavailable || !strings.Contains(body, "storage") {
		t.Errorf("readyz below the reserve: %d %s", status, body)
	}
	// Another conversation's sandbox does not start.
	b := alice.newConversation()
	bs := alice.follow(b, "")
	if out, _ := turn(bs, b, "fill it too"); !strings.Contains(out, "free-space reserve") || strings.Contains(out, "exit status") {
		t.Errorf("a new sandbox below the reserve: %s", out)
	}

	// The agent deletes the file: the space is back.
	if out, _ := turn(as, a, "clean up"); !strings.Contains(out, "removed") {
		t.Fatalf("rm: %s", out)
	}
	if ok, d := storage(); !ok {
		t.Errorf("storage after rm: %s", d)
	}
	if status, body := readyz(); status != http.StatusOK {
		t.Errorf("readyz after rm: %d %s", status, body)
	}

	// Filled again, the user discards the workspace's changes: refused
	// while the command runs, then the space is back.
	alice.send(a, "fill again")
	as.until(agentcore.EventToolCallRequested, time.Minute)
	if status, body, _ := alice.do("POST", "/api/v1/conversations/"+a+"/workspace/discard", nil); status != http.StatusConflict {
		t.Errorf("discard during a turn: %d %s", status, body)
	}
	as.until(agentcore.EventTurnFinished, 2*time.Minute)
	if ok, d := storage(); ok {
		t.Errorf("storage after the second fill: ok, %s", d)
	}
	bob := p.login("bob", pw)
	if status, _, _ := bob.do("POST", "/api/v1/conversations/"+a+"/workspace/discard", nil); status != http.StatusNotFound {
		t.Errorf("another user's discard: %d, want 404", status)
	}
	var res struct{ Conversation, Status string }
	alice.must(http.StatusOK, "POST", "/api/v1/conversations/"+a+"/workspace/discard", nil, &res)
	if res.Status != "discarded" || res.Conversation != a {
		t.Errorf("discard: %+v", res)
	}
	if ok, d := storage(); !ok {
		t.Errorf("storage after the discard: %s", d)
	}
	if status, body := readyz(); status != http.StatusOK {
		t.Errorf("readyz after the discard: %d %s", status, body)
	}
	var audit struct {
		Records []struct {
			User string
			Data json.RawMessage
		}
	}
	root.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=workspace_discard", nil, &audit)
	if !slices.ContainsFunc(audit.Records, func(r struct {
		User string
		Data json.RawMessage
	}) bool {
		return strings.Contains(string(r.Data), a)
	}) {
		t.Errorf("no workspace_discard record for %s: %+v", a, audit.Records)
	}
	// Sandboxes start again: b's next command runs.
	if out, _ := turn(bs, b, "clean up"); !strings.Contains(out, "exit status") {
		t.Errorf("a sandbox after the discard: %s", out)
	}
}
