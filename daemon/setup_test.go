package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// setupRepo makes a bare repository whose main has a working setup.sh
// (naming deps.lock as its input, vendor and BUILT as its outputs; extra
// runs before it writes them)
// and whose branch broken has a failing one; marker is a host path the
// script tries to write.
func setupRepo(t testing.TB, marker, extra string) (bare string) {
	t.Helper()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	bare = filepath.Join(dir, "remote.git")
	git := func(d string, args ...string) { gitCmd(t, d, args...) }
	git(dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "deps.lock"), []byte("lockv1\n"), 0o644)
	os.WriteFile(filepath.Join(work, "setup.sh"), []byte("# codumentor-setup-inputs: deps.lock\n# codumentor-setup-outputs: vendor BUILT\nset -e\necho installing deps\n"+extra+"mkdir -p vendor\ncp deps.lock vendor/installed.txt\necho built > BUILT\ntouch "+marker+" 2>/dev/null || echo host not writable\necho interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1)\n"), 0o644)
	git(work, "add", "-A")
	git(work, "commit", "-q", "-m", "initial")
	git(work, "checkout", "-q", "-b", "broken")
	os.WriteFile(filepath.Join(work, "setup.sh"), []byte("echo about to fail\nexit 3\n"), 0o644)
	git(work, "commit", "-q", "-am", "break the setup")
	git(dir, "clone", "-q", "--bare", work, bare)
	return bare
}

// addSetupRepo adds and syncs repository name (url's branch) with
// run_setup (and setup_network if network).
func addSetupRepo(t testing.TB, admin *client, name, url, branch string, network ...bool) string {
	t.Helper()
	var repo struct {
		ID       string
		RunSetup bool `json:"run_setup"`
	}
	admin.must(http.StatusBadRequest, "POST", "/api/v1/repositories", map[string]any{"name": name, "url": url, "setup_network": true}, nil)
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]any{"name": name, "url": url, "branch": branch, "run_setup": true, "setup_network": len(network) > 0 && network[0]}, &repo)
	if !repo.RunSetup {
		t.Fatalf("repository: %+v", repo)
	}
	var sync struct{ Job jobs.Job }
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	if j := waitJobDone(t, admin, sync.Job.ID); j.Status != jobs.StatusSucceeded {
		t.Fatalf("sync job: %+v", j)
	}
	return repo.ID
}

// jobsDone counts the jobs of kind that succeeded, in in's database.
func jobsDone(t testing.TB, in *instance, kind string) int64 {
	t.Helper()
	db := in.openDB()
	var n int64
	if err := db.Raw("SELECT count(*) FROM jobs WHERE kind = ? AND status = ?", kind, jobs.StatusSucceeded).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// setupEvents reads a conversation's events up to its setup's end.
func setupEvents(t testing.TB, s *stream) (types []string, output string, last map[string]any) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ev := s.next(time.Until(deadline))
		types = append(types, ev.Type)
		var e agentcore.Event
		json.Unmarshal(ev.Data, &e)
		var d map[string]any
		json.Unmarshal(e.Data, &d)
		if ev.Type == agentcore.EventSetupOutput {
			output += d["text"].(string)
		}
		if ev.Type == agentcore.EventSetupFinished || ev.Type == agentcore.EventSetupFailed {
			return types, output, d
		}
	}
}

// The project setup through the API: the script runs in the sandbox at
// the conversation's start with its output streamed; a turn sent at once
// finds its files (the workspace tools wait for the setup); its files are
// in the workspace (not in the diff); a second conversation on the same key
// reuses the layer without running the script; a failing setup disables
// the workspace tools with the reason, shown to the user and the model.
func TestSetupScriptEndToEnd(t *testing.T) {
	needSandbox(t)
	marker := filepath.Join(t.TempDir(), "marker")
	bare := setupRepo(t, marker, "sleep 1\n")
	script := &llmtest.Script{
		Steps: []llmtest.Step{toolCall("shell", map[string]string{"command": "cat vendor/installed.txt BUILT"}), {Expect: "lockv1\nbuilt", Text: "Set up."}},
		Branches: []llmtest.Branch{{Match: "BROKEN", Steps: []llmtest.Step{
			toolCall("shell", map[string]string{"command": "true"}),
			{Expect: "the setup script setup.sh failed: sandboxed command exited with status 3", Text: "Tools are off."},
		}}},
	}
	in := newInstance(t, llmScript(t, script)+"sandbox:\n  shell_always_allow: true\n  gc_interval: 500ms\n")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)
	repo := addSetupRepo(t, admin, "demo", "file://"+bare, "main")

	var conv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
	s := a.follow(conv.ID, "")
	a.send(conv.ID, "check the setup")
	types, output, end := setupEvents(t, s)
	if !slices.Contains(types, agentcore.EventSetupStarted) || end["cached"] != false || !strings.Contains(output, "installing deps") || !strings.Contains(output, "host not writable") || !strings.Contains(output, "interfaces: lo\n") {
		t.Fatalf("first setup: events %v, output %q, end %v", types, output, end)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the setup script wrote the host")
	}
	if got := a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=vendor/installed.txt", nil, nil); string(got) != "lockv1\n" {
		t.Fatalf("the setup's file in the workspace: %q", got)
	}
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	if diff, _ := a.readDiff(conv.ID); strings.Contains(diff, "BUILT") || strings.Contains(diff, "vendor") {
		t.Fatalf("the setup's files are in the conversation's diff:\n%s", diff)
	}

	// The same key: the layer is reused, the script does not run.
	var second struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo, "ref": "main"}, &second)
	types, output, end = setupEvents(t, a.follow(second.ID, ""))
	if len(types) != 1 || end["cached"] != true || output != "" {
		t.Fatalf("second setup: events %v, output %q, end %v", types, output, end)
	}
	if got := a.must(http.StatusOK, "GET", "/api/v1/conversations/"+second.ID+"/workspace/files?path=BUILT", nil, nil); string(got) != "built\n" {
		t.Fatalf("the cached setup's file in the workspace: %q", got)
	}
	layers, _ := os.ReadDir(filepath.Join(in.dir, "workspaces", "setups"))
	if len(layers) != 1 || !strings.HasPrefix(layers[0].Name(), repo+"-") {
		t.Fatalf("setup layers: %v", layers)
	}

	// setup_network: the host's network interfaces.
	netRepo := addSetupRepo(t, admin, "net", "file://"+bare, "main", true)
	var netConv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": netRepo}, &netConv)
	if _, output, _ = setupEvents(t, a.follow(netConv.ID, "")); strings.Contains(output, "interfaces: lo\n") || !strings.Contains(output, "interfaces: ") {
		t.Fatalf("setup with the network: %q", output)
	}
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+netConv.ID, nil, nil)

	// A failing setup: the conversation stays, its tools say why.
	brokenRepo := addSetupRepo(t, admin, "broken", "file://"+bare, "broken")
	var broken struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": brokenRepo}, &broken)
	s = a.follow(broken.ID, "")
	types, output, end = setupEvents(t, s)
	if types[len(types)-1] != agentcore.EventSetupFailed || !strings.Contains(output, "about to fail") || !strings.Contains(end["error"].(string), "exited with status 3") || strings.Contains(end["error"].(string), in.dir) {
		t.Fatalf("failed setup: events %v, output %q, end %v", types, output, end)
	}
	a.send(broken.ID, "BROKEN: try a command")
	evs := s.until(agentcore.EventTurnFinished, 60*time.Second)
	var toolErr string
	for _, ev := range evs {
		if ev.Type == agentcore.EventToolFinished {
			var d map[string]string
			json.Unmarshal(eventData(t, ev), &d)
			toolErr = d["error"]
		}
	}
	if !strings.Contains(toolErr, "execution tools are disabled in this conversation") || !strings.Contains(toolErr, "exited with status 3") {
		t.Fatalf("the shell tool's error: %q", toolErr)
	}
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+broken.ID, nil, nil)

	// Each script that ran is a sandbox launch in the audit log, for its
	// conversation (the cached second conversation ran none).
	var launches struct {
		Records []struct {
			Data struct{ Profile, Conversation string }
		}
	}
	admin.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=sandbox_launch&limit=1000", nil, &launches)
	ran := map[string]int{}
	for _, r := range launches.Records {
		if r.Data.Profile == "setup" {
			ran[r.Data.Conversation]++
		}
	}
	if ran[conv.ID] != 1 || ran[second.ID] != 0 || ran[broken.ID] != 1 {
		t.Fatalf("setup launches in the audit log by conversation: %v", ran)
	}

	// The layer is collected once no conversation uses it.
	setupsDir := filepath.Join(in.dir, "workspaces", "setups")
	gcs := jobsDone(t, in, "setup_gc")
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+conv.ID, nil, nil)
	// Two more setup_gc runs: the second started after the deletion.
	sandboxtest.Eventually(t, 60*time.Second, func() error {
		if n := jobsDone(t, in, "setup_gc"); n < gcs+2 {
			return fmt.Errorf("%d setup_gc runs since the deletion, want 2", n-gcs)
		}
		return nil
	})
	if layers, _ := os.ReadDir(setupsDir); len(layers) != 1 {
		t.Fatalf("setup layers while a conversation uses one: %v", layers)
	}
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+second.ID, nil, nil)
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		if layers, _ := os.ReadDir(setupsDir); len(layers) > 0 {
			return fmt.Errorf("unused setup layers not collected: %v", layers)
		}
		return nil
	})
}

// BenchmarkSetupStart times a conversation's start on a repository whose
// setup takes a second, from POST /api/v1/conversations to its
// setup_finished event: the first (the script runs) and the second (the
// cached layer is stacked), on a new repository (so a new key) each
// iteration. Target: cached ≥ 10× faster.
func BenchmarkSetupStart(b *testing.B) {
	sandboxtest.RequireUnprivileged(b)
	bare := setupRepo(b, filepath.Join(b.TempDir(), "marker"), "sleep 1\n")
	in := newInstance(b, "")
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	var first, cached time.Duration
	start := func(repo string) (time.Duration, map[string]any) {
		t0 := time.Now()
		var conv struct{ ID string }
		admin.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
		s := admin.follow(conv.ID, "")
		_, _, end := setupEvents(b, s)
		d := time.Since(t0)
		s.close()
		return d, end
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		repo := addSetupRepo(b, admin, fmt.Sprintf("demo%d", i), "file://"+bare, "main")
		b.StartTimer()
		d1, end1 := start(repo)
		d2, end2 := start(repo)
		if end1["cached"] != false || end2["cached"] != true {
			b.Fatalf("setups: %v then %v", end1, end2)
		}
		first += d1
		cached += d2
	}
	n := float64(b.N)
	b.ReportMetric(float64(first.Milliseconds())/n, "first-ms")
	b.ReportMetric(float64(cached.Microseconds())/1000/n, "cached-ms")
	b.ReportMetric(float64(first)/float64(cached), "speedup")
}

// setup_egress: the setup script keeps a network of its own (only lo)
// and reaches only the listed destinations through the egress proxy;
// each attempt is an egress event of the conversation, counted in
// /metrics. (Reaching an allowed server is shown in sandboxkit's tests,
// which can resolve test names to 127.0.0.1; here the resolver is the
// host's, and .invalid names never resolve.)
func TestSetupEgress(t *testing.T) {
	needSandbox(t)
	bare := setupRepo(t, filepath.Join(t.TempDir(), "marker"),
		"curl -sS --max-time 10 https://other.invalid/ 2>&1 | sed 's/^/other: /'\ncurl -sS --max-time 10 https://registry.invalid/ 2>&1 | sed 's/^/registry: /'\necho links: $(ip -o link | cut -d: -f2)\n")
	in := newInstance(t, "sandbox:\n  shell_always_allow: true\n")
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	for _, bad := range []map[string]any{
		{"name": "x", "url": "file://" + bare, "setup_egress": []string{"registry.invalid"}},
		{"name": "x", "url": "file://" + bare, "run_setup": true, "setup_network": true, "setup_egress": []string{"registry.invalid"}},
		{"name": "x", "url": "file://" + bare, "run_setup": true, "setup_egress": []string{"*.invalid"}},
	} {
		admin.must(http.StatusBadRequest, "POST", "/api/v1/repositories", bad, nil)
	}
	var repo struct {
		ID          string
		SetupEgress []string `json:"setup_egress"`
	}
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]any{"name": "eg", "url": "file://" + bare, "run_setup": true, "setup_egress": []string{"registry.invalid:443"}}, &repo)
	if len(repo.SetupEgress) != 1 {
		t.Fatalf("repository: %+v", repo)
	}
	var sync struct{ Job jobs.Job }
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	if j := waitJobDone(t, admin, sync.Job.ID); j.Status != jobs.StatusSucceeded {
		t.Fatalf("sync job: %+v", j)
	}
	var conv struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo.ID}, &conv)
	s := admin.follow(conv.ID, "")
	verdicts := map[string]string{}
	var output string
	for deadline := time.Now().Add(90 * time.Second); ; {
		ev := s.next(time.Until(deadline))
		var e agentcore.Event
		json.Unmarshal(ev.Data, &e)
		var d struct{ Host, Verdict, Reason, Text, Error string }
		json.Unmarshal(e.Data, &d)
		switch ev.Type {
		case agentcore.EventEgress:
			verdicts[d.Host] = d.Verdict + ": " + d.Reason
		case agentcore.EventSetupOutput:
			output += d.Text
		case agentcore.EventSetupFailed:
			t.Fatalf("setup failed: %s\n%s", d.Error, output)
		}
		if ev.Type == agentcore.EventSetupFinished {
			break
		}
	}
	if !strings.Contains(output, "links: lo\n") || !strings.Contains(output, "other: curl: (56)") || !strings.Contains(output, "registry: curl: (56)") {
		t.Fatalf("setup output %q", output)
	}
	if !strings.HasPrefix(verdicts["other.invalid"], "refused: other.invalid:443 is not in the allow-list") || !strings.HasPrefix(verdicts["registry.invalid"], "failed: cannot resolve") {
		t.Fatalf("egress events: %v", verdicts)
	}
	metrics := string(p.anon().must(http.StatusOK, "GET", "/metrics", nil, nil))
	for _, want := range []string{`codumentor_egress_attempts_total{source="setup",verdict="refused"} 1`, `codumentor_egress_attempts_total{source="setup",verdict="failed"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A conversation whose setup cannot be recorded is not kept: without its
// record, its tools would run on the snapshot without the setup.
func TestSetupUnrecordedRefused(t *testing.T) {
	needSandbox(t)
	bare := setupRepo(t, filepath.Join(t.TempDir(), "marker"), "")
	in := newInstance(t, "")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)
	repo := addSetupRepo(t, admin, "demo", "file://"+bare, "main")

	db := in.openDB()
	refuseInserts(t, db, "conversation_setups", "", "the test refuses setup records")
	store.Close(db)
	a.must(http.StatusInternalServerError, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, nil)
	var list struct{ Conversations []struct{ ID string } }
	a.must(http.StatusOK, "GET", "/api/v1/conversations", nil, &list)
	if len(list.Conversations) != 0 {
		t.Fatalf("the conversation without its setup record was kept: %+v", list.Conversations)
	}
}

// commitRepo makes a bare repository of commits on main (files to
// write, "" removing one) and returns it with their IDs.
func commitRepo(t testing.TB, commits ...map[string]string) (bare string, ids []string) {
	t.Helper()
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	for i, files := range commits {
		for name, body := range files {
			p := filepath.Join(work, name)
			if body == "" {
				os.Remove(p)
				continue
			}
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		gitCmd(t, work, "add", "-A")
		gitCmd(t, work, "commit", "-q", "-m", fmt.Sprintf("commit %d", i))
		ids = append(ids, gitCmd(t, work, "rev-parse", "HEAD"))
	}
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	return bare, ids
}

// turnOK waits for the end of a turn and fails the test if it failed
// (a scripted step's Expect not met, say).
func turnOK(t *testing.T, s *stream) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ev := s.next(time.Until(deadline))
		switch ev.Type {
		case agentcore.EventTurnFinished:
			return
		case agentcore.EventTurnFailed:
			t.Fatalf("the turn failed: %s", eventData(t, ev))
		}
	}
}

// A setup layer is shared by the commits with its key, so it must never
// carry the repository's files: a plain user's conversation on an old
// commit whose setup writes a Makefile, changes a tracked file and
// deletes README.md leaves only its declared output (node_modules) in
// the layer; another user's conversation on a newer commit with the same
// lock file reuses it (cached) and sees its own commit's files, and its
// diff is its own change. A commit that tracks the output does not stack
// the layer: its setup fails, saying why.
func TestSetupLayerSharedAcrossCommits(t *testing.T) {
	needSandbox(t)
	setup := "# codumentor-setup-inputs: deps.lock\n# codumentor-setup-outputs: node_modules\nset -e\n" +
		"mkdir -p node_modules/dep\ncp deps.lock node_modules/dep/installed.txt\n" +
		"printf 'all:\\n\\techo pwned\\n' > Makefile\necho poisoned > app.txt\nrm README.md\necho evil > evil.txt\n"
	bare, commits := commitRepo(t,
		map[string]string{"setup.sh": setup, "deps.lock": "lock1\n", "README.md": "readme\n", "app.txt": "v1\n"},
		map[string]string{"node_modules/vendored.js": "tracked\n"},
		map[string]string{"node_modules/vendored.js": "", "app.txt": "v2\n", "Makefile": "all:\n\techo build\n"},
	)
	check := "cat app.txt README.md Makefile node_modules/dep/installed.txt; ls evil.txt; echo more >> app.txt"
	script := &llmtest.Script{Steps: []llmtest.Step{
		shellCall(check),
		{Expect: "v2\nreadme\nall:\n\techo build\nlock1\nls: cannot access 'evil.txt'", Text: "Checked."},
	}}
	in := newInstance(t, llmScript(t, script)+"sandbox:\n  shell_always_allow: true\n")
	in.addUser("root", pw, true)
	in.addUser("mallory", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	admin, m, b := p.login("root", pw), p.login("mallory", pw), p.login("bob", pw)
	repo := addSetupRepo(t, admin, "demo", "file://"+bare, "main")

	var old struct{ ID string }
	m.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo, "ref": commits[0]}, &old)
	if _, output, end := setupEvents(t, m.follow(old.ID, "")); end["cached"] != false {
		t.Fatalf("the old commit's setup: %v\n%s", end, output)
	}

	var conv struct{ ID string }
	b.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
	s := b.follow(conv.ID, "")
	if types, _, end := setupEvents(t, s); end["cached"] != true {
		t.Fatalf("the new commit's setup: events %v, end %v", types, end)
	}
	for name, want := range map[string]string{"app.txt": "v2\n", "README.md": "readme\n", "Makefile": "all:\n\techo build\n", "node_modules/dep/installed.txt": "lock1\n"} {
		if got := b.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path="+name, nil, nil); string(got) != want {
			t.Fatalf("the new commit's %s: %q, want %q", name, got, want)
		}
	}
	b.send(conv.ID, "check the workspace")
	turnOK(t, s)
	diff, _ := b.readDiff(conv.ID)
	if !strings.Contains(diff, "diff --git a/app.txt b/app.txt") || !strings.Contains(diff, " v2\n+more\n") || strings.Count(diff, "diff --git") != 1 {
		t.Fatalf("the new commit's diff:\n%s", diff)
	}
	layers, _ := os.ReadDir(filepath.Join(in.dir, "workspaces", "setups"))
	if len(layers) != 1 {
		t.Fatalf("setup layers: %v", layers)
	}
	// The script's changes are not in its own conversation's workspace either.
	for name, want := range map[string]string{"app.txt": "v1\n", "README.md": "readme\n", "node_modules/dep/installed.txt": "lock1\n"} {
		if got := m.must(http.StatusOK, "GET", "/api/v1/conversations/"+old.ID+"/workspace/files?path="+name, nil, nil); string(got) != want {
			t.Errorf("the old commit's %s: %q, want %q", name, got, want)
		}
	}

	var tracked struct{ ID string }
	b.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo, "ref": commits[1]}, &tracked)
	types, _, end := setupEvents(t, b.follow(tracked.ID, ""))
	if types[len(types)-1] != agentcore.EventSetupFailed || !strings.Contains(fmt.Sprint(end["error"]), "setup output node_modules is in the repository") {
		t.Fatalf("a commit tracking the output: events %v, end %v", types, end)
	}

	// A layer of the format that kept the whole upper layer (its name
	// without -v2-), with a Makefile: its conversations' setups run again.
	p.stop()
	setupsDir := filepath.Join(in.dir, "workspaces", "setups")
	key := layers[0].Name()
	oldKey := strings.Replace(key, "-v2-", "-", 1)
	if err := os.Rename(filepath.Join(setupsDir, key), filepath.Join(setupsDir, oldKey)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(setupsDir, oldKey, "Makefile"), []byte("all:\n\techo pwned\n"), 0o644)
	db := in.openDB()
	err := db.Exec(`UPDATE conversation_setups SET key = ? WHERE key = ?`, oldKey, key).Error
	store.Close(db)
	if err != nil {
		t.Fatal(err)
	}
	p = in.start()
	b = p.login("bob", pw)
	if got := b.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=Makefile", nil, nil); string(got) != "all:\n\techo build\n" {
		t.Fatalf("the Makefile under a layer of the old format: %q", got)
	}
	if got := b.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=node_modules/dep/installed.txt", nil, nil); string(got) != "lock1\n" {
		t.Fatalf("the setup's output after its setup ran again: %q", got)
	}
}

// slowSetupRepo makes a bare repository whose setup never ends: it
// starts "sleep <arg>" (arg unique to the repository, to find the
// process) and, once that runs, prints a tick every 0.2 s.
func slowSetupRepo(t testing.TB) (bare, arg string) {
	t.Helper()
	arg = fmt.Sprintf("1700.%09d", time.Now().UnixNano()%1e9)
	bare, _ = commitRepo(t, map[string]string{"setup.sh": "# codumentor-setup-outputs: out\nsleep " + arg + " &\nuntil grep -qa " + arg + " /proc/$!/cmdline; do :; done\nwhile :; do echo tick; sleep 0.2; done\n"})
	return bare, arg
}

// sleeper returns a pidfd of the one process running "sleep arg".
func sleeper(t testing.TB, arg string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && string(b) == "sleep\x00"+arg+"\x00" {
			var pid int
			fmt.Sscanf(p, "/proc/%d/cmdline", &pid)
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("processes running sleep %s: %v, want one", arg, pids)
	}
	fd, err := unix.PidfdOpen(pids[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// exited waits up to timeout for the process of pidfd to end.
func exited(pidfd int, timeout time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(timeout); ; {
		n, err := unix.Poll(fds, int(max(time.Until(deadline), 0).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		return n == 1
	}
}

// waitOutput reads a conversation's events up to a setup_output
// containing text.
func waitOutput(t testing.TB, s *stream, text string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ev := s.next(time.Until(deadline))
		var e agentcore.Event
		json.Unmarshal(ev.Data, &e)
		var d struct{ Text, Error string }
		json.Unmarshal(e.Data, &d)
		switch {
		case ev.Type == agentcore.EventSetupOutput && strings.Contains(d.Text, text):
			return
		case ev.Type == agentcore.EventSetupFailed || ev.Type == agentcore.EventSetupFinished:
			t.Fatalf("the setup ended (%s %s) before printing %q", ev.Type, d.Error, text)
		}
	}
}

// A conversation's deletion stops its setup: the script's sandbox is
// killed at once, unless another conversation (another user's) waits
// for the same key, which one run of the script serves.
func TestSetupStopsWithItsConversations(t *testing.T) {
	needSandbox(t)
	bare, arg := slowSetupRepo(t)
	in := newInstance(t, "")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	admin, a, b := p.login("root", pw), p.login("alice", pw), p.login("bob", pw)
	repo := addSetupRepo(t, admin, "slow", "file://"+bare, "main")
	start := func(c *client) (string, *stream) {
		var conv struct{ ID string }
		c.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
		s := c.follow(conv.ID, "")
		waitOutput(t, s, "tick")
		return conv.ID, s
	}

	first, _ := start(a)
	pidfd := sleeper(t, arg)
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+first, nil, nil)
	if !exited(pidfd, 30*time.Second) {
		t.Fatal("the deleted conversation's setup still runs")
	}

	x, _ := start(a)
	y, sy := start(b)
	pidfd = sleeper(t, arg) // one run for both
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+x, nil, nil)
	for range 3 {
		waitOutput(t, sy, "tick")
	}
	if exited(pidfd, 0) {
		t.Fatal("the setup stopped while another conversation waits for it")
	}
	b.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+y, nil, nil)
	if !exited(pidfd, 30*time.Second) {
		t.Fatal("the setup no conversation waits for still runs")
	}
}

// The two setup slots: deleted conversations' setups give theirs back,
// and a user holds a second one only while no other user waits; a third
// user's quick setup then runs, and so does its command.
func TestSetupSlotsShared(t *testing.T) {
	needSandbox(t)
	bare1, arg1 := slowSetupRepo(t)
	bare2, arg2 := slowSetupRepo(t)
	quick := setupRepo(t, filepath.Join(t.TempDir(), "marker"), "")
	script := &llmtest.Script{Steps: []llmtest.Step{shellCall("cat vendor/installed.txt"), {Expect: "lockv1", Text: "Set up."}}}
	in := newInstance(t, llmScript(t, script)+"sandbox:\n  shell_always_allow: true\n")
	in.addUser("root", pw, true)
	for _, u := range []string{"alice", "bob", "carol"} {
		in.addUser(u, pw, false)
	}
	p := in.start()
	admin, a, b, c := p.login("root", pw), p.login("alice", pw), p.login("bob", pw), p.login("carol", pw)
	slow1 := addSetupRepo(t, admin, "slow1", "file://"+bare1, "main")
	slow2 := addSetupRepo(t, admin, "slow2", "file://"+bare2, "main")
	quick1 := addSetupRepo(t, admin, "quick1", "file://"+quick, "main")
	quick2 := addSetupRepo(t, admin, "quick2", "file://"+quick, "main")
	start := func(cl *client, repo string) (string, *stream) {
		var conv struct{ ID string }
		cl.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
		return conv.ID, cl.follow(conv.ID, "")
	}
	quickSetup := func(repo string) {
		t.Helper()
		id, s := start(c, repo)
		if types, output, end := setupEvents(t, s); end["cached"] != false {
			t.Fatalf("carol's setup: events %v, end %v\n%s", types, end, output)
		}
		c.send(id, "use the setup")
		turnOK(t, s)
	}

	// Two users' setups hold both slots, and are deleted.
	a1, s := start(a, slow1)
	waitOutput(t, s, "tick")
	b1, s := start(b, slow2)
	waitOutput(t, s, "tick")
	fd1, fd2 := sleeper(t, arg1), sleeper(t, arg2)
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+a1, nil, nil)
	b.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+b1, nil, nil)
	quickSetup(quick1)
	if !exited(fd1, 30*time.Second) || !exited(fd2, 30*time.Second) {
		t.Fatal("the deleted conversations' setups still run")
	}

	// One user's two setups hold both slots: the later gives its slot to
	// carol's, and runs again after it.
	a2, s := start(a, slow1)
	waitOutput(t, s, "tick")
	a3, s3 := start(a, slow2)
	waitOutput(t, s3, "tick")
	fd1, fd2 = sleeper(t, arg1), sleeper(t, arg2)
	quickSetup(quick2)
	if !exited(fd2, 30*time.Second) || exited(fd1, 0) {
		t.Fatal("alice's later setup was not the one to give its slot")
	}
	waitOutput(t, s3, "gave its slot to another user's setup")
	s3.until(agentcore.EventSetupStarted, 90*time.Second)
	waitOutput(t, s3, "tick")
	fd2 = sleeper(t, arg2)
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+a2, nil, nil)
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+a3, nil, nil)
	if !exited(fd1, 30*time.Second) || !exited(fd2, 30*time.Second) {
		t.Fatal("the deleted conversations' setups still run")
	}
}
