package daemon_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// TestHostReadOnlyInvestigation: a host_readonly conversation's command
// reads /etc/hostname but not the instance's database, the service
// user's home or a UNIX socket under /run, and writes nowhere. Its first
// command asks for the host network, once (its second command does not
// ask again): denied, the sandbox has none;
// approved (another conversation), it reaches a host service.
func TestHostReadOnlyInvestigation(t *testing.T) {
	needSandbox(t)
	sockPath := fmt.Sprintf("/run/lock/codumentor-daemon-test-%d.sock", os.Getpid())
	sock, err := net.Listen("unix", sockPath)
	if err != nil {
		sandboxtest.SkipOrFail(t, "cannot create a socket under /run (the world-writable /run/lock): %v", err)
	}
	defer sock.Close()
	port := sandboxtest.ServeTCP(t, "127.0.0.1:0", nil) // reached: the host network
	home, _ := os.UserHomeDir()
	in := newInstance(t, "")
	db := in.config().Database()
	script := strings.Join([]string{
		"cat /etc/hostname",
		"cat " + db + " >/dev/null 2>&1 && echo DB-READABLE",
		"ls -A " + home + " 2>/dev/null | grep -q . && echo HOME-VISIBLE",
		`python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("` + sockPath + `")' 2>/dev/null && echo SOCKET-CONNECTED`,
		`python3 -c 'import socket; socket.create_connection(("127.0.0.1", ` + fmt.Sprint(port) + `), 2)' 2>/dev/null && echo NET-OK`,
		"for f in /etc/probe /usr/probe /var/log/probe /tmp/probe $HOME/probe " + in.dir + "/probe; do (echo x > $f) 2>/dev/null && echo WROTE-$f; done",
		"echo END",
	}, "; ")
	// The script names the instance's paths: the configuration comes after.
	yaml := "auth:\n  jwt_secret: " + testSecret + "\n" + llm(t, shellCall(script), shellCall("echo SECOND"), llmtest.Step{Text: "Done."}) + "investigation:\n  enabled: true\n  users: [carol]\n"
	if err := os.WriteFile(in.config().ConfigFile(), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	in.addUser("carol", pw, false)
	p := in.start()
	admin, alice, carol := p.login("root", pw), p.login("alice", pw), p.login("carol", pw)

	alice.must(http.StatusForbidden, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, nil)
	alice.must(http.StatusBadRequest, "POST", "/api/v1/conversations", map[string]string{"mode": "root_shell"}, nil)
	var conv struct{ ID, Mode string }
	carol.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, &conv)
	if conv.Mode != "host_readonly" {
		t.Errorf("mode = %q", conv.Mode)
	}

	hostname, _ := os.ReadFile("/etc/hostname")
	run := func(c *client, decision string) string {
		t.Helper()
		var conv struct{ ID string }
		c.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, &conv)
		s := c.follow(conv.ID, "")
		c.send(conv.ID, "investigate")
		evs := s.until(agentcore.EventApprovalPending, 60*time.Second)
		c.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)
		evs = s.until(agentcore.EventApprovalPending, 60*time.Second)
		last := evs[len(evs)-1]
		var a agentcore.Approval
		if err := json.Unmarshal(eventData(t, last), &a); err != nil || a.Kind != agentcore.ApprovalHostNetwork {
			t.Fatalf("second approval: %s (want kind host_network)", last.Data)
		}
		c.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+a.ID, map[string]string{"decision": decision}, nil)
		// The conversation's second command asks only for itself: the
		// network question was asked once.
		evs = s.until(agentcore.EventApprovalPending, 60*time.Second)
		last = evs[len(evs)-1]
		var second agentcore.Approval
		if err := json.Unmarshal(eventData(t, last), &second); err != nil || second.Kind == agentcore.ApprovalHostNetwork || second.Command != "echo SECOND" {
			t.Fatalf("third approval: %s (want the second command's, the network not asked again)", last.Data)
		}
		c.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+second.ID, map[string]string{"decision": "approve"}, nil)
		s.until(agentcore.EventTurnFinished, 60*time.Second)
		i := slices.IndexFunc(evs, func(e sseEvent) bool { return e.Type == agentcore.EventToolOutput })
		if i < 0 {
			t.Fatalf("no tool output: %v", evs)
		}
		var out struct{ Output string }
		json.Unmarshal(eventData(t, evs[i]), &out)
		if !strings.Contains(out.Output, "END") {
			t.Fatalf("the command did not run to its end: %s", out.Output)
		}
		return out.Output
	}
	out := run(carol, "deny")
	if !strings.Contains(out, strings.TrimSpace(string(hostname))) {
		t.Errorf("/etc/hostname not readable: %s", out)
	}
	for _, bad := range []string{"DB-READABLE", "HOME-VISIBLE", "SOCKET-CONNECTED", "NET-OK", "WROTE"} {
		if strings.Contains(out, bad) {
			t.Errorf("investigation sandbox (network denied): %s\n%s", bad, out)
		}
	}
	out = run(admin, "approve")
	if !strings.Contains(out, "NET-OK") {
		t.Errorf("network approved but the host service is unreachable:\n%s", out)
	}
	for _, bad := range []string{"DB-READABLE", "HOME-VISIBLE", "SOCKET-CONNECTED", "WROTE"} {
		if strings.Contains(out, bad) {
			t.Errorf("investigation sandbox (network shared): %s\n%s", bad, out)
		}
	}
}

// TestInvestigationDisabled: without investigation.enabled nobody, not
// even an admin, creates a host_readonly conversation.
func TestInvestigationDisabled(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	_, body, _ := admin.do("POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"})
	code, _, _ := admin.do("POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"})
	if code != http.StatusForbidden || !strings.Contains(string(body), "investigation_disabled") {
		t.Errorf("host_readonly while disabled: %d %s", code, body)
	}
	var list struct{ Conversations []struct{ ID string } }
	admin.must(http.StatusOK, "GET", "/api/v1/conversations", nil, &list)
	if len(list.Conversations) != 0 {
		t.Errorf("a refused request created conversations: %+v", list)
	}
}

// TestInvestigationNetworkExpires: a host_network question nobody
// answers expires, and the conversation stays isolated: the command runs
// without the host network, and the next one is not asked again.
// (shell_always_allow does not answer the network question.)
func TestInvestigationNetworkExpires(t *testing.T) {
	needSandbox(t)
	port := sandboxtest.ServeTCP(t, "127.0.0.1:0", nil) // reached: the host network
	probe := `python3 -c 'import socket; socket.create_connection(("127.0.0.1", ` + fmt.Sprint(port) + `), 2)' 2>/dev/null && echo NET-OK; echo END`
	in := newInstance(t, llm(t, shellCall(probe), shellCall(probe), llmtest.Step{Text: "Done."})+
		"investigation:\n  enabled: true\nsandbox:\n  shell_always_allow: true\n  approval_timeout: 1s\n")
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	var conv struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"mode": "host_readonly"}, &conv)
	s := admin.follow(conv.ID, "")
	admin.send(conv.ID, "investigate")
	evs := s.until(agentcore.EventTurnFinished, 60*time.Second)
	var asked, outputs []string
	for _, ev := range evs {
		switch ev.Type {
		case agentcore.EventApprovalPending:
			var a agentcore.Approval
			json.Unmarshal(eventData(t, ev), &a)
			asked = append(asked, a.Kind)
		case agentcore.EventToolOutput:
			var out struct{ Output string }
			json.Unmarshal(eventData(t, ev), &out)
			outputs = append(outputs, out.Output)
		}
	}
	if len(asked) != 1 || asked[0] != agentcore.ApprovalHostNetwork {
		t.Errorf("approvals asked: %q; want one host_network question", asked)
	}
	if len(outputs) != 2 {
		t.Fatalf("tool outputs: %q", outputs)
	}
	for _, out := range outputs {
		if !strings.Contains(out, "END") || strings.Contains(out, "NET-OK") {
			t.Errorf("after the question expired: %q; want the command run without the host network", out)
		}
	}
}
