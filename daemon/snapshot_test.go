package daemon_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// bareRepo makes a bare repository whose main branch has files, and
// what index (if set) adds in its work tree before the commit; it
// returns the bare repository's path.
func bareRepo(t *testing.T, files map[string]string, index func(work string)) string {
	t.Helper()
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitCmd(t, work, "add", "-A")
	if index != nil {
		index(work)
	}
	gitCmd(t, work, "commit", "-q", "-m", "initial")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	return bare
}

// addRepo adds repository name (url's main branch) and syncs it; it
// returns its ID.
func addRepo(t *testing.T, admin *client, name, url string) string {
	t.Helper()
	var repo struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": name, "url": url, "branch": "main"}, &repo)
	var sync struct{ Job jobs.Job }
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	if j := waitJobDone(t, admin, sync.Job.ID); j.Status != jobs.StatusSucceeded {
		t.Fatalf("sync: %+v", j)
	}
	return repo.ID
}

// diskBlocks is the bytes the blocks of the tree at dir occupy.
func diskBlocks(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// A small repository whose tree takes 200 MiB (one compressible blob
// under ten names; not zeros, which git writes as sparse files), with repositories.max_snapshot_bytes at 64 MiB: the
// checkout is stopped near the cap while it runs, the partial snapshot
// is removed, and the conversation is refused with the reason (422
// snapshot_failed, no host path), again without another checkout.
func TestSnapshotOverCapRefused(t *testing.T) {
	needSandbox(t)
	bare := bigBlobRepo(t)

	in := newInstance(t, "repositories:\n  max_snapshot_bytes: 64MiB\n")
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	repo := addRepo(t, admin, "bomb", "file://"+bare)

	// The host's disk under the snapshots, sampled while the checkout runs.
	snaps := filepath.Join(in.dir, "repos", "snapshots")
	var peak atomic.Int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), diskBlocks(snaps)))
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	refused := func() string {
		t.Helper()
		status, body, _ := admin.do("POST", "/api/v1/conversations", map[string]string{"repository": repo})
		var e struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(body, &e)
		if status != http.StatusUnprocessableEntity || e.Error.Code != "snapshot_failed" ||
			!strings.Contains(e.Error.Message, "max_snapshot_bytes") || strings.Contains(e.Error.Message, in.dir) {
			t.Fatalf("conversation on a 200 MiB tree, cap 64 MiB: %d %s", status, body)
		}
		return e.Error.Message
	}
	msg := refused()
	close(stop)
	<-sampled
	t.Logf("refused: %s; peak %d MiB under snapshots", msg, peak.Load()>>20)
	if peak.Load() >= 160<<20 {
		t.Errorf("the snapshots took up to %d MiB of the tree's 200 MiB, cap 64 MiB", peak.Load()>>20)
	}
	if ents, err := os.ReadDir(snaps); err != nil || len(ents) != 0 {
		t.Fatalf("snapshots left: %v %v", ents, err)
	}
	// Refused again, with the reason, without checking it out again. The
	// server's log line may reach its stderr pipe after the answer.
	const failed = "checking out a repository snapshot failed"
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(p.stderr.String(), failed) {
			return fmt.Errorf("the failed checkout was not logged:\n%s", p.stderr)
		}
		return nil
	})
	launches := strings.Count(p.stderr.String(), failed)
	if again := refused(); again != msg {
		t.Errorf("second refusal %q, first %q", again, msg)
	}
	if n := strings.Count(p.stderr.String(), failed); n != launches {
		t.Errorf("the second conversation checked out the tree again (%d failures logged, then %d)", launches, n)
	}
	var list struct{ Conversations []any }
	admin.must(http.StatusOK, "GET", "/api/v1/conversations", nil, &list)
	if len(list.Conversations) != 0 {
		t.Errorf("refused conversations kept: %v", list.Conversations)
	}
}

// A project setup whose layer grows past repositories.max_snapshot_bytes
// is stopped while it runs, its layer is not kept, and the conversation's
// setup fails with the reason.
func TestSetupLayerOverCap(t *testing.T) {
	needSandbox(t)
	bare := bareRepo(t, map[string]string{"setup.sh": "yes codumentor | head -c 200M > big\necho survived\n"}, nil)

	in := newInstance(t, "repositories:\n  max_snapshot_bytes: 64MiB\n")
	in.addUser("root", pw, true)
	p := in.start()
	admin := p.login("root", pw)
	repo := addSetupRepo(t, admin, "filler", "file://"+bare, "main")
	var conv struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
	types, output, end := setupEvents(t, admin.follow(conv.ID, ""))
	reason, _ := end["error"].(string)
	if types[len(types)-1] != agentcore.EventSetupFailed || strings.Contains(output, "survived") ||
		!strings.Contains(reason, "max_snapshot_bytes") || strings.Contains(reason, in.dir) {
		t.Fatalf("setup: events %v, output %q, end %v", types, output, end)
	}
	t.Logf("setup failed: %s", reason)
	if ents, err := os.ReadDir(filepath.Join(in.dir, "workspaces", "setups")); err != nil || len(ents) != 0 {
		t.Errorf("setup layers kept: %v %v", ents, err)
	}
}
