package daemon_test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// gitWorkspaceScript is what the scripted model runs in the workspace:
// changes tracked, untracked and ignored files (by .gitignore, a
// negation and .git/info/exclude), then shows git's view of them
// between markers, and plants a .git configuration that would run a
// command if git ran over this .git outside the sandbox.
const gitWorkspaceScript = `set -e
echo "print('hello')" > src/app.py
mkdir -p src/__pycache__
printf 'x\000pyc' > src/__pycache__/app.cpython-311.pyc
echo debug > debug.log
echo keep > keep.log
echo new > new.txt
rm old.txt
mkdir -p .git/info
echo private.txt >> .git/info/exclude
echo secret > private.txt
rm a/.gitignore
echo x > a/x.tmp
rm -rf b && mkdir b
echo y > b/y.dat
mkdir d
echo '*.bin' > d/.gitignore
echo z > d/z.bin
echo '*' > evil-ignore
mkdir c && ln -s ../evil-ignore c/.gitignore && echo c > c/c.txt
git add -A
echo ==STATUS==
git status --porcelain=v1
echo ==IGNORED==
git status --porcelain=v1 --ignored | grep '^!!'
echo ==DIFF==
git diff --cached --full-index
echo ==END==
git config core.fsmonitor "touch MARKER"
`

// The must-show, git's part: a conversation on a repository has
// a repository at /workspace (a clean status and the commit's log at
// first); after the model's changes, git status and git diff inside the
// sandbox agree with …/workspace/diff, whose "#" lines list the ignored
// paths git ignores; the push carries what git would commit and none of
// the ignored files nor .git; and no host-side git touched the
// workspace's .git.
func TestGitWorkspaceEndToEnd(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	for name, body := range map[string]string{"README.md": "hello\n", "src/app.py": "print('hi')\n", "old.txt": "old\n", ".gitignore": "__pycache__/\n*.log\n!keep.log\n",
		"a/.gitignore": "*.tmp\n", "b/.gitignore": "*.dat\n", "b/f.txt": "f\n"} {
		os.MkdirAll(filepath.Join(work, filepath.Dir(name)), 0o755)
		os.WriteFile(filepath.Join(work, name), []byte(body), 0o644)
	}
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "initial")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	base := gitCmd(t, bare, "rev-parse", "main")

	// Every host-side git the server starts goes through this wrapper.
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	calls := filepath.Join(dir, "git-calls")
	real, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bin, "git"), []byte("#!/bin/sh\nprintf '%s %s\\n' \"$(pwd)\" \"$*\" >> "+calls+"\nexec "+real+" \"$@\"\n"), 0o755)
	marker := filepath.Join(dir, "pwned")

	in := newInstance(t, llm(t,
		shellCall("git status --porcelain=v1 --branch && git log --format=%s"), llmtest.Step{Text: "Clean."},
		shellCall(strings.ReplaceAll(gitWorkspaceScript, "MARKER", marker)), llmtest.Step{Text: "Done."},
		shellCall("mkdir big && head -c 3000000 /dev/zero | tr '\\0' x > big/.gitignore && echo > big/f"), llmtest.Step{Text: "Big."},
	)+"sandbox:\n  shell_always_allow: true\n")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start("PATH=" + bin + ":" + os.Getenv("PATH"))
	admin, a := p.login("root", pw), p.login("alice", pw)
	repo := addRepo(t, admin, "demo", "file://"+bare)
	var conv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
	s := a.follow(conv.ID, "")
	output := func() string {
		t.Helper()
		evs := s.until(agentcore.EventTurnFinished, 2*time.Minute)
		for _, ev := range evs {
			if ev.Type == agentcore.EventToolOutput {
				var o struct{ Data struct{ Output string } }
				json.Unmarshal(ev.Data, &o)
				return o.Data.Output
			}
		}
		t.Fatal("the turn had no tool output")
		return ""
	}

	a.send(conv.ID, "what is the state of the repository?")
	if out := output(); !strings.Contains(out, "## HEAD (no branch)\ninitial\n") {
		t.Fatalf("git in a fresh workspace: want a clean tree at the commit, got\n%s", out)
	}

	a.send(conv.ID, "make the changes")
	out := output()
	section := func(name, next string) string {
		_, after, ok1 := strings.Cut(out, "=="+name+"==\n")
		body, _, ok2 := strings.Cut(after, "=="+next+"==\n")
		if !ok1 || !ok2 {
			t.Fatalf("no %s section in the shell's output:\n%s", name, out)
		}
		return body
	}
	status, ignoredByGit, gitDiff := section("STATUS", "IGNORED"), section("IGNORED", "DIFF"), section("DIFF", "END")

	patch, digest := a.readDiff(conv.ID)
	// The files: git status's, in the order both sort them.
	var statusFiles, patchFiles []string
	for line := range strings.Lines(status) {
		statusFiles = append(statusFiles, strings.TrimSpace(line[3:]))
	}
	for line := range strings.Lines(patch) {
		if rest, ok := strings.CutPrefix(line, "diff --git a/"); ok {
			patchFiles = append(patchFiles, rest[:strings.Index(rest, " b/")])
		}
	}
	slices.Sort(statusFiles)
	slices.Sort(patchFiles)
	// a/.gitignore deleted (a whiteout): its rule is gone; b replaced (an
	// opaque directory): lower's .gitignore there is gone; d/.gitignore new; c/.gitignore a
	// symlink, which git does not follow.
	if want := []string{"a/.gitignore", "a/x.tmp", "b/.gitignore", "b/f.txt", "b/y.dat", "c/.gitignore", "c/c.txt", "d/.gitignore", "evil-ignore", "keep.log", "new.txt", "old.txt", "src/app.py"}; !slices.Equal(statusFiles, want) || !slices.Equal(patchFiles, want) {
		t.Errorf("changed files: git status %q, the workspace diff %q, want %q\nstatus:\n%s\npatch:\n%s", statusFiles, patchFiles, want, status, patch)
	}
	// The ignored paths: git's "!!" lines, the patch's "#" lines.
	var gitIgnored, patchIgnored []string
	for line := range strings.Lines(ignoredByGit) {
		gitIgnored = append(gitIgnored, strings.TrimSpace(strings.TrimPrefix(line, "!!")))
	}
	head, _, _ := strings.Cut(patch, "diff --git")
	_, list, ok := strings.Cut(head, "# codumentor: not exported: ignored (the repository's .gitignore or .git/info/exclude):\n")
	if !ok {
		t.Fatalf("the patch lists no ignored paths:\n%s", patch)
	}
	for line := range strings.Lines(list) {
		if !strings.HasPrefix(line, "#   ") {
			break
		}
		patchIgnored = append(patchIgnored, strings.TrimSpace(strings.TrimPrefix(line, "#   ")))
	}
	slices.Sort(gitIgnored)
	if want := []string{"d/z.bin", "debug.log", "private.txt", "src/__pycache__/"}; !slices.Equal(gitIgnored, want) || !slices.Equal(patchIgnored, want) {
		t.Errorf("ignored: git %q, the patch's comment %q, want %q", gitIgnored, patchIgnored, want)
	}
	// The patch is git's own diff of the same change, but for its
	// leading comment lines.
	body := patch[len(head):]
	if body != gitDiff {
		t.Errorf("the workspace diff differs from git diff in the sandbox:\n--- workspace diff\n%s\n--- git diff --cached\n%s", body, gitDiff)
	}
	if strings.Contains(body, ".git/") || strings.Contains(body, "secret") || strings.Contains(body, "pyc") {
		t.Errorf("the patch exports .git or ignored content:\n%s", patch)
	}

	var res struct{ Commit string }
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/workspace/push", map[string]string{"branch": "codumentor/gitws", "message": "Changes", "diff_sha256": digest}, &res)
	tree := strings.Fields(gitCmd(t, bare, "ls-tree", "-r", "--name-only", res.Commit))
	if want := []string{".gitignore", "README.md", "a/x.tmp", "b/y.dat", "c/.gitignore", "c/c.txt", "d/.gitignore", "evil-ignore", "keep.log", "new.txt", "src/app.py"}; !slices.Equal(tree, want) {
		t.Errorf("pushed tree %q, want %q (no ignored file, no .git)", tree, want)
	}
	if got := gitCmd(t, bare, "rev-parse", res.Commit+"^"); got != base {
		t.Errorf("pushed commit's parent %s, want %s", got, base)
	}

	// A .gitignore over its bound (1 MiB) is refused, not read whole.
	a.send(conv.ID, "write a big .gitignore")
	output()
	if status, body, _ := a.do("GET", "/api/v1/conversations/"+conv.ID+"/workspace/diff", nil); status != http.StatusUnprocessableEntity || !strings.Contains(string(body), `"code":"ignore_rules_too_large"`) || strings.Contains(string(body), in.dir) {
		t.Errorf("the diff with a 3 MB .gitignore: %d %s, want 422 ignore_rules_too_large naming no host path", status, body)
	}

	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Error("the workspace's core.fsmonitor ran on the host")
	}
	b, _ := os.ReadFile(calls)
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, "workspaces") || strings.Contains(line, "snapshots") {
			t.Errorf("a host-side git ran over a workspace or snapshot: %s", line)
		}
	}
}
