package git

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func TestMain(m *testing.M) {
	// The test binary is also the sandbox spawner.
	sandboxkit.Main()
	os.Exit(m.Run())
}

// sh runs a test setup command (trusted input) in dir.
func sh(t *testing.T, dir string, stdin io.Reader, argv ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Setup", "GIT_AUTHOR_EMAIL=setup@example.com", "GIT_COMMITTER_NAME=Setup", "GIT_COMMITTER_EMAIL=setup@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	return strings.TrimSpace(string(out))
}

// remote makes a bare repository whose main branch has files, and
// returns its file:// URL and path.
func remote(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	bare := filepath.Join(dir, "remote.git")
	sh(t, dir, nil, "git", "init", "-q", "-b", "main", work)
	for name, body := range files {
		p := filepath.Join(work, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sh(t, work, nil, "git", "add", "-A")
	sh(t, work, nil, "git", "commit", "-q", "-m", "initial")
	sh(t, dir, nil, "git", "clone", "-q", "--bare", work, bare)
	return "file://" + bare, bare
}

func needSandbox(t *testing.T) {
	t.Helper()
	sandboxtest.RequireSandbox(t, func(ctx context.Context) error { return sandboxkit.Doctor(ctx, sandboxkit.DoctorOptions{}).Err() })
}

// The whole path: fetch into a mirror, check out a snapshot in a
// sandbox, build a commit from a patch in a sandbox, push it.
func TestFetchCheckoutCommitPush(t *testing.T) {
	needSandbox(t)
	ctx := context.Background()
	url, bare := remote(t, map[string]string{"README.md": "hello\n", "src/a.go": "package a\n"})
	base := t.TempDir()
	g := &Git{TempDir: base}
	mirror := filepath.Join(base, "m.git")
	var last [2]int64
	head, err := g.Fetch(ctx, mirror, url, "main", nil, func(done, total int64) { last = [2]int64{done, total} })
	if err != nil {
		t.Fatal(err)
	}
	if want := sh(t, bare, nil, "git", "rev-parse", "main"); head != want {
		t.Fatalf("head %s, want %s", head, want)
	}
	if st, _ := os.Stat(mirror); st.Mode().Perm() != 0o700 {
		t.Errorf("mirror mode %v, want 0700", st.Mode().Perm())
	}
	if last[1] == 0 || last[0] != last[1] {
		t.Errorf("progress ended at %v, want done == total > 0", last)
	}
	if _, err := os.Stat(filepath.Join(mirror, "index")); err == nil {
		t.Error("the mirror has an index: something checked out host-side")
	}

	snap := filepath.Join(base, "snap")
	os.Mkdir(snap, 0o700)
	if err := (Sandbox{}).Checkout(ctx, mirror, head, snap); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(snap, "src/a.go")); string(b) != "package a\n" {
		t.Fatalf("snapshot src/a.go = %q", b)
	}

	patch := "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1,2 @@\n hello\n+world\n"
	out := filepath.Join(base, "out")
	os.Mkdir(out, 0o700)
	commit, err := (Sandbox{}).Commit(ctx, mirror, head, strings.NewReader(patch), Author{Name: "Alice", Email: "alice@example.com"}, "Say world", out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := g.FetchBundle(ctx, mirror, filepath.Join(out, BundleName), "refs/codumentor/push/t")
	if err != nil || got != commit {
		t.Fatalf("FetchBundle = %s, %v; want %s", got, err, commit)
	}
	if err := g.Push(ctx, mirror, url, commit, "codumentor/world", nil); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteRef(ctx, mirror, "refs/codumentor/push/t"); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, bare, nil, "git", "rev-parse", "codumentor/world"); got != commit {
		t.Fatalf("remote branch at %s, want %s", got, commit)
	}
	if got := sh(t, bare, nil, "git", "log", "-1", "--format=%an <%ae>|%s|%P", commit); got != "Alice <alice@example.com>|Say world|"+head {
		t.Fatalf("pushed commit: %s", got)
	}
	if got := sh(t, bare, nil, "git", "show", commit+":README.md"); got != "hello\nworld" {
		t.Fatalf("pushed README.md: %q", got)
	}
}

// A hostile repository: a symlink to /root, a submodule whose URL would
// run a command, a 300 MB blob. The checkout follows nothing host-side,
// writes nothing outside the snapshot, runs no submodule command, and
// ends.
func TestHostileRepository(t *testing.T) {
	needSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	work := filepath.Join(dir, "work")
	sh(t, dir, nil, "git", "init", "-q", "-b", "main", work)
	os.Symlink("/root", filepath.Join(work, "evil"))
	os.WriteFile(filepath.Join(work, ".gitmodules"), []byte("[submodule \"sub\"]\n\tpath = sub\n\turl = ext::sh -c touch% "+marker+"\n"), 0o644)
	os.WriteFile(filepath.Join(work, "ok.txt"), []byte("ok\n"), 0o644)
	// 300 MB of zeros compress to a small object: cheap to make.
	sh(t, work, nil, "git", "config", "core.compression", "1")
	big := sh(t, work, nil, "sh", "-c", "head -c 300M /dev/zero | git hash-object -w --stdin")
	sh(t, work, nil, "git", "update-index", "--add", "--cacheinfo", "100644,"+big+",big.bin")
	sh(t, work, nil, "git", "update-index", "--add", "--cacheinfo", "160000,"+strings.Repeat("1", 40)+",sub")
	sh(t, work, nil, "git", "add", "evil", ".gitmodules", "ok.txt")
	sh(t, work, nil, "git", "commit", "-q", "-m", "hostile")

	base := t.TempDir()
	g := &Git{TempDir: base}
	mirror := filepath.Join(base, "m.git")
	head, err := g.Fetch(ctx, mirror, "file://"+work, "main", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	snaps := filepath.Join(base, "snaps")
	os.Mkdir(snaps, 0o700)
	snap := filepath.Join(snaps, "s")
	os.Mkdir(snap, 0o700)
	if err := (Sandbox{}).Checkout(ctx, mirror, head, snap); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(snap, "evil")); err != nil || target != "/root" {
		t.Fatalf("evil is not the symlink it was: %q, %v", target, err)
	}
	if st, err := os.Stat(filepath.Join(snap, "big.bin")); err != nil || st.Size() != 300<<20 {
		t.Fatalf("big.bin: %v %v", st, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(snap, "sub")); len(ents) != 0 {
		t.Fatalf("the submodule was populated: %v", ents)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the submodule's command ran")
	}
	if ents, _ := os.ReadDir(snaps); len(ents) != 1 {
		t.Fatalf("the checkout wrote beside the snapshot: %v", ents)
	}
}

// A submodule URL that git would read as an option is refused by the
// host's fetch (transfer.fsckObjects), before anything could use it.
func TestFetchRefusesOptionURLSubmodule(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	sh(t, dir, nil, "git", "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, ".gitmodules"), []byte("[submodule \"sub\"]\n\tpath = sub\n\turl = --upload-pack=touch /tmp/x\n"), 0o644)
	sh(t, work, nil, "git", "update-index", "--add", "--cacheinfo", "160000,"+strings.Repeat("1", 40)+",sub")
	sh(t, work, nil, "git", "add", ".gitmodules")
	sh(t, work, nil, "git", "commit", "-q", "-m", "hostile")
	base := t.TempDir()
	g := &Git{TempDir: base}
	_, err := g.Fetch(context.Background(), filepath.Join(base, "m.git"), "file://"+work, "main", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "gitmodulesUrl") {
		t.Fatalf("fetch of a hostile .gitmodules = %v, want an fsck refusal", err)
	}
}

func TestParseCredential(t *testing.T) {
	for in, want := range map[string]string{
		"tok":                             "git:tok",
		"bot:tok:x":                       "bot:tok:x",
		"-----BEGIN OPENSSH PRIVATE KEY-": "key",
	} {
		c := ParseCredential(in)
		got := c.Username + ":" + c.Password
		if len(c.SSHKey) > 0 {
			got = "key"
		}
		if got != want {
			t.Errorf("ParseCredential(%q) = %s, want %s", in, got, want)
		}
	}
}

// bombRepository makes a repository holding one blob of size bytes of
// one repeated line (a small object; zeros would be checked out as
// sparse files, which take no disk) under names names, and fetches it
// into a mirror; it returns the mirror and its head.
func bombRepository(t *testing.T, size string, names int) (mirror, head string) {
	t.Helper()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	sh(t, dir, nil, "git", "init", "-q", "-b", "main", work)
	sh(t, work, nil, "git", "config", "core.compression", "1")
	blob := sh(t, work, nil, "sh", "-c", "yes codumentor | head -c "+size+" | git hash-object -w --stdin")
	for i := range names {
		sh(t, work, nil, "git", "update-index", "--add", "--cacheinfo", "100644,"+blob+",copy"+strconv.Itoa(i)+".bin")
	}
	sh(t, work, nil, "git", "commit", "-q", "-m", "bomb")
	base := t.TempDir()
	mirror = filepath.Join(base, "m.git")
	head, err := (&Git{TempDir: base}).Fetch(context.Background(), mirror, "file://"+work, "main", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return mirror, head
}

// A small repository whose tree is large (one compressible blob under
// ten names, 200 MiB) is stopped near CheckoutBytes with ErrTooLarge,
// measured while the checkout runs; a tree within it checks out.
func TestCheckoutBudget(t *testing.T) {
	needSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// 600 MiB of compressible text: git writes it at memory speed, so the
	// tree is big enough that the budget, measured every 100 ms, stops it
	// long before its end even on an idle machine.
	mirror, head := bombRepository(t, "20M", 30)
	const budget = 64 << 20
	dest := t.TempDir()
	err := (Sandbox{CheckoutBytes: budget}).Checkout(ctx, mirror, head, dest)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("checkout of 600 MiB with a budget of 64 MiB: %v, want ErrTooLarge", err)
	}
	var files int
	var size int64
	ents, _ := os.ReadDir(dest)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			files, size = files+1, size+fi.Size()
		}
	}
	t.Logf("stopped with %d files, %d MiB written", files, size>>20)
	// Stopped while it ran, well before the tree's 600 MiB.
	if size >= 400<<20 {
		t.Errorf("the checkout wrote %d MiB of 600 before it was stopped, budget 64 MiB", size>>20)
	}

	small := t.TempDir()
	if err := (Sandbox{CheckoutBytes: 1 << 30}).Checkout(ctx, mirror, head, small); err != nil {
		t.Fatalf("checkout of 600 MiB with a budget of 1 GiB: %v", err)
	}
}
