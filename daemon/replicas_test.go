package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/store/storetest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// replicas starts n servers, each with an instance directory of its own,
// on one PostgreSQL database, with the same configuration (extra).
func replicas(t testing.TB, n int, extra string) ([]*instance, []*proc) {
	t.Helper()
	extra += fmt.Sprintf("store:\n  backend: postgres\n  postgres: {dsn: %q}\n", storetest.Postgres(t).DSN)
	ins := make([]*instance, n)
	ps := make([]*proc, n)
	for i := range ins {
		ins[i] = newInstance(t, extra)
		if i == 0 {
			// The first server creates the tables; the others find them.
			ins[0].addUser("root", pw, true)
		}
		ps[i] = ins[i].start()
	}
	return ins, ps
}

// An event stored by one server reaches a subscriber on another live, in
// order, each once, and Last-Event-ID resumes on a third exactly as on
// one server.
func TestReplicaEvents(t *testing.T) {
	_, ps := replicas(t, 3, llm(t, llmtest.Step{Text: "First answer."}, llmtest.Step{Text: "Second answer."}))
	a, b, c := ps[0].login("root", pw), ps[1].login("root", pw), ps[2].login("root", pw)
	conv := a.newConversation()
	onB := b.follow(conv, "")
	defer onB.close()
	a.send(conv, "hello")
	first := onB.until(agentcore.EventTurnFinished, 60*time.Second)
	a.send(conv, "again")
	second := onB.until(agentcore.EventTurnFinished, 60*time.Second)
	all := append(first, second...)
	for i, ev := range all {
		if ev.ID != strconv.Itoa(i+1) {
			t.Fatalf("event %d on the other server has ID %s (want %d): %v", i, ev.ID, i+1, all)
		}
	}
	// The stored events, as the writing server serves them, are the ones
	// the other server streamed.
	onA := a.follow(conv, "")
	defer onA.close()
	for i, want := range all {
		if got := onA.next(30 * time.Second); got.ID != want.ID || got.Type != want.Type || string(got.Data) != string(want.Data) {
			t.Fatalf("event %d: on the writer %+v, on the other server %+v", i, got, want)
		}
	}
	// Resume on a third server from the middle.
	mid := len(first)
	onC := c.follow(conv, strconv.Itoa(mid))
	defer onC.close()
	for _, want := range all[mid:] {
		if got := onC.next(30 * time.Second); got.ID != want.ID || got.Type != want.Type {
			t.Fatalf("resumed after %d on a third server: got %+v, want %+v", mid, got, want)
		}
	}
}

// A server whose auth.jwt_secret differs from the deployment's refuses
// to start, and says why (never the secret); one that rotated (the old
// secret among its previous ones) starts.
func TestReplicaSecretMismatch(t *testing.T) {
	ins, _ := replicas(t, 1, "")
	cfg, err := os.ReadFile(ins[0].config().ConfigFile())
	if err != nil {
		t.Fatal(err)
	}
	other := newInstance(t, "")
	wrong := strings.Replace(string(cfg), testSecret, strings.Repeat("w", 40), 1)
	if err := os.WriteFile(other.config().ConfigFile(), []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := other.run()
	if err == nil {
		p.kill()
		t.Fatal("a server with another auth.jwt_secret started on the deployment's database")
	}
	if !strings.Contains(err.Error(), "auth.jwt_secret is not the one the other servers") || strings.Contains(err.Error(), testSecret) {
		t.Fatalf("refusal: %v", err)
	}
	rotated := strings.Replace(string(cfg), testSecret, strings.Repeat("r", 40)+"\n  previous_jwt_secrets: ["+testSecret+"]", 1)
	if err := os.WriteFile(other.config().ConfigFile(), []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	other.start().login("root", pw)
}

// A conversation is served by its home node whichever replica a request
// reaches: created through A (its home), a message through B, the event
// stream through C, the approval through A. The command runs once, on
// the home node, and every event reaches the stream once, in order. A
// conversation created through A for node B is at home on B, and a
// message through C reaches it there.
func TestReplicaHome(t *testing.T) {
	needSandbox(t)
	// Each conversation's first turn runs the one command.
	script := llm(t, shellCall("echo ran >> marker.txt"), llmtest.Step{Text: "Done."})
	_, ps := replicas(t, 3, script)
	a, b, c := ps[0].login("root", pw), ps[1].login("root", pw), ps[2].login("root", pw)

	var conv struct{ ID, Home string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "homed"}, &conv)
	if conv.Home == "" {
		t.Fatalf("the conversation has no home node: %+v", conv)
	}
	onC := c.follow(conv.ID, "")
	defer onC.close()
	b.send(conv.ID, "run it")
	evs := onC.until(agentcore.EventApprovalPending, 60*time.Second)
	aid := approvalID(t, evs[len(evs)-1])
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+aid, map[string]string{"decision": "approve"}, nil)
	evs = append(evs, onC.until(agentcore.EventTurnFinished, 60*time.Second)...)
	for i, ev := range evs {
		if ev.ID != strconv.Itoa(i+1) {
			t.Fatalf("event %d on the stream has ID %s: %v", i, ev.ID, evs)
		}
	}
	for _, cl := range []*client{a, b, c} {
		if got := string(cl.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=marker.txt", nil, nil)); got != "ran\n" {
			t.Fatalf("the workspace, read through %s: %q, want the command's one line", cl.base, got)
		}
	}

	// Placed on B by name from A; a message through C runs there.
	var nodeB struct{ ID, Home string }
	b.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "mine"}, &nodeB)
	var onB struct{ ID, Home string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "placed", "node": nodeB.Home}, &onB)
	if onB.Home != nodeB.Home || onB.Home == conv.Home {
		t.Fatalf("placed on %q, want B's node %q (A's is %q)", onB.Home, nodeB.Home, conv.Home)
	}
	s := a.follow(onB.ID, "")
	defer s.close()
	c.send(onB.ID, "run it")
	evs = s.until(agentcore.EventApprovalPending, 60*time.Second)
	c.must(http.StatusOK, "POST", "/api/v1/conversations/"+onB.ID+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	if got := string(a.must(http.StatusOK, "GET", "/api/v1/conversations/"+onB.ID+"/workspace/files?path=marker.txt", nil, nil)); got != "ran\n" {
		t.Fatalf("B's workspace read through A: %q", got)
	}
}

// Losing a node: killed mid-turn, a replica that is not the home loses
// nothing (the stream resumes on another); the home node killed, its
// conversations keep their history, their turns and workspace answer
// 503 workspace_unavailable naming it, and the other nodes go on; back,
// it serves them again.
func TestReplicaNodeLost(t *testing.T) {
	needSandbox(t)
	ins, ps := replicas(t, 3, llm(t, shellCall("echo ran >> marker.txt"), llmtest.Step{Text: "Done."}))
	a, b, c := ps[0].login("root", pw), ps[1].login("root", pw), ps[2].login("root", pw)
	var conv struct{ ID, Home string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "on A"}, &conv)

	// B dies mid-turn: the turn, at home on A, goes on; the stream
	// resumes on C from the last event B sent.
	onB := b.follow(conv.ID, "")
	b.send(conv.ID, "run it")
	seen := onB.until(agentcore.EventApprovalPending, 60*time.Second)
	ps[1].kill()
	last := seen[len(seen)-1]
	c.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+approvalID(t, last), map[string]string{"decision": "approve"}, nil)
	onC := c.follow(conv.ID, last.ID)
	rest := onC.until(agentcore.EventTurnFinished, 60*time.Second)
	onC.close()
	for i, ev := range append(seen, rest...) {
		if ev.ID != strconv.Itoa(i+1) {
			t.Fatalf("event %d has ID %s across the lost replica and the next", i, ev.ID)
		}
	}

	// A, the home, dies: history reads, workspace and turns refuse.
	ps[0].kill()
	c.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID, nil, nil)
	c.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/messages", nil, nil)
	for _, r := range []struct{ method, path string }{
		{"POST", "/messages"}, {"GET", "/workspace/files?path=marker.txt"}, {"GET", "/workspace/diff"},
	} {
		var body any
		if r.method == "POST" {
			body = map[string]string{"content": "again"}
		}
		status, got, h := c.do(r.method, "/api/v1/conversations/"+conv.ID+r.path, body)
		if status != http.StatusServiceUnavailable || !strings.Contains(string(got), `"code":"workspace_unavailable"`) || !strings.Contains(string(got), conv.Home) || h.Get("Retry-After") == "" {
			t.Fatalf("%s %s with the home node down: %d %s", r.method, r.path, status, got)
		}
	}
	// The others go on: a new conversation, through C, lives on C.
	var other struct{ ID, Home string }
	c.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "on C"}, &other)
	if other.Home == conv.Home {
		t.Fatalf("a new conversation was placed on the lost node %s", other.Home)
	}
	s := c.follow(other.ID, "")
	c.send(other.ID, "run it")
	evs := s.until(agentcore.EventApprovalPending, 60*time.Second)
	c.must(http.StatusOK, "POST", "/api/v1/conversations/"+other.ID+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	s.close()

	// A is back: its conversation works again, through C.
	ps[0] = ins[0].start()
	if got := string(c.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=marker.txt", nil, nil)); got != "ran\n" {
		t.Fatalf("the workspace after its node's return: %q", got)
	}
	c.send(conv.ID, "hello again")
}

// A node that shuts down drains its turns first: it takes no new
// conversations nor turns, while a running turn gets its approval
// (through another node) and finishes, not interrupted; then it exits.
func TestReplicaDrain(t *testing.T) {
	needSandbox(t)
	_, ps := replicas(t, 2, llm(t, shellCall("echo ran >> marker.txt"), llmtest.Step{Text: "Done."}))
	a, b := ps[0].login("root", pw), ps[1].login("root", pw)
	var running, idle struct{ ID, Home string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "running"}, &running)
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "idle", "node": running.Home}, &idle)
	s := b.follow(running.ID, "")
	defer s.close()
	a.send(running.ID, "run it")
	evs := s.until(agentcore.EventApprovalPending, 60*time.Second)

	ps[0].cmd.Process.Signal(syscall.SIGTERM)
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		status, body, _ := b.do("POST", "/api/v1/conversations/"+idle.ID+"/messages", map[string]string{"content": "hello"})
		if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "shutting_down") {
			return fmt.Errorf("a new turn on the draining node: %d %s", status, body)
		}
		return nil
	})
	var placed struct{ ID, Home string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "new"}, &placed)
	if placed.Home == running.Home {
		t.Fatalf("a new conversation was placed on the draining node")
	}
	b.must(http.StatusOK, "POST", "/api/v1/conversations/"+running.ID+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)
	for _, ev := range s.until(agentcore.EventTurnFinished, 60*time.Second) {
		if ev.Type == agentcore.EventTurnFailed {
			t.Fatalf("the turn was interrupted by the drain: %s", ev.Data)
		}
	}
	select {
	case <-ps[0].done:
	case <-time.After(60 * time.Second):
		t.Fatal("the drained node did not exit")
	}
}

// Three replicas behind nginx (round robin): a client that knows only
// the proxy's address works as with one server. Its requests reach the
// nodes in turn; the turn runs once, on the conversation's home node,
// and every event reaches the stream once, in order.
func TestReplicasBehindNginx(t *testing.T) {
	needSandbox(t)
	_, ps := replicas(t, 3, llm(t, shellCall("echo ran >> marker.txt"), llmtest.Step{Text: "Done."}))
	var ups []string
	for _, p := range ps {
		ups = append(ups, strings.TrimPrefix(p.URL, "http://"))
	}
	lb := "http://" + nginx(t, "proxy_set_header Host $http_host; proxy_http_version 1.1; proxy_buffering off; proxy_read_timeout 300s;", ups...)
	front := &proc{t: t, URL: lb}
	a := front.login("root", pw)
	var convs []string
	for range 3 {
		convs = append(convs, a.newConversation())
	}
	homes := map[string]bool{}
	for _, id := range convs {
		var c struct{ Home string }
		a.must(http.StatusOK, "GET", "/api/v1/conversations/"+id, nil, &c)
		homes[c.Home] = true
	}
	for _, id := range convs {
		s := a.follow(id, "")
		a.send(id, "run it")
		evs := s.until(agentcore.EventApprovalPending, 60*time.Second)
		a.must(http.StatusOK, "POST", "/api/v1/conversations/"+id+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)
		evs = append(evs, s.until(agentcore.EventTurnFinished, 60*time.Second)...)
		s.close()
		for i, ev := range evs {
			if ev.ID != strconv.Itoa(i+1) {
				t.Fatalf("conversation %s: event %d has ID %s: %v", id, i, ev.ID, evs)
			}
		}
		if got := string(a.must(http.StatusOK, "GET", "/api/v1/conversations/"+id+"/workspace/files?path=marker.txt", nil, nil)); got != "ran\n" {
			t.Fatalf("conversation %s's workspace: %q, want the command's one line", id, got)
		}
	}
	t.Logf("3 conversations on %d nodes", len(homes))
}

// Failed logins alternating between two servers are limited at the
// counts one server limits them at (TestLoginRateLimit): the name after
// login_limits.user_failures, even with the right password, and the
// address after address_failures, whatever the name, on both servers.
func TestReplicaLoginLimits(t *testing.T) {
	_, ps := replicas(t, 2, "  login_limits: {user_failures: 4, user_delay: 1m, address_failures: 10}\nplugins: []\n")
	for i := range 4 {
		if status, code, _ := ps[i%2].loginStatus("root", "wrong guess"); status != http.StatusUnauthorized {
			t.Fatalf("failed login %d, on server %d: %d %s, want 401", i+1, i%2, status, code)
		}
	}
	for i, p := range ps {
		status, code, ra := p.loginStatus("root", pw)
		if status != http.StatusTooManyRequests || code != "rate_limited" || ra == "" {
			t.Fatalf("the right password on server %d after 4 failures on two: %d %s (Retry-After %q), want 429 rate_limited", i, status, code, ra)
		}
		if wait, err := strconv.Atoi(ra); err != nil || wait < 50 || wait > 60 {
			t.Fatalf("server %d: Retry-After %q, want the 1m delay", i, ra)
		}
	}
	// The address (127.0.0.1) failed 4 times: 6 more, with other names,
	// alternating, and it is refused on both.
	for i := range 6 {
		if status, code, _ := ps[i%2].loginStatus(fmt.Sprint("nobody", i), "wrong guess"); status != http.StatusUnauthorized {
			t.Fatalf("failed login %d of another name, on server %d: %d %s, want 401", i+5, i%2, status, code)
		}
	}
	for i, p := range ps {
		if status, code, ra := p.loginStatus("someone", "any guess"); status != http.StatusTooManyRequests || code != "rate_limited" || ra == "" {
			t.Fatalf("server %d after 10 failures from one address on two servers: %d %s (Retry-After %q), want 429 rate_limited", i, status, code, ra)
		}
	}
}

// Jobs enqueued through either of two running servers are each done
// once (one attempt, one sync in the audit log), and each server's node
// runs its own GC schedules (its workspaces and snapshots), not the
// other's.
func TestReplicaJobs(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("hello\n"), 0o644)
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "initial")
	ins, ps := replicas(t, 2, "")
	roots := []*client{ps[0].login("root", pw), ps[1].login("root", pw)}

	// Four repositories, each synced through one server or the other
	// while both poll the queue.
	const n = 4
	ids := map[string]bool{}
	for i := range n {
		bare := filepath.Join(dir, fmt.Sprintf("remote%d.git", i))
		gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
		var repo struct{ ID string }
		roots[i%2].must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": fmt.Sprint("demo", i), "url": "file://" + bare, "branch": "main"}, &repo)
		var sync struct{ Job jobs.Job }
		roots[i%2].must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
		ids[sync.Job.ID] = true
	}
	for id := range ids {
		// Either server answers for the job.
		j := waitJobDone(t, roots[1], id)
		if j.Status != jobs.StatusSucceeded || j.Attempts != 1 {
			t.Fatalf("sync job %s: %s after %d attempts (%s), want succeeded after 1", id, j.Status, j.Attempts, j.LastError)
		}
	}
	var page api.AuditPage
	roots[0].must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=repository_sync", nil, &page)
	runs := map[string]map[string]int{} // job → result → records
	for _, r := range page.Records {
		var d struct{ Job, Result string }
		if err := json.Unmarshal(r.Data, &d); err != nil {
			t.Fatal(err)
		}
		if runs[d.Job] == nil {
			runs[d.Job] = map[string]int{}
		}
		runs[d.Job][d.Result]++
	}
	for id := range ids {
		if r := runs[id]; r["started"] != 1 || r["fetched"] != 1 || len(r) != 2 {
			t.Errorf("audit records of sync job %s: %v, want started and fetched once each", id, r)
		}
	}

	// The GC schedules: one per node, each of its node's jobs.
	db := ins[0].openDB()
	for _, in := range ins {
		node, err := in.config().NodeID()
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{"workspace_gc", "setup_gc", "snapshot_gc"} {
			sandboxtest.Eventually(t, 30*time.Second, func() error {
				var gcs []jobs.Job
				if err := db.Where("kind = ? AND node = ?", kind, node).Find(&gcs).Error; err != nil {
					return err
				}
				if len(gcs) != 1 || gcs[0].Schedule != kind+"@"+node || gcs[0].Status != jobs.StatusSucceeded {
					return fmt.Errorf("%s jobs of node %s: %+v, want one of schedule %s@%[2]s, succeeded", kind, node, gcs, kind)
				}
				return nil
			})
		}
	}
	var stray int64
	db.Model(&jobs.Job{}).Where("kind IN ? AND node = ''", []string{"setup_gc", "snapshot_gc", "workspace_gc"}).Count(&stray)
	if stray != 0 {
		t.Errorf("%d GC jobs of no node: any server would run them", stray)
	}
}

// Every node keeps its own mirror and index of a repository: a sync
// through one node is a job on each, so a conversation at home on
// either starts on the repository, and a search through either finds
// its files.
func TestReplicaRepositories(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "settings.go"), []byte("package conf\n\nfunc loadSettings() {}\n"), 0o644)
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "initial")
	bare := filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	ins, ps := replicas(t, 2, "")
	roots := []*client{ps[0].login("root", pw), ps[1].login("root", pw)}
	var repo struct{ ID string }
	roots[0].must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "demo", "url": "file://" + bare, "branch": "main"}, &repo)
	var sync struct{ Job jobs.Job }
	roots[0].must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	db := ins[0].openDB()
	sandboxtest.Eventually(t, 120*time.Second, func() error {
		var js []jobs.Job
		if err := db.Where("kind = ?", "repository_sync").Find(&js).Error; err != nil {
			return err
		}
		nodes := map[string]bool{}
		for _, j := range js {
			if j.Status != jobs.StatusSucceeded {
				return fmt.Errorf("sync job %s on node %q: %s %s", j.ID, j.Node, j.Status, j.LastError)
			}
			nodes[j.Node] = true
		}
		if len(nodes) != 2 {
			return fmt.Errorf("sync jobs on nodes %v, want one on each of 2", nodes)
		}
		return nil
	})
	for i, in := range ins {
		node, err := in.config().NodeID()
		if err != nil {
			t.Fatal(err)
		}
		var conv struct{ ID, Home string }
		roots[1-i].must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo.ID, "node": node}, &conv)
		if conv.Home != node {
			t.Fatalf("placed on %q, want %q", conv.Home, node)
		}
		if got := string(roots[1-i].must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=settings.go", nil, nil)); !strings.Contains(got, "loadSettings") {
			t.Fatalf("the workspace on node %s: %q", node, got)
		}
		if got := string(roots[i].must(http.StatusOK, "GET", "/api/v1/search?q=loadSettings", nil, nil)); !strings.Contains(got, "settings.go") {
			t.Fatalf("a search through node %s: %s", node, got)
		}
	}
}
