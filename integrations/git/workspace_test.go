package git

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// inWorkspace runs script with sh in a workspace sandbox over lower (a
// fresh upper layer per call unless upper is given) and returns its
// output.
func inWorkspace(t *testing.T, lower, upper, script string) (string, error) {
	t.Helper()
	work := filepath.Join(filepath.Dir(upper), "work")
	os.MkdirAll(work, 0o700)
	p, err := sandboxkit.Settings{}.Workspace("workspace", &sandboxkit.Workspace{Lower: lower, Upper: upper, Work: work})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := sandboxkit.Command(ctx, p, "sh", "-c", script)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// A snapshot with History is a shallow repository that git inside a
// workspace sandbox works in: a clean status, the log of History
// commits, blame, diff, stash and a commit, all written to the upper
// layer while the snapshot stays as it was.
func TestCheckoutRepository(t *testing.T) {
	needSandbox(t)
	ctx := t.Context()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	sh(t, dir, nil, "git", "init", "-q", "-b", "main", work)
	for i, body := range []string{"one\n", "one\ntwo\n", "one\ntwo\nthree\n"} {
		os.WriteFile(filepath.Join(work, "notes.txt"), []byte(body), 0o644)
		sh(t, work, nil, "git", "add", "notes.txt")
		sh(t, work, nil, "git", "commit", "-q", "-m", "commit "+string(rune('1'+i)))
	}
	os.MkdirAll(filepath.Join(work, "src"), 0o755)
	os.WriteFile(filepath.Join(work, "src/a.go"), []byte("package a\n"), 0o644)
	os.Symlink("notes.txt", filepath.Join(work, "link"))
	sh(t, work, nil, "git", "add", "-A")
	sh(t, work, nil, "git", "commit", "-q", "-m", "commit 4")

	base := t.TempDir()
	mirror := filepath.Join(base, "m.git")
	head, err := (&Git{TempDir: base}).Fetch(ctx, mirror, "file://"+work, "main", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(base, "snap")
	os.Mkdir(snap, 0o700)
	if err := (Sandbox{History: 3}).Checkout(ctx, mirror, head, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(snap, ".git", "hooks")); !os.IsNotExist(err) {
		t.Errorf("the snapshot's .git has a hooks directory (%v): the template was not empty", err)
	}
	before := treeDigest(t, snap)

	upper := filepath.Join(base, "layer", "upper")
	os.MkdirAll(upper, 0o700)
	t.Cleanup(func() { overlay.RemoveAll(filepath.Join(base, "layer")) })
	out, err := inWorkspace(t, snap, upper, `set -e
git status --porcelain=v1 --branch
echo ---
git log --format=%s
echo ---
git rev-parse HEAD
git blame --porcelain notes.txt | grep -c '^[0-9a-f]\{40\} '
echo ---
echo four >> notes.txt
echo new > untracked.txt
git diff --stat
git stash --quiet
git status --porcelain=v1
git stash pop --quiet
git add -A
git commit --quiet -m 'agent work'
git log --format=%s -1
git status --porcelain=v1
`)
	if err != nil {
		t.Fatalf("git in the workspace: %v\n%s", err, out)
	}
	t.Logf("git in the workspace:\n%s", out)
	parts := strings.Split(out, "---\n")
	if len(parts) != 4 {
		t.Fatalf("output:\n%s", out)
	}
	if want := "## HEAD (no branch)\n"; parts[0] != want {
		t.Errorf("status of the fresh workspace = %q, want %q (a clean tree)", parts[0], want)
	}
	if want := "commit 4\ncommit 3\ncommit 2\n"; parts[1] != want {
		t.Errorf("log = %q, want the History's 3 commits %q", parts[1], want)
	}
	if !strings.HasPrefix(parts[2], head+"\n") {
		t.Errorf("HEAD: %q, want %s", parts[2], head)
	}
	// diff --stat, the status with the change stashed (the untracked
	// file stays), the commit, and a clean status after it.
	if want := " notes.txt | 1 +\n 1 file changed, 1 insertion(+)\n?? untracked.txt\nagent work\n"; parts[3] != want {
		t.Errorf("git diff, stash, commit:\n%s\nwant\n%s", parts[3], want)
	}
	if after := treeDigest(t, snap); after != before {
		t.Error("git in the workspace changed the snapshot")
	}
	if _, err := os.Stat(filepath.Join(upper, ".git", "index")); err != nil {
		t.Errorf("the index is not in the upper layer: %v", err)
	}
}

// treeDigest is the listing of dir: each path with its size, mode and
// modification time.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(p + " " + fi.Mode().String() + " " + fi.ModTime().String() + " " + strconv.FormatInt(fi.Size(), 10) + "\n")
		return nil
	})
	return b.String()
}

// A repository of one commit (no history before it) with a History
// longer than it: the whole of it, and a clean tree.
func TestCheckoutRepositoryOneCommit(t *testing.T) {
	needSandbox(t)
	url, _ := remote(t, map[string]string{"README.md": "hello\n"})
	base := t.TempDir()
	mirror := filepath.Join(base, "m.git")
	head, err := (&Git{TempDir: base}).Fetch(t.Context(), mirror, url, "main", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(base, "snap")
	os.Mkdir(snap, 0o700)
	if err := (Sandbox{History: 50}).Checkout(t.Context(), mirror, head, snap); err != nil {
		t.Fatal(err)
	}
	upper := filepath.Join(base, "layer", "upper")
	os.MkdirAll(upper, 0o700)
	t.Cleanup(func() { overlay.RemoveAll(filepath.Join(base, "layer")) })
	out, err := inWorkspace(t, snap, upper, "git log --format=%s && git status --porcelain=v1")
	if err != nil || out != "initial\n" {
		t.Fatalf("git log and status = %q, %v; want the one commit and a clean tree", out, err)
	}
}

// The .git counts in CheckoutBytes: a small tree with a large history
// checks out with a short History, and is stopped with ErrTooLarge with
// a long one.
func TestCheckoutBudgetCountsHistory(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	sh(t, dir, nil, "git", "init", "-q", "-b", "main", work)
	for i := range 6 {
		// Random bytes: each version is 3 MiB in the pack as well.
		sh(t, work, nil, "sh", "-c", "head -c 3145728 /dev/urandom > data.bin && git add data.bin && git commit -q -m v"+strconv.Itoa(i))
	}
	base := t.TempDir()
	mirror := filepath.Join(base, "m.git")
	head, err := (&Git{TempDir: base}).Fetch(t.Context(), mirror, "file://"+work, "main", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const budget = 12 << 20
	for _, tc := range []struct {
		history  int
		tooLarge bool
	}{{1, false}, {6, true}} {
		dest := t.TempDir()
		err := (Sandbox{CheckoutBytes: budget, History: tc.history}).Checkout(t.Context(), mirror, head, dest)
		if got := errors.Is(err, ErrTooLarge); got != tc.tooLarge || !got && err != nil {
			t.Errorf("History %d (about %d MiB with the tree), budget 12 MiB: %v; want too large: %v", tc.history, 3*(tc.history+1), err, tc.tooLarge)
		}
	}
}
