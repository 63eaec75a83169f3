package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// agentCLI builds testdata/agentcli, the stand-in external agent.
func agentCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentcli")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/codumentor/codumentor/testdata/agentcli").CombinedOutput(); err != nil {
		t.Fatalf("building agentcli: %v\n%s", err, out)
	}
	return bin
}

// llmScript starts the scripted model with s and returns the YAML that
// points the server at it.
func llmScript(t testing.TB, s *llmtest.Script) string {
	t.Helper()
	srv, err := llmtest.StartServer(s, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n", srv.URL())
}

func toolCall(name string, args any) llmtest.Step {
	b, _ := json.Marshal(args)
	return llmtest.Step{ToolCalls: []agentcore.ToolCall{{Name: name, Arguments: string(b)}}}
}

// externalAgentYAML configures the external_agent plugin with agentcli
// as agent "fake", told to write marker (a host path).
func externalAgentYAML(bin, marker, extra string) string {
	return fmt.Sprintf("plugins: [workspace_isolation, external_agent]\nexternal_agents:\n  - name: fake\n    command: %s\n    env: {AGENTCLI_MARKER: %q}\n%s", bin, marker, extra)
}

// The external agent runs through the API: its approval names it, its
// output streams as events, its edits show in the workspace diff, and it
// never wrote the host.
func TestExternalAgentThroughAPI(t *testing.T) {
	needSandbox(t)
	bin := agentCLI(t)
	marker := filepath.Join(t.TempDir(), "marker")
	in := newInstance(t, llm(t, toolCall("external_agent", map[string]string{"agent": "fake", "task": "write the file"}), llmtest.Step{Expect: "report: done", Text: "Done."})+
		externalAgentYAML(bin, marker, ""))
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "let the agent do it")
	evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
	var ap agentcore.Approval
	json.Unmarshal(eventData(t, evs[len(evs)-1]), &ap)
	if ap.Tool != "external_agent" || !strings.Contains(ap.Command, "external agent fake (sandboxed)") || ap.Cwd != "/workspace" {
		t.Fatalf("approval: %+v", ap)
	}
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+ap.ID, map[string]string{"decision": "approve"}, nil)
	evs = s.until(agentcore.EventTurnFinished, 60*time.Second)
	var streamed, output string
	for _, ev := range evs {
		var d map[string]string
		json.Unmarshal(eventData(t, ev), &d)
		switch ev.Type {
		case agentcore.EventToolOutputDelta:
			streamed += d["text"]
		case agentcore.EventToolOutput:
			output = d["output"]
		}
	}
	if !strings.Contains(streamed, "report: done") || !strings.Contains(output, "marker: not written") || !strings.Contains(output, "[exit status 0]") {
		t.Fatalf("streamed %q; output %q", streamed, output)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the agent wrote the host's marker file")
	}
	if diff := string(a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/diff", nil, nil)); !strings.Contains(diff, "AGENT_DONE.txt") || !strings.Contains(diff, "+task: write the file") {
		t.Fatalf("workspace diff:\n%s", diff)
	}
}

// A tier-0 agent while isolation is enabled stops the server from
// starting, naming the missing setting; with the setting it starts.
func TestExternalAgentTier0NeedsOverride(t *testing.T) {
	cfg := externalAgentYAML("/bin/true", "/nonexistent", "    sandbox_tier: 0\n")
	in := newInstance(t, cfg)
	_, err := in.run()
	if err == nil || !strings.Contains(err.Error(), "allow_unsandboxed_external_agents") {
		t.Fatalf("start with a tier-0 agent: %v", err)
	}
	in = newInstance(t, cfg+"allow_unsandboxed_external_agents: true\n")
	p := in.start()
	if !strings.Contains(p.stderr.String(), "UNSANDBOXED") {
		t.Fatalf("no warning at start:\n%s", p.stderr)
	}
}

// The fail-closed matrix: with workspace isolation enabled but no
// sandbox (bwrap missing; a kernel that refuses the seccomp filter), the
// shell and file tools, tier-1 external agents (with and without
// network) and an isolated subagent refuse with a clear error, and the
// marker file each would write proves nothing ran on the host; so do a
// sandboxed MCP server (its tool says why it is down) and a repository's
// setup script.
func TestFailClosedMatrix(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	bin := agentCLI(t)
	real, err := exec.LookPath("bwrap")
	if err != nil {
		sandboxtest.SkipOrFail(t, "bwrap: %v", err)
	}
	// A bwrap that cannot load a seccomp filter, as on a kernel without
	// CONFIG_SECCOMP_FILTER: everything else works.
	noSeccomp := filepath.Join(t.TempDir(), "bwrap")
	// sandboxkit passes the options in a file (--args N): reading it
	// through /proc opens it anew, leaving bwrap's offset alone.
	script := "#!/bin/sh\nfail() { echo 'bwrap: prctl(PR_SET_SECCOMP): Invalid argument' >&2; exit 1; }\n" +
		"for a; do [ \"$a\" = --seccomp ] && fail; done\n" +
		"[ \"$1\" = --args ] && tr '\\0' '\\n' < /proc/self/fd/$2 | grep -qx -- --seccomp && fail\n" +
		"exec " + real + " \"$@\"\n"
	if err := os.WriteFile(noSeccomp, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, bwrap, why string
	}{
		{"bwrap unavailable", "/nonexistent/bwrap", "bwrap"},
		{"seccomp unloadable", noSeccomp, "seccomp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			marker := func(s string) string { return filepath.Join(dir, s) }
			steps := []llmtest.Step{
				toolCall("shell", map[string]string{"command": "touch " + marker("shell")}),
				toolCall("write_file", map[string]string{"path": "written.txt", "content": "x"}),
				toolCall("read_file", map[string]string{"path": "written.txt"}),
				toolCall("list_files", map[string]string{}),
				toolCall("external_agent", map[string]string{"agent": "fake", "task": "touch the marker"}),
				toolCall("external_agent", map[string]string{"agent": "net", "task": "touch the marker"}),
				toolCall("delegate", map[string]string{"task": "SUBTASK: touch the marker"}),
				toolCall("mcp__marker", map[string]string{}),
				{Text: "Nothing ran."},
			}
			sub := []llmtest.Step{toolCall("shell", map[string]string{"command": "touch " + marker("subagent")}), {Text: "touched"}}
			cfg := llmScript(t, &llmtest.Script{Steps: steps, Branches: []llmtest.Branch{{Match: "SUBTASK", Steps: sub}}}) +
				"subagent_isolation: isolated\n" + strings.Replace(externalAgentYAML(bin, marker("agent"), ""), "external_agent]", "external_agent, mcp]", 1) +
				fmt.Sprintf("  - name: net\n    command: %s\n    egress_allowlist: [127.0.0.1]\n    env: {AGENTCLI_MARKER: %q}\n", bin, marker("agent-net")) +
				fmt.Sprintf("mcp:\n  servers:\n    - {name: marker, command: /bin/sh, args: [-c, %q]}\n", "touch "+marker("mcp")) +
				fmt.Sprintf("sandbox:\n  bwrap: %s\n  shell_always_allow: true\n", tc.bwrap)
			in := newInstance(t, cfg)
			in.addUser("alice", pw, false)
			p := in.start()
			a := p.login("alice", pw)
			conv := a.newConversation()
			s := a.follow(conv, "")
			a.send(conv, "try everything")
			finished := map[string]string{}
			deadline := time.Now().Add(90 * time.Second)
			for ev := s.next(time.Until(deadline)); ev.Type != agentcore.EventTurnFinished; ev = s.next(time.Until(deadline)) {
				if ev.Type == agentcore.EventTurnFailed {
					t.Fatalf("turn failed: %s", ev.Data)
				}
				if ev.Type == agentcore.EventApprovalPending {
					var ap agentcore.Approval
					json.Unmarshal(eventData(t, ev), &ap)
					a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+ap.ID, map[string]string{"decision": "approve"}, nil)
				}
				if ev.Type == agentcore.EventToolFinished {
					var d map[string]string
					json.Unmarshal(eventData(t, ev), &d)
					finished[d["name"]+"#"+d["id"]] = d["error"]
				}
			}
			if len(finished) != 8 {
				t.Fatalf("%d tools finished, want 8: %v", len(finished), finished)
			}
			for tool, e := range finished {
				t.Logf("%s: %s", tool, e)
				if !strings.Contains(e, "sandbox") || !strings.Contains(e, tc.why) || !strings.Contains(e, "nothing was run") || strings.Contains(e, in.dir) {
					t.Errorf("%s: error %q; want a sandbox error naming %s, saying nothing ran, without host paths", tool, e, tc.why)
				}
			}
			// The sync of a local remote fails closed too: its side runs
			// in the git sandbox.
			in.addUser("root", pw, true)
			root := p.login("root", pw)
			src := setupRepo(t, marker("setup"), "")
			var created struct{ ID string }
			root.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]any{"name": "demo", "url": "file://" + src, "branch": "main", "run_setup": true}, &created)
			repo := created.ID
			var sync struct{ Job jobs.Job }
			root.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo+"/sync", nil, &sync)
			if j := waitJobDone(t, root, sync.Job.ID); j.Status != jobs.StatusFailed || !strings.Contains(j.LastError, "sandbox") {
				t.Errorf("sync of a local remote without a sandbox: %s %q", j.Status, j.LastError)
			}
			// A setup script (its mirror and snapshot made while the
			// sandbox worked).
			gitCmd(t, dir, "--git-dir="+filepath.Join(in.dir, "repos", repo+".git"), "fetch", "-q", src, "+refs/heads/*:refs/heads/*")
			db := in.openDB()
			err = db.Exec("UPDATE repositories SET head = ?, synced = ? WHERE id = ?", gitCmd(t, src, "rev-parse", "main"), time.Now().UTC(), repo).Error
			store.Close(db)
			if err != nil {
				t.Fatal(err)
			}
			var r struct{ Head string }
			a.must(http.StatusOK, "GET", "/api/v1/repositories/"+repo, nil, &r)
			snap := filepath.Join(in.dir, "repos", "snapshots", repo+"-"+r.Head)
			gitCmd(t, dir, "clone", "-q", "-b", "main", filepath.Join(in.dir, "repos", repo+".git"), snap)
			var sc struct{ ID string }
			a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &sc)
			types, _, end := setupEvents(t, a.follow(sc.ID, ""))
			e, _ := end["error"].(string)
			t.Logf("setup: %s", e)
			if types[len(types)-1] != agentcore.EventSetupFailed || !strings.Contains(e, "sandbox") || !strings.Contains(e, tc.why) || !strings.Contains(e, "nothing was run") || strings.Contains(e, in.dir) {
				t.Errorf("setup: events %v, error %q; want setup_failed with a sandbox error naming %s, saying nothing ran, without host paths", types, e, tc.why)
			}
			// Without the snapshot, its checkout fails (sandboxed git):
			// the conversation stays, its setup failure says why.
			if err := os.RemoveAll(snap); err != nil {
				t.Fatal(err)
			}
			a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &sc)
			types, _, end = setupEvents(t, a.follow(sc.ID, ""))
			if e, _ := end["error"].(string); types[len(types)-1] != agentcore.EventSetupFailed || !strings.Contains(e, "snapshot could not be prepared") {
				t.Errorf("setup without a snapshot: events %v, error %q", types, e)
			}
			for _, m := range []string{"shell", "agent", "agent-net", "subagent", "mcp", "setup"} {
				if _, err := os.Stat(marker(m)); err == nil {
					t.Errorf("%s ran on the host: its marker exists", m)
				}
			}
		})
	}
}

// An isolated subagent through the API: its approval names it, its
// changes come back as a diff, and the conversation's workspace (its
// diff route) does not have them.
func TestDelegateIsolatedThroughAPI(t *testing.T) {
	needSandbox(t)
	script := &llmtest.Script{
		Steps: []llmtest.Step{toolCall("delegate", map[string]string{"task": "SUBTASK: write notes.txt"}), {Expect: "+from the subagent", Text: "Got its diff."}},
		Branches: []llmtest.Branch{{Match: "SUBTASK", Steps: []llmtest.Step{
			toolCall("shell", map[string]string{"command": "echo from the subagent > notes.txt"}), {Expect: "exit status 0", Text: "wrote notes.txt"},
		}}},
	}
	in := newInstance(t, llmScript(t, script)+"subagent_isolation: isolated\n")
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "delegate it")
	evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
	var ap agentcore.Approval
	json.Unmarshal(eventData(t, evs[len(evs)-1]), &ap)
	if !strings.HasPrefix(ap.Agent, "sub_") || ap.Command != "echo from the subagent > notes.txt" {
		t.Fatalf("approval: %+v", ap)
	}
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+ap.ID, map[string]string{"decision": "approve"}, nil)
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	if diff := string(a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/diff", nil, nil)); strings.Contains(diff, "notes.txt") {
		t.Fatalf("the subagent's file reached the conversation's workspace:\n%s", diff)
	}
}
