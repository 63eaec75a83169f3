package git

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostileRemote makes a bare remote of a one-commit repository whose
// hooks, configuration and alternates would each run or read something
// on the host: every hook git has writes a marker and its environment
// into spy (outside the remote) and into the remote itself, and
// core.alternateRefsCommand does the same. It returns the remote's
// file:// URL, its path and its commit.
func hostileRemote(t *testing.T, spy string) (string, string, string) {
	t.Helper()
	url, bare := remote(t, map[string]string{"README.md": "hello\n"})
	for _, h := range []string{"pre-receive", "update", "post-receive", "post-update", "reference-transaction", "push-to-checkout", "proc-receive", "pre-push", "pre-auto-gc", "post-checkout"} {
		body := "#!/bin/sh\necho " + h + " >> '" + spy + "/marker'\nenv >> '" + spy + "/env'\necho " + h + " >> \"$GIT_DIR/../marker\"\ncat >/dev/null\nexit 0\n"
		if err := os.WriteFile(filepath.Join(bare, "hooks", h), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A second set under a hooksPath of the remote's own configuration.
	sh(t, bare, nil, "git", "config", "core.hooksPath", filepath.Join(bare, "hooks"))
	sh(t, bare, nil, "git", "config", "core.alternateRefsCommand", "touch '"+spy+"/marker'; env > '"+spy+"/env'; true")
	// The alternate makes receive-pack run core.alternateRefsCommand (in
	// the sandbox it can write nothing outside the remote).
	alt := filepath.Join(t.TempDir(), "alt.git")
	sh(t, filepath.Dir(alt), nil, "git", "init", "-q", "--bare", alt)
	if err := os.WriteFile(filepath.Join(bare, "objects", "info", "alternates"), []byte(filepath.Join(alt, "objects")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return url, bare, sh(t, bare, nil, "git", "rev-parse", "main")
}

// A push to a local remote runs none of the remote's hooks or commands,
// neither on the host nor in its sandbox, and no credential reaches it;
// the branch is pushed.
func TestLocalPushRunsNoRemoteCode(t *testing.T) {
	needSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spy := t.TempDir()
	url, bare, head := hostileRemote(t, spy)
	base := t.TempDir()
	g := &Git{TempDir: base}
	mirror := filepath.Join(base, "m.git")
	if _, err := g.Fetch(ctx, mirror, url, "main", nil, nil); err != nil {
		t.Fatal(err)
	}
	cred := &Credential{Username: "bot", Password: "s3cr3t-token"}
	if err := g.Push(ctx, mirror, url, head, "codumentor/pushed", cred); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, bare, nil, "git", "rev-parse", "refs/heads/codumentor/pushed"); got != head {
		t.Fatalf("the pushed branch is at %q, want %s", got, head)
	}
	for _, f := range []string{filepath.Join(spy, "marker"), filepath.Join(spy, "env"), filepath.Join(bare, "marker")} {
		if b, err := os.ReadFile(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the remote ran code: %s written (%d bytes, %v; the credential in it: %v)", filepath.Base(f), len(b), err, strings.Contains(string(b), cred.Password))
		}
	}
}

// A fetch from a local remote reads nothing of the host beyond the
// remote's directory: its alternates pointing elsewhere (another
// repository the server can read) are not followed, so a branch whose
// objects are only there cannot be fetched; its hooks and configuration
// run nothing.
func TestLocalFetchReadsOnlyTheRemote(t *testing.T) {
	needSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spy := t.TempDir()
	_, private := remote(t, map[string]string{"secret.txt": "another repository's content\n"})
	dir := t.TempDir()
	thief := filepath.Join(dir, "thief.git")
	// --shared: refs copied, objects only through alternates.
	sh(t, dir, nil, "git", "clone", "-q", "--bare", "--shared", private, thief)
	sh(t, thief, nil, "git", "config", "core.alternateRefsCommand", "touch '"+spy+"/marker'; true")
	sh(t, thief, nil, "git", "config", "uploadpack.packObjectsHook", "touch '"+spy+"/marker';")
	base := t.TempDir()
	g := &Git{TempDir: base}
	mirror := filepath.Join(base, "m.git")
	_, err := g.Fetch(ctx, mirror, "file://"+thief, "main", &Credential{Password: "s3cr3t-token"}, nil)
	if err == nil {
		t.Fatalf("a fetch through the remote's alternates succeeded: the host's repository %s was read", private)
	}
	if strings.Contains(err.Error(), "s3cr3t-token") || strings.Contains(err.Error(), private) {
		t.Errorf("fetch error %q names the credential or the alternate's path", err)
	}
	if _, err := os.Stat(filepath.Join(spy, "marker")); !errors.Is(err, os.ErrNotExist) {
		t.Error("the remote's configuration ran a command")
	}
	// The same remote without foreign alternates is fetched.
	url, bare, head := hostileRemote(t, spy)
	os.Remove(filepath.Join(bare, "objects", "info", "alternates"))
	got, err := g.Fetch(ctx, mirror, url, "main", nil, nil)
	if err != nil || got != head {
		t.Fatalf("Fetch = %s, %v; want %s", got, err, head)
	}
	if _, err := os.Stat(filepath.Join(spy, "marker")); !errors.Is(err, os.ErrNotExist) {
		t.Error("the remote's hooks or configuration ran a command")
	}
}

// Branch names and URLs that git reads as something other than what they
// say are refused, and git changes nothing: before, "refs/heads/main"
// became refs/heads/refs/heads/main, and file:/path was ssh to the host
// "file".
func TestAmbiguousNamesChangeNothing(t *testing.T) {
	needSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, bare := remote(t, map[string]string{"README.md": "hello\n"})
	head := sh(t, bare, nil, "git", "rev-parse", "main")
	base := t.TempDir()
	g := &Git{TempDir: base}
	mirror := filepath.Join(base, "m.git")
	if _, err := g.Fetch(ctx, mirror, url, "main", nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"refs/heads/main", "heads/main", "+main", "refs/tags/v1", "ma\u202ein", "FETCH_HEAD"} {
		if err := g.Push(ctx, mirror, url, head, b, nil); !errors.Is(err, ErrBadBranch) {
			t.Errorf("Push to branch %q = %v, want ErrBadBranch", b, err)
		}
	}
	if refs := sh(t, bare, nil, "git", "for-each-ref", "--format=%(refname)"); refs != "refs/heads/main" {
		t.Errorf("the remote's refs changed: %q", refs)
	}
	for _, u := range []string{"file:" + bare, "file:" + strings.TrimPrefix(bare, "/")} {
		if _, err := g.Fetch(ctx, mirror, u, "main", nil, nil); !errors.Is(err, ErrBadURL) {
			t.Errorf("Fetch(%q) = %v, want ErrBadURL", u, err)
		}
	}
}
