package git

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codumentor/codumentor/sandboxkit"
)

// Sandbox runs git on a mirror inside a sandbox (MirrorPolicy): the
// mirror read-only, one output directory read-write, no network, no
// credentials. The program must call sandboxkit.Main first.
type Sandbox struct {
	// Settings are the sandbox's; its Launching is told of each run
	// before it starts, and its error refuses the run.
	Settings sandboxkit.Settings
	// Timeout bounds one run (default 10 minutes).
	Timeout time.Duration
	// CheckoutBytes bounds the blocks a checkout writes, its .git
	// included, measured while it runs (Limits.Disk of its sandbox); 0
	// means Settings.Limits.Disk.
	CheckoutBytes int64
	// History is how many commits of history a checkout's .git holds
	// (a shallow repository; the commit itself is one). 0 means none:
	// the checkout is the tree alone, without .git.
	History int
}

// mirrorLabel is the label of git's sandboxes (Policy.Profile).
const mirrorLabel = "git"

// MirrorPolicy is the sandbox git runs in for the server (checkout of a
// snapshot, the push gateway's commit, the server side of a local
// remote): the repository ro read-only at /mirror, one directory rw
// read-write at /out, the working directory, no network, no
// credentials. Both paths must be absolute host paths. Repository
// contents are hostile; git parses them in here.
func MirrorPolicy(s sandboxkit.Settings, ro, rw string) (*sandboxkit.Policy, error) {
	if !filepath.IsAbs(ro) || !filepath.IsAbs(rw) {
		return nil, fmt.Errorf("git: the sandbox needs absolute paths (%q, %q)", ro, rw)
	}
	p, err := s.NewPolicy(mirrorLabel)
	if err != nil {
		return nil, err
	}
	p.ReadOnly = []sandboxkit.Bind{{Src: ro, Dst: "/mirror"}}
	p.ReadWrite = []sandboxkit.Bind{{Src: rw, Dst: "/out"}}
	p.Dir = "/out"
	return p, nil
}

// sandboxGit are the git options inside: no configuration but the
// mirror's, no hooks, real symlinks (they stay inside the snapshot:
// nothing on the host follows them).
const sandboxGit = `git -c core.hooksPath=/dev/null -c core.symlinks=true -c core.fsmonitor=false -c submodule.recurse=false -c protocol.allow=never`

// checkoutScript writes the tree of commit $1 to /out: read into an index
// in the sandbox's /tmp, then checked out. Submodules stay empty
// directories (never cloned).
const checkoutScript = `set -e
export GIT_DIR=/mirror GIT_WORK_TREE=/out GIT_INDEX_FILE=/tmp/index
` + sandboxGit + ` read-tree "$1"
` + sandboxGit + ` checkout-index --all --force
`

// repoScript is checkoutScript with a repository: /out/.git holds the
// last $2 commits of history up to commit $1 (a shallow fetch from the
// mirror, which upload-pack serves in the same sandbox), HEAD detached
// at $1 and an index matching the files, so git inside a workspace sees
// a clean tree, and an identity for commits made there (they stay in the
// workspace: a push takes the diff). The template is empty: no sample
// hooks, no info/.
const repoScript = `set -e
git init --quiet --template= /out
export GIT_DIR=/out/.git GIT_WORK_TREE=/out
` + sandboxGit + ` config core.bare false
` + sandboxGit + ` config user.name "Workspace"
` + sandboxGit + ` config user.email "workspace@localhost.invalid"
` + sandboxGit + ` -c protocol.file.allow=always -c uploadpack.allowAnySHA1InWant=true fetch --quiet --no-tags --no-write-fetch-head --depth="$2" file:///mirror "$1"
` + sandboxGit + ` update-ref --no-deref HEAD "$1"
` + sandboxGit + ` read-tree "$1"
` + sandboxGit + ` checkout-index --all --force
` + sandboxGit + ` update-index -q --refresh >/dev/null || true
`

// commitScript builds a commit on base $1 from the patch on stdin without
// a work tree: a scratch repository in /tmp borrows the mirror's objects,
// the patch is applied to an index of the base tree, and the commit is
// written to /out/push.bundle.
const commitScript = `set -e
git init --quiet --bare /tmp/scratch.git
echo /mirror/objects > /tmp/scratch.git/objects/info/alternates
export GIT_DIR=/tmp/scratch.git GIT_INDEX_FILE=/tmp/index
` + sandboxGit + ` read-tree "$1"
` + sandboxGit + ` apply --cached --whitespace=nowarn -
tree=$(` + sandboxGit + ` write-tree)
commit=$(` + sandboxGit + ` commit-tree "$tree" -p "$1" -m "$CODUMENTOR_MESSAGE")
` + sandboxGit + ` update-ref ` + bundleRef + ` "$commit"
` + sandboxGit + ` bundle create --quiet /out/push.bundle ` + bundleRef + ` "^$1"
printf '%s\n' "$commit"
`

// bundleRef is the ref the push bundle carries.
const bundleRef = "refs/heads/codumentor-push"

// BundleName is the file Commit writes in its output directory.
const BundleName = "push.bundle"

// ErrTooLarge is wrapped by Checkout's error when the tree takes more
// than its budget (Sandbox.CheckoutBytes): the checkout was stopped, and
// what it wrote is left in dest for the caller to remove.
var ErrTooLarge = errors.New("git: the checkout is larger than its disk budget")

func (sb Sandbox) run(ctx context.Context, mirror, out string, disk int64, env []string, stdin io.Reader, argv ...string) (string, error) {
	s := sb.Settings
	if disk > 0 {
		l := sandboxkit.DefaultLimits()
		if s.Limits != nil {
			l = *s.Limits
		}
		l.Disk = disk
		s.Limits = &l
	}
	p, err := MirrorPolicy(s, mirror, out)
	if err != nil {
		return "", err
	}
	p.Env = append([]string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0"}, env...)
	timeout := sb.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	var stdout, stderr bytes.Buffer
	cmd := sandboxkit.Command(ctx, p, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	cmd.OutputLimit = 64 << 10
	cmd.Timeout = timeout
	if err := cmd.Run(); err != nil {
		if cmd.State != nil && cmd.State.Limit == "disk" {
			return "", fmt.Errorf("%w (%d bytes): %w", ErrTooLarge, p.Limits.Disk, err)
		}
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2048 {
			msg = msg[len(msg)-2048:]
		}
		return "", fmt.Errorf("sandboxed git: %w: %s", err, strings.ToValidUTF8(msg, "?"))
	}
	return stdout.String(), nil
}

// Checkout writes the tree of commit (a full object name) of the bare
// repository mirror into dest, an existing empty directory, inside a
// sandbox, with a shallow repository of its History in dest/.git (HEAD
// detached at commit, its index matching the tree) when History is set.
// The host never runs git on that .git: it is the repository's content,
// for git inside a workspace sandbox. Symlinks are written as symlinks,
// submodules as empty directories; the host reads nothing of the tree. A
// tree (and .git) larger than CheckoutBytes stops it with an error
// wrapping ErrTooLarge.
func (sb Sandbox) Checkout(ctx context.Context, mirror, commit, dest string) error {
	if !IsCommitID(commit) {
		return fmt.Errorf("git checkout: %q is not a commit ID", commit)
	}
	argv := []string{"sh", "-c", checkoutScript, "checkout", commit}
	if sb.History > 0 {
		argv = []string{"sh", "-c", repoScript, "checkout", commit, strconv.Itoa(sb.History)}
	}
	_, err := sb.run(ctx, mirror, dest, sb.CheckoutBytes, nil, nil, argv...)
	return err
}

// Author names a commit's author (and committer).
type Author struct{ Name, Email string }

// maxMessage bounds a commit message, in bytes.
const maxMessage = 64 << 10

// ErrBadMessage is wrapped by Commit's error for a message it refuses.
var ErrBadMessage = errors.New("git: refused commit message")

// Commit builds, inside a sandbox, a commit whose parent is base and
// whose tree is base's with patch applied, authored and committed by
// author with message, and writes it as a bundle (BundleName) into out,
// an existing empty directory. It returns the commit's ID. No credential
// and no network is in the sandbox.
func (sb Sandbox) Commit(ctx context.Context, mirror, base string, patch io.Reader, author Author, message, out string) (string, error) {
	if !IsCommitID(base) {
		return "", fmt.Errorf("git commit: %q is not a commit ID", base)
	}
	switch {
	case strings.TrimSpace(message) == "":
		return "", fmt.Errorf("%w: it is empty", ErrBadMessage)
	case len(message) > maxMessage:
		return "", fmt.Errorf("%w: it is longer than %d bytes", ErrBadMessage, maxMessage)
	case !utf8.ValidString(message) || strings.ContainsRune(message, 0):
		return "", fmt.Errorf("%w: it must be UTF-8 text without NUL", ErrBadMessage)
	}
	who := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || r == '<' || r == '>' {
				return -1
			}
			return r
		}, s)
	}
	name, email := who(author.Name), who(author.Email)
	if name == "" {
		name = "codumentor user"
	}
	env := []string{
		"GIT_AUTHOR_NAME=" + name, "GIT_AUTHOR_EMAIL=" + email,
		"GIT_COMMITTER_NAME=" + name, "GIT_COMMITTER_EMAIL=" + email,
		"CODUMENTOR_MESSAGE=" + message,
	}
	stdout, err := sb.run(ctx, mirror, out, 0, env, patch, "sh", "-c", commitScript, "commit", base)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(stdout)
	if i := strings.LastIndexByte(id, '\n'); i >= 0 {
		id = id[i+1:]
	}
	if !IsCommitID(id) {
		return "", fmt.Errorf("sandboxed git commit: unexpected answer %q", id)
	}
	// The sandbox has ended: nothing changes out any more. The bundle
	// must be a regular file, not a link the host's git would follow.
	if st, err := os.Lstat(filepath.Join(out, BundleName)); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("sandboxed git commit wrote no bundle file (%v)", err)
	}
	return id, nil
}

// serverGit are the options of the server side of a local remote: no
// hooks and no gc. What else the remote's configuration could make it
// run stays in the sandbox, which sees nothing else of the host.
var serverGit = []string{"git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "receive.autogc=false"}

// serve starts the server side of a local remote, the repository dir,
// in a sandbox that sees only dir (read-only unless write) and empty, an
// empty directory: git upload-pack (a fetch) or git receive-pack (a
// push, write set) speaking the pack protocol on stdin and stdout. The
// caller waits for the returned command.
func (sb Sandbox) serve(ctx context.Context, dir, empty string, write bool, stdin *os.File, stdout io.Writer, stderr io.Writer) (*sandboxkit.Cmd, error) {
	in, out, service, at := dir, empty, "upload-pack", "/mirror"
	if write {
		in, out, service, at = empty, dir, "receive-pack", "/out"
	}
	p, err := MirrorPolicy(sb.Settings, in, out)
	if err != nil {
		return nil, err
	}
	p.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0"}
	timeout := sb.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	cmd := sandboxkit.Command(ctx, p, append(append([]string{}, serverGit...), service, "--", at)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Timeout = timeout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}
