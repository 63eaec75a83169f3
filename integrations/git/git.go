// Package git runs the git CLI for Codumentor's repositories, in the two
// places DESIGN §1 allows.
//
// Host-side, git is transport only: it fetches into a bare mirror, pushes
// one commit, and reads its own object store. It is started with a list
// argv (never a shell string), after CheckURL and CheckBranch accepted
// its inputs, with a scrubbed environment (no system or global config, no
// terminal prompt), the protocols limited to https, ssh and file, hooks
// off, objects checked on transfer, no submodule recursion, and ssh
// reached only through a fixed helper named by GIT_SSH (never
// GIT_SSH_COMMAND). Credentials reach git for one command through that
// helper or a fixed GIT_ASKPASS helper, from files in a private directory
// removed when the command ends; no sandbox can see them. A local
// (file://) remote is no exception to "transport only": git would run
// its upload-pack or receive-pack host-side with the remote's own hooks
// and configuration, so that side runs in a sandbox (Git.Sandbox) and
// the host's git reaches it over pipes, with no credential.
//
// Everything that parses a repository's tree (checkout of a snapshot,
// building a commit from a patch) runs inside a sandbox (Sandbox): git
// there reads the mirror read-only and writes one output directory, with
// no network and no credentials. There is never a host-side checkout.
package git

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/headtail"
)

// Git runs host-side git commands. The zero value uses "git" on PATH and
// the system's temporary directory for credential helpers.
type Git struct {
	// Path is the git binary; empty means "git" on PATH.
	Path string
	// TempDir receives each command's private credential directory
	// (0700, removed after it); it must be out of every sandbox's sight.
	// Empty means os.TempDir().
	TempDir string
	// KnownHosts is ssh's known_hosts file (new hosts are added on first
	// use); empty means none is kept.
	KnownHosts string
	// Timeout bounds one command (default 30 minutes).
	Timeout time.Duration
	// Sandbox runs the server side of a local (file://) remote: git
	// upload-pack for a fetch, receive-pack for a push, with hooks off,
	// in a sandbox that sees only the remote's directory (writable for a
	// push only) and no credential. The host's git talks to it over two
	// pipes (git's fd:: transport), so nothing the remote holds (hooks,
	// its configuration, alternates) runs or is read host-side.
	Sandbox Sandbox
}

// Credential is what a remote asks for, given to git for one command.
type Credential struct {
	// Username and Password (an access token) answer https prompts.
	Username, Password string
	// SSHKey is a private key for ssh URLs.
	SSHKey []byte
}

// ParseCredential reads an instance secret's value: a PEM private key
// ("-----BEGIN …") for ssh, "username:token" or a bare token (username
// "git") for https.
func ParseCredential(v string) *Credential {
	if strings.HasPrefix(strings.TrimSpace(v), "-----BEGIN") {
		return &Credential{SSHKey: []byte(strings.TrimSpace(v) + "\n")}
	}
	if u, p, ok := strings.Cut(v, ":"); ok && u != "" {
		return &Credential{Username: u, Password: p}
	}
	return &Credential{Username: "git", Password: v}
}

// configArgs are the -c options of every host-side command.
var configArgs = []string{
	"-c", "protocol.allow=never",
	"-c", "protocol.https.allow=always",
	"-c", "protocol.ssh.allow=always",
	"-c", "protocol.file.allow=always",
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "transfer.fsckObjects=true",
	"-c", "fetch.recurseSubmodules=false",
	"-c", "submodule.recurse=false",
	"-c", "push.recurseSubmodules=no",
	"-c", "credential.helper=",
	"-c", "safe.bareRepository=explicit",
}

// baseEnv is the whole environment of a host-side git: nothing of the
// server's own.
func baseEnv() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/nonexistent",
		"LANG=C",
		"LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_PROTOCOL_FROM_USER=0",
		"GIT_ALLOW_PROTOCOL=https:ssh:file",
		"GCM_INTERACTIVE=never",
		"GIT_NO_REPLACE_OBJECTS=1", // a mirror may have fetched refs/replace/*
		"GIT_ATTR_NOSYSTEM=1",
	}
}

// Env is the whole environment of a host-side git that reads the
// repository gitDir (a bare mirror) by itself: the scrubbed environment
// every host-side git here runs with, plus GIT_DIR.
func Env(gitDir string) []string { return append(baseEnv(), "GIT_DIR="+gitDir) }

// askpass answers git's username and password prompts from the
// environment of the one command it serves.
const askpass = `#!/bin/sh
case "$1" in
[Uu]sername*) printf '%s\n' "$CODUMENTOR_GIT_USERNAME" ;;
*) printf '%s\n' "$CODUMENTOR_GIT_PASSWORD" ;;
esac
`

// sshHelper is GIT_SSH: ssh with no user configuration, no agent, no
// prompts, and only the given key. It is named "ssh" so that git passes
// OpenSSH's options.
const sshHelper = `#!/bin/sh
exec ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none \
  -o IdentityFile="$CODUMENTOR_GIT_SSH_KEY" -o UserKnownHostsFile="$CODUMENTOR_GIT_KNOWN_HOSTS" \
  -o StrictHostKeyChecking=accept-new -o ClearAllForwardings=yes "$@"
`

// Error is a failed git command: what it did and git's last words.
type Error struct {
	Op     string // e.g. "fetch"
	Stderr string // the end of git's stderr, secrets removed
	Err    error
}

func (e *Error) Error() string {
	msg := "git " + e.Op + ": " + e.Err.Error()
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// run runs git with args in gitDir (a bare repository, given with
// --git-dir) and returns its stdout. progress, if set, receives stderr as
// it comes.
func (g *Git) run(ctx context.Context, op, gitDir string, cred *Credential, stdin io.Reader, progress io.Writer, args ...string) ([]byte, error) {
	return g.runFiles(ctx, op, gitDir, cred, stdin, progress, nil, nil, args...)
}

// runFiles is run with files as git's descriptors 3, 4, ... (closed once
// git has started, or failed to) and env's entries overriding the
// scrubbed environment's.
func (g *Git) runFiles(ctx context.Context, op, gitDir string, cred *Credential, stdin io.Reader, progress io.Writer, files []*os.File, extraEnv []string, args ...string) ([]byte, error) {
	defer closeFiles(files)
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	env := baseEnv()
	helpers, err := os.MkdirTemp(g.TempDir, "git-cred-")
	if err != nil {
		return nil, fmt.Errorf("git %s: a private directory for its helpers: %w", op, err)
	}
	defer os.RemoveAll(helpers)
	key := "none"
	if cred != nil && len(cred.SSHKey) > 0 {
		key = filepath.Join(helpers, "key")
		if err := os.WriteFile(key, cred.SSHKey, 0o600); err != nil {
			return nil, fmt.Errorf("git %s: writing the ssh key: %w", op, err)
		}
	}
	for name, body := range map[string]string{"askpass": askpass, "ssh": sshHelper} {
		if err := os.WriteFile(filepath.Join(helpers, name), []byte(body), 0o700); err != nil {
			return nil, fmt.Errorf("git %s: writing its %s helper: %w", op, name, err)
		}
	}
	known := g.KnownHosts
	if known == "" {
		known = "/dev/null"
	}
	env = append(env,
		"GIT_ASKPASS="+filepath.Join(helpers, "askpass"),
		"SSH_ASKPASS="+filepath.Join(helpers, "askpass"),
		"GIT_SSH="+filepath.Join(helpers, "ssh"),
		"GIT_SSH_VARIANT=ssh",
		"CODUMENTOR_GIT_SSH_KEY="+key,
		"CODUMENTOR_GIT_KNOWN_HOSTS="+known,
	)
	var secret []string
	if cred != nil && cred.Password != "" {
		env = append(env, "CODUMENTOR_GIT_USERNAME="+cred.Username, "CODUMENTOR_GIT_PASSWORD="+cred.Password)
		secret = append(secret, cred.Password)
	}
	path := g.Path
	if path == "" {
		path = "git"
	}
	argv := append([]string{}, configArgs...)
	if gitDir != "" {
		argv = append(argv, "--git-dir="+gitDir)
	}
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, path, argv...)
	cmd.Env = append(env, extraEnv...) // os/exec keeps the last of a duplicate
	cmd.Dir = "/"
	cmd.Stdin = stdin
	var stdout bytes.Buffer
	stderr := headtail.New(0, 4<<10)
	cmd.Stdout = &limited{w: &stdout, n: 16 << 20}
	cmd.Stderr = stderr
	if progress != nil {
		cmd.Stderr = io.MultiWriter(stderr, progress)
	}
	// Its own process group, so that a timeout also ends ssh and the
	// remote helpers git started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.ExtraFiles = files
	err = cmd.Start()
	closeFiles(files)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (limit %v)", ctx.Err(), timeout)
		}
		msg := lastLines(stderr.String())
		for _, s := range secret {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
		return nil, &Error{Op: op, Stderr: msg, Err: err}
	}
	return stdout.Bytes(), nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// runLocal runs git with args against the local repository dir, whose
// server side (upload-pack, or receive-pack if write) runs in a sandbox
// (Git.Sandbox); the remote's URL in args is fdRemote, the one protocol
// this command allows. No credential is given to either side.
func (g *Git) runLocal(ctx context.Context, op, gitDir, dir string, write bool, progress io.Writer, args ...string) error {
	empty, err := os.MkdirTemp(g.TempDir, "git-local-")
	if err != nil {
		return fmt.Errorf("git %s: an empty directory for the local remote's sandbox: %w", op, err)
	}
	defer os.RemoveAll(empty)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return &Error{Op: op, Err: errors.New("the file:// URL names no directory")}
	}
	toR, toW, err := os.Pipe() // host git → server
	if err != nil {
		return err
	}
	fromR, fromW, err := os.Pipe() // server → host git
	if err != nil {
		closeFiles([]*os.File{toR, toW})
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The server's stderr is the remote's own words (paths of its
	// alternates, say); git's error says what failed.
	srv, err := g.Sandbox.serve(ctx, dir, empty, write, toR, fromW, nil)
	toR.Close()
	if err != nil {
		closeFiles([]*os.File{toW, fromR, fromW})
		return &Error{Op: op, Err: fmt.Errorf("starting the local remote's sandbox: %w", err)}
	}
	// The server's output reaches fromW through a copy that ends with
	// it; host git sees the end of the stream once fromW is closed.
	served := make(chan error, 1)
	go func() {
		err := srv.Wait()
		fromW.Close()
		served <- err
	}()
	_, err = g.runFiles(ctx, op, gitDir, nil, nil, progress, []*os.File{fromR, toW}, []string{"GIT_ALLOW_PROTOCOL=fd"}, args...)
	if err != nil {
		cancel()
	}
	serr := <-served
	if err == nil && serr != nil {
		err = &Error{Op: op, Err: fmt.Errorf("the local remote's side failed: %w", serr)}
	}
	return err
}

// lastLines is the end of git's stderr b (its last few lines, without
// progress lines) on one line.
func lastLines(b string) string {
	// Progress lines end in \r; keep the last state of each.
	lines := strings.Split(strings.ReplaceAll(b, "\r", "\n"), "\n")
	var keep []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "%") {
			keep = append(keep, l)
		}
	}
	if len(keep) > 5 {
		keep = keep[len(keep)-5:]
	}
	return strings.ToValidUTF8(strings.Join(keep, "; "), "?")
}

// limited writes at most n bytes, then fails.
type limited struct {
	w io.Writer
	n int64
}

func (l *limited) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, errors.New("git wrote more output than expected")
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// progressWriter turns git's --progress lines ("Receiving objects:  45%
// (450/1000)") into calls of f.
type progressWriter struct {
	f    func(done, total int64)
	line []byte
}

var progressLine = regexp.MustCompile(`(Receiving|Resolving) objects:\s+\d+% \((\d+)/(\d+)\)`)

func (p *progressWriter) Write(b []byte) (int, error) {
	for _, c := range b {
		if c != '\r' && c != '\n' {
			if len(p.line) < 256 {
				p.line = append(p.line, c)
			}
			continue
		}
		if m := progressLine.FindSubmatch(p.line); m != nil && string(m[1]) == "Receiving" {
			done, _ := strconv.ParseInt(string(m[2]), 10, 64)
			total, _ := strconv.ParseInt(string(m[3]), 10, 64)
			p.f(done, total)
		}
		p.line = p.line[:0]
	}
	return len(b), nil
}

// Fetch makes gitDir a bare mirror of url's branch: it creates gitDir
// (0700) if missing, fetches refs/heads/<branch> into the same ref
// (forced: the mirror follows the remote), and returns its commit.
// progress, if set, receives the received objects as git reports them.
func (g *Git) Fetch(ctx context.Context, gitDir, url, branch string, cred *Credential, progress func(done, total int64)) (string, error) {
	if err := CheckURL(url); err != nil {
		return "", err
	}
	if err := CheckBranch(branch); err != nil {
		return "", err
	}
	if err := g.Init(ctx, gitDir); err != nil {
		return "", err
	}
	var pw io.Writer
	if progress != nil {
		pw = &progressWriter{f: progress}
	}
	ref := "refs/heads/" + branch
	fetch := func(remote string) []string {
		return []string{"fetch", "--progress", "--no-tags", "--no-recurse-submodules", "--no-write-fetch-head", "--", remote, "+" + ref + ":" + ref}
	}
	var err error
	if dir := localPath(url); dir != "" {
		err = g.runLocal(ctx, "fetch", gitDir, dir, false, pw, fetch(fdRemote)...)
	} else {
		_, err = g.run(ctx, "fetch", gitDir, cred, nil, pw, fetch(url)...)
	}
	if err != nil {
		return "", err
	}
	return g.Commit(ctx, gitDir, ref)
}

// Init creates the bare repository gitDir (0700) unless it exists.
func (g *Git) Init(ctx context.Context, gitDir string) error {
	if _, err := os.Stat(filepath.Join(gitDir, "HEAD")); err == nil {
		return nil
	}
	if err := os.Mkdir(gitDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("git: creating the mirror: %w", err)
	}
	_, err := g.run(ctx, "init", "", nil, nil, nil, "init", "--quiet", "--bare", "--", gitDir)
	return err
}

// Commit returns the commit that rev (a ref name or an object name)
// names in gitDir, or an error if it names none.
func (g *Git) Commit(ctx context.Context, gitDir, rev string) (string, error) {
	if strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, "\x00\n") {
		return "", fmt.Errorf("git: %q is not a revision", rev)
	}
	out, err := g.run(ctx, "rev-parse", gitDir, nil, nil, nil, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("git: %q names no commit of the repository", rev)
	}
	id := strings.TrimSpace(string(out))
	if !IsCommitID(id) {
		return "", fmt.Errorf("git rev-parse: unexpected answer %q", id)
	}
	return id, nil
}

// IsAncestor reports whether commit (a full object name) is reachable
// from refs/heads/<branch> in gitDir (git merge-base --is-ancestor).
func (g *Git) IsAncestor(ctx context.Context, gitDir, commit, branch string) (bool, error) {
	if !IsCommitID(commit) {
		return false, fmt.Errorf("git: %q is not a full commit ID", commit)
	}
	if err := CheckBranch(branch); err != nil {
		return false, err
	}
	_, err := g.run(ctx, "merge-base", gitDir, nil, nil, nil, "merge-base", "--is-ancestor", commit, "refs/heads/"+branch)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return false, nil
	}
	return err == nil, err
}

// Push pushes commit (a full object name) of gitDir to url's branch:
// git push url commit:refs/heads/<branch>, nothing else.
func (g *Git) Push(ctx context.Context, gitDir, url, commit, branch string, cred *Credential) error {
	if err := CheckURL(url); err != nil {
		return err
	}
	if err := CheckBranch(branch); err != nil {
		return err
	}
	if !IsCommitID(commit) {
		return fmt.Errorf("git push: %q is not a commit ID", commit)
	}
	push := func(remote string) []string {
		return []string{"push", "--quiet", "--no-verify", "--", remote, commit + ":refs/heads/" + branch}
	}
	if dir := localPath(url); dir != "" {
		return g.runLocal(ctx, "push", gitDir, dir, true, nil, push(fdRemote)...)
	}
	_, err := g.run(ctx, "push", gitDir, cred, nil, nil, push(url)...)
	return err
}

// fdRemote is the URL of runLocal's remote: git's fd:: transport on the
// descriptors it passes (in, out).
const fdRemote = "fd::3,4"

// FetchBundle fetches the branch head of a bundle file (made by
// Sandbox.Commit) into ref of gitDir and returns its commit.
func (g *Git) FetchBundle(ctx context.Context, gitDir, bundle, ref string) (string, error) {
	if !filepath.IsAbs(bundle) || !strings.HasPrefix(ref, "refs/") || strings.ContainsAny(ref, " \x00") {
		return "", errors.New("git: FetchBundle needs an absolute bundle path and a full ref")
	}
	if _, err := g.run(ctx, "fetch", gitDir, nil, nil, nil, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", bundle, "+"+bundleRef+":"+ref); err != nil {
		return "", err
	}
	return g.Commit(ctx, gitDir, ref)
}

// DeleteRef removes ref from gitDir.
func (g *Git) DeleteRef(ctx context.Context, gitDir, ref string) error {
	_, err := g.run(ctx, "update-ref", gitDir, nil, nil, nil, "update-ref", "-d", "--", ref)
	return err
}
