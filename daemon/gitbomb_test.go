package daemon_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// gitBomb is a bare repository of 12 objects whose trees refer to the
// same subtree ten times at each of ten levels (10^10 paths to one
// blob), built with git hash-object and mktree, its branch main on it.
func gitBomb(t *testing.T, bare string) {
	t.Helper()
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"--git-dir", bare}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=Setup", "GIT_AUTHOR_EMAIL=setup@example.com", "GIT_COMMITTER_NAME=Setup", "GIT_COMMITTER_EMAIL=setup@example.com")
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("", "init", "-q", "--bare", bare)
	obj, mode, typ := run("package bomb\n\nfunc bombMarker() {}\n", "hash-object", "-w", "--stdin"), "100644", "blob"
	for range 10 {
		var tree strings.Builder
		for i := range 10 {
			fmt.Fprintf(&tree, "%s %s %s\td%d\n", mode, typ, obj, i)
		}
		obj, mode, typ = run(tree.String(), "mktree"), "040000", "tree"
	}
	run("", "update-ref", "refs/heads/main", run("bomb\n", "commit-tree", "-m", "bomb", obj))
}

// A git bomb synced through the real server: the index step fails with
// too_many_entries (naming the cap) in well under a minute, the server's
// resident memory stays within 300 MB of what it was, the job is not
// retried, and a restarted server does not take it up again.
func TestGitBombSync(t *testing.T) {
	dir := t.TempDir()
	bomb, ok := filepath.Join(dir, "bomb.git"), filepath.Join(dir, "ok.git")
	gitBomb(t, bomb)
	work := filepath.Join(dir, "work")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "a.go"), []byte("package a\n\nfunc smallRepo() {}\n"), 0o644)
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "small")
	gitCmd(t, dir, "clone", "-q", "--bare", work, ok)

	in := newInstance(t, "")
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	pid := p.cmd.Process.Pid
	before := procStatus(t, pid, "VmRSS")

	var repo struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "bomb", "url": "file://" + bomb, "branch": "main"}, &repo)
	var sync struct{ Job jobs.Job }
	start := time.Now()
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	// Watched while it runs: a server past the bound is stopped at once
	// (it would grow until the machine runs out of memory).
	const bound = 300 << 20
	var j jobs.Job
	sandboxtest.Eventually(t, 60*time.Second, func() error {
		admin.must(http.StatusOK, "GET", "/api/v1/jobs/"+sync.Job.ID, nil, &j)
		if rss := procStatus(t, pid, "VmRSS"); rss-before > bound {
			p.kill()
			t.Fatalf("server RSS %d MiB, %d MiB more than before the sync (job %s, %+v)", rss>>20, (rss-before)>>20, j.Status, j.Progress)
		}
		if j.Status != jobs.StatusSucceeded && j.Status != jobs.StatusFailed && j.Attempts <= 1 {
			return fmt.Errorf("the sync still %s (%+v)", j.Status, j.Progress)
		}
		return nil
	})
	took := time.Since(start)
	hwm := procStatus(t, pid, "VmHWM")
	t.Logf("sync failed in %v: %s; server RSS %d MiB before, peak %d MiB", took, j.LastError, before>>20, hwm>>20)
	if hwm-before > bound {
		t.Errorf("server peak RSS %d MiB, %d MiB over its RSS before the sync; want at most 300", hwm>>20, (hwm-before)>>20)
	}
	if j.Status != jobs.StatusFailed || j.Attempts != 1 || !strings.Contains(j.LastError, "too_many_entries") || !strings.Contains(j.LastError, "200000 files (retrieval.max_files)") {
		t.Fatalf("sync job: %s after %d attempts: %q; want failed once with too_many_entries naming retrieval.max_files", j.Status, j.Attempts, j.LastError)
	}
	var got struct {
		Head          string
		IndexedCommit string `json:"indexed_commit"`
	}
	admin.must(http.StatusOK, "GET", "/api/v1/repositories/"+repo.ID, nil, &got)
	if got.Head == "" || got.IndexedCommit != "" {
		t.Errorf("repository after the failed sync: %+v; want fetched, not indexed", got)
	}

	// A restarted server: a later job runs, the failed one stays as it
	// was (the queue takes the oldest due job first).
	p.stop()
	p = in.start()
	admin = p.login("root", pw)
	var small struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "small", "url": "file://" + ok, "branch": "main"}, &small)
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+small.ID+"/sync", nil, &sync)
	if j2 := waitJobDone(t, admin, sync.Job.ID); j2.Status != jobs.StatusSucceeded {
		t.Fatalf("a small repository's sync after the restart: %+v", j2)
	}
	var again jobs.Job
	admin.must(http.StatusOK, "GET", "/api/v1/jobs/"+j.ID, nil, &again)
	if again.Status != jobs.StatusFailed || again.Attempts != 1 || !again.Finished.Equal(j.Finished) {
		t.Errorf("the bomb's sync after a restart: %s, %d attempts, finished %v; want still failed after 1 (at %v)", again.Status, again.Attempts, again.Finished, j.Finished)
	}
}
