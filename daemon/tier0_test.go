package daemon_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// A tier-0 (unsandboxed) external agent on a repository's conversation
// edits, adds and deletes files: the snapshot every conversation on the
// commit shares is unchanged, a second conversation on the commit sees
// none of it, and the first conversation's workspace diff shows it all.
func TestExternalAgentTier0SharedSnapshot(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	bare := bareRepo(t, map[string]string{"README.md": "hello\n", "gone.txt": "gone\n"}, nil)
	base := gitCmd(t, bare, "rev-parse", "main")
	agent := filepath.Join(dir, "agent.sh")
	os.WriteFile(agent, []byte("#!/bin/sh\nset -e\necho edited >> README.md\necho new > NEW.txt\nrm gone.txt\necho 'report: done'\n"), 0o755)

	in := newInstance(t, llm(t, toolCall("external_agent", map[string]string{"agent": "fake", "task": "rework it"}), llmtest.Step{Expect: "report: done", Text: "Done."})+
		externalAgentYAML(agent, filepath.Join(dir, "marker"), "    sandbox_tier: 0\n")+"allow_unsandboxed_external_agents: true\n")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	admin, a, b := p.login("root", pw), p.login("alice", pw), p.login("bob", pw)
	repo := addRepo(t, admin, "demo", "file://"+bare)
	var first, second struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &first)
	b.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &second)

	s := a.follow(first.ID, "")
	a.send(first.ID, "let the agent do it")
	evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
	var ap agentcore.Approval
	json.Unmarshal(eventData(t, evs[len(evs)-1]), &ap)
	if !strings.Contains(ap.Command, "UNSANDBOXED") {
		t.Fatalf("approval: %+v", ap)
	}
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+first.ID+"/approvals/"+ap.ID, map[string]string{"decision": "approve"}, nil)
	var output string
	for _, ev := range s.until(agentcore.EventTurnFinished, 60*time.Second) {
		if ev.Type == agentcore.EventToolOutput {
			var d map[string]string
			json.Unmarshal(eventData(t, ev), &d)
			output = d["output"]
		}
	}
	if !strings.Contains(output, "report: done") || !strings.Contains(output, "[exit status 0]") {
		t.Fatalf("agent output: %q", output)
	}

	snap := filepath.Join(in.dir, "repos", "snapshots", repo+"-"+base)
	if b, err := os.ReadFile(filepath.Join(snap, "README.md")); err != nil || string(b) != "hello\n" {
		t.Errorf("the shared snapshot's README.md: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(snap, "NEW.txt")); err == nil {
		t.Error("the agent wrote NEW.txt into the shared snapshot")
	}
	if _, err := os.Stat(filepath.Join(snap, "gone.txt")); err != nil {
		t.Errorf("the agent deleted gone.txt from the shared snapshot: %v", err)
	}
	files := "/api/v1/conversations/" + second.ID + "/workspace/files?path="
	if got := b.must(http.StatusOK, "GET", files+"README.md", nil, nil); string(got) != "hello\n" {
		t.Errorf("the second conversation's README.md: %q", got)
	}
	if st, _, _ := b.do("GET", files+"NEW.txt", nil); st != http.StatusNotFound {
		t.Errorf("the second conversation's NEW.txt: %d, want 404", st)
	}
	if got := b.must(http.StatusOK, "GET", files+"gone.txt", nil, nil); string(got) != "gone\n" {
		t.Errorf("the second conversation's gone.txt: %q", got)
	}
	diff, _ := a.readDiff(first.ID)
	for _, w := range []string{"+edited", "+++ b/NEW.txt", "--- a/gone.txt"} {
		if !strings.Contains(diff, w) {
			t.Errorf("the first conversation's diff lacks %q:\n%s", w, diff)
		}
	}
	if diff, _ := b.readDiff(second.ID); diff != "" {
		t.Errorf("the second conversation's diff:\n%s", diff)
	}
}
