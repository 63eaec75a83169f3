package daemon_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// bigBlobRepo is a bare repository whose tree is one compressible 20 MiB
// blob under ten names (200 MiB checked out, a few hundred kB packed).
func bigBlobRepo(t *testing.T) string {
	t.Helper()
	return bareRepo(t, nil, func(work string) {
		gitCmd(t, work, "config", "core.compression", "1")
		hash := exec.Command("sh", "-c", "yes codumentor | head -c 20M | git hash-object -w --stdin")
		hash.Dir = work
		out, err := hash.Output()
		if err != nil {
			t.Fatal(err)
		}
		blob := strings.TrimSpace(string(out))
		for i := range 10 {
			gitCmd(t, work, "update-index", "--add", "--cacheinfo", "100644,"+blob+",copy"+strconv.Itoa(i)+".bin")
		}
	})
}

// hookedRemote is a bare repository whose every hook, and the commands
// its configuration names, write a marker into spy (outside it) and
// into the repository itself (a hook's working directory), were git to
// run them, on the host or in a sandbox.
func hookedRemote(t *testing.T, spy string) string {
	t.Helper()
	bare := bareRepo(t, map[string]string{"README.md": "hello\n"}, nil)
	for _, h := range []string{"pre-receive", "update", "post-receive", "post-update", "reference-transaction", "push-to-checkout", "proc-receive", "pre-push", "pre-auto-gc", "post-checkout"} {
		body := "#!/bin/sh\necho " + h + " >> '" + spy + "/marker'\necho " + h + " >> marker\ncat >/dev/null\nexit 0\n"
		if err := os.WriteFile(filepath.Join(bare, "hooks", h), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := "touch '" + spy + "/marker'; true"
	// Relative: the hooks directory wherever receive-pack runs.
	gitCmd(t, bare, "config", "core.hooksPath", "hooks")
	gitCmd(t, bare, "config", "core.alternateRefsCommand", run)
	gitCmd(t, bare, "config", "uploadpack.packObjectsHook", run)
	gitCmd(t, bare, "config", "core.fsmonitor", run)
	gitCmd(t, bare, "config", "core.sshCommand", run)
	return bare
}

// poisonRepo is a bare repository whose tree has symlinks leaving it
// (to spy, to /etc/passwd, up past its root) and whose setup script
// (declaring node_modules its output) tries to poison the layer: it
// changes and deletes tracked files, adds a Makefile, links its output
// out of the tree, and writes the host through the tree's symlink and
// directly.
func poisonRepo(t *testing.T, spy string) string {
	t.Helper()
	setup := "# codumentor-setup-inputs: deps.lock\n# codumentor-setup-outputs: node_modules\nset -e\n" +
		"mkdir -p node_modules/dep\ncp deps.lock node_modules/dep/installed.txt\nln -s /etc node_modules/escape\nln -s ../../.. node_modules/up\n" +
		"printf 'all:\\n\\techo pwned\\n' > Makefile\necho poisoned > app.txt\nrm README.md\n" +
		"echo pwned > out/marker 2>/dev/null || echo out not writable\ntouch '" + spy + "/marker' 2>/dev/null || echo host not writable\n"
	return bareRepo(t, map[string]string{"setup.sh": setup, "deps.lock": "lock1\n", "README.md": "readme\n", "app.txt": "v1\n"}, func(work string) {
		for name, target := range map[string]string{"out": spy, "passwd": "/etc/passwd", "up": "../../../.."} {
			if err := os.Symlink(target, filepath.Join(work, name)); err != nil {
				t.Fatal(err)
			}
		}
		gitCmd(t, work, "add", "-A")
	})
}

// healthSamples are the latencies sampleHealth measured.
type healthSamples struct {
	lat    []time.Duration
	failed int
}

// sampleHealth measures GET /healthz of the server at url (loopback)
// every 5 ms, at most 20000 times, until stop is closed; the samples
// are read once the returned WaitGroup is done.
func sampleHealth(url string, stop <-chan struct{}) (*healthSamples, *sync.WaitGroup) {
	h := &healthSamples{}
	var wg sync.WaitGroup
	wg.Go(func() {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
		for range 20000 {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			start := time.Now()
			res, err := c.Get(url + "/healthz")
			h.lat = append(h.lat, time.Since(start))
			if err != nil || res.StatusCode != http.StatusOK {
				h.failed++
			}
			if res != nil {
				res.Body.Close()
			}
		}
	})
	return h, &wg
}

// The must-show: each kind of hostile repository is added and
// synced (and a conversation started on those whose harm is in their
// tree, or in the remote's hooks, which a push would run) while another
// user's conversation on a normal repository runs an approved command
// to completion; each is refused or defused as its own defence says;
// /healthz answers throughout with p99 under 50 ms, and the server's
// peak RSS stays within 300 MB of what it was.
func TestHostileRepositoriesBesideAWorkingUser(t *testing.T) {
	needSandbox(t)
	spy := t.TempDir()
	bomb := filepath.Join(t.TempDir(), "bomb.git")
	gitBomb(t, bomb)
	hooked := hookedRemote(t, spy)
	kinds := []struct {
		name, bare string
		setup      bool
		// check judges the finished sync job; it may start a
		// conversation on repo (as c), beside the working user's command.
		check func(c *client, j jobs.Job, repo string) error
	}{
		{name: "git-bomb", bare: bomb, check: func(_ *client, j jobs.Job, _ string) error {
			if j.Status != jobs.StatusFailed || j.Attempts != 1 || !strings.Contains(j.LastError, "too_many_entries") {
				return fmt.Errorf("sync %s after %d attempts: %q; want failed once with too_many_entries", j.Status, j.Attempts, j.LastError)
			}
			return nil
		}},
		{name: "big-tree", bare: bigBlobRepo(t), check: func(c *client, j jobs.Job, repo string) error {
			if j.Status != jobs.StatusSucceeded {
				return fmt.Errorf("sync %s: %q; want succeeded", j.Status, j.LastError)
			}
			status, body, _ := c.do("POST", "/api/v1/conversations", map[string]string{"repository": repo})
			var e struct {
				Error struct{ Code, Message string }
			}
			json.Unmarshal(body, &e)
			if status != http.StatusUnprocessableEntity || e.Error.Code != "snapshot_failed" || !strings.Contains(e.Error.Message, "max_snapshot_bytes") {
				return fmt.Errorf("conversation on a 200 MiB tree, cap 64 MiB: %d %s; want 422 snapshot_failed", status, body)
			}
			return nil
		}},
		{name: "hooked-remote", bare: hooked, check: func(c *client, j jobs.Job, repo string) error {
			if j.Status != jobs.StatusSucceeded {
				return fmt.Errorf("sync %s: %q; want succeeded", j.Status, j.LastError)
			}
			// A change pushed back: receive-pack is where hooks would run.
			var conv struct{ ID string }
			c.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
			s := c.follow(conv.ID, "")
			defer s.close()
			c.send(conv.ID, "PUSH: write a file")
			turnOK(t, s)
			_, digest := c.readDiff(conv.ID)
			var res struct{ Branch, Commit string }
			c.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/workspace/push", map[string]string{"branch": "codumentor/hooked", "message": "Add NEW.md", "diff_sha256": digest}, &res)
			if got := gitCmd(t, hooked, "rev-parse", "codumentor/hooked"); got != res.Commit {
				return fmt.Errorf("the pushed branch is at %s, the push answered %+v", got, res)
			}
			return nil
		}},
		{name: "poisoned-setup", bare: poisonRepo(t, spy), setup: true, check: func(c *client, j jobs.Job, repo string) error {
			if j.Status != jobs.StatusSucceeded {
				return fmt.Errorf("sync %s: %q; want succeeded", j.Status, j.LastError)
			}
			var conv struct{ ID string }
			c.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
			types, output, end := setupEvents(t, c.follow(conv.ID, ""))
			if types[len(types)-1] != agentcore.EventSetupFinished || !strings.Contains(output, "out not writable") || !strings.Contains(output, "host not writable") {
				return fmt.Errorf("setup: events %v, output %q, end %v; want finished, the host not written", types, output, end)
			}
			file := func(name string) (int, string) {
				status, body, _ := c.do("GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path="+name, nil)
				return status, string(body)
			}
			// The layer holds the declared output only: the tree is the commit's.
			for name, want := range map[string]string{"app.txt": "v1\n", "README.md": "readme\n", "node_modules/dep/installed.txt": "lock1\n"} {
				if status, got := file(name); status != http.StatusOK || got != want {
					return fmt.Errorf("the workspace's %s: %d %q, want %q", name, status, got, want)
				}
			}
			if status, got := file("Makefile"); status != http.StatusNotFound {
				return fmt.Errorf("the setup's Makefile is in the workspace: %d %q", status, got)
			}
			// No symlink, the tree's or the setup's, reads the host.
			for _, name := range []string{"passwd", "out/marker", "up/etc/passwd", "node_modules/escape/passwd", "node_modules/up/etc/passwd"} {
				if status, got := file(name); status == http.StatusOK || strings.Contains(got, "root:") {
					return fmt.Errorf("the workspace's %s, a symlink out of the tree: %d %q", name, status, got)
				}
			}
			return nil
		}},
	}

	// Bob's turn i runs "echo bob-turn-i" (steps 2i and 2i+1).
	var steps []llmtest.Step
	for i := range kinds {
		steps = append(steps, shellCall(fmt.Sprintf("echo bob-turn-%d", i)), llmtest.Step{Expect: fmt.Sprintf("bob-turn-%d", i), Text: "Done."})
	}
	// A conversation whose first message says PUSH writes a file.
	push := llmtest.Branch{Match: "PUSH", Steps: []llmtest.Step{toolCall("write_file", map[string]string{"path": "NEW.md", "content": "new\n"}), {Text: "Written."}}}
	in := newInstance(t, llmScript(t, &llmtest.Script{Steps: steps, Branches: []llmtest.Branch{push}})+"repositories:\n  max_snapshot_bytes: 64MiB\n")
	in.addUser("root", pw, true)
	in.addUser("bob", pw, false)
	p := in.start()
	admin, bob := p.login("root", pw), p.login("bob", pw)
	pid := p.cmd.Process.Pid

	normal := addRepo(t, admin, "normal", "file://"+bareRepo(t, map[string]string{"main.go": "package main\n\nfunc main() {}\n"}, nil))
	var conv struct{ ID string }
	bob.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": normal}, &conv)
	bs := bob.follow(conv.ID, "")
	before := procStatus(t, pid, "VmRSS")

	stop := make(chan struct{})
	health, sampling := sampleHealth(p.URL, stop)
	stopSampling := sync.OnceFunc(func() { close(stop); sampling.Wait() })
	defer stopSampling()

	const bound = 300 << 20
	for i, k := range kinds {
		var repo struct{ ID string }
		admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]any{"name": k.name, "url": "file://" + k.bare, "branch": "main", "run_setup": k.setup}, &repo)
		var started struct{ Job jobs.Job }
		admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &started)
		kickoff := time.Now()

		// Bob's command, approved while the sync runs.
		bob.send(conv.ID, "run it")
		evs := bs.until(agentcore.EventApprovalPending, 60*time.Second)
		bob.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)

		// The sync, watched: a server past the bound is stopped at once
		// (it would grow until the machine runs out of memory).
		var j jobs.Job
		sandboxtest.Eventually(t, 90*time.Second, func() error {
			admin.must(http.StatusOK, "GET", "/api/v1/jobs/"+started.Job.ID, nil, &j)
			if rss := procStatus(t, pid, "VmRSS"); rss-before > bound {
				p.kill()
				t.Fatalf("%s: server RSS %d MiB, %d MiB more than before (job %s)", k.name, rss>>20, (rss-before)>>20, j.Status)
			}
			if j.Status != jobs.StatusSucceeded && j.Status != jobs.StatusFailed && j.Attempts <= 1 {
				return fmt.Errorf("%s: the sync still %s", k.name, j.Status)
			}
			return nil
		})
		synced := time.Since(kickoff)
		if err := k.check(admin, j, repo.ID); err != nil {
			t.Errorf("%s: %v", k.name, err)
		}

		evs = bs.until(agentcore.EventTurnFinished, 90*time.Second)
		want := fmt.Sprintf("bob-turn-%d", i)
		if !slices.ContainsFunc(evs, func(e sseEvent) bool {
			return e.Type == agentcore.EventToolOutput && strings.Contains(string(e.Data), want)
		}) {
			t.Errorf("%s: bob's command did not print %s: %v", k.name, want, evs)
		}
		t.Logf("%s: sync %s in %v %q; checked and bob's turn done at %v", k.name, j.Status, synced.Round(time.Millisecond), j.LastError, time.Since(kickoff).Round(time.Millisecond))
	}
	stopSampling()
	hwm := procStatus(t, pid, "VmHWM")

	for _, f := range []string{filepath.Join(spy, "marker"), filepath.Join(hooked, "marker")} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a hostile repository ran code: %s written (%v)", f, err)
		}
	}
	if hwm-before > bound {
		t.Errorf("server peak RSS %d MiB, %d MiB over its RSS before; want at most 300", hwm>>20, (hwm-before)>>20)
	}
	lat := health.lat
	if len(lat) < 100 || health.failed > 0 {
		t.Fatalf("/healthz: %d requests, %d failed", len(lat), health.failed)
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("/healthz: %d requests, p50 %v, p99 %v, max %v; server RSS %d MiB before, peak %d MiB", len(lat), p50, p99, lat[len(lat)-1], before>>20, hwm>>20)
	if p99 >= 50*time.Millisecond {
		t.Errorf("/healthz p99 %v beside the hostile repositories; want under 50 ms", p99)
	}
}
