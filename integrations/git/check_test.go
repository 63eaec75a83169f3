package git

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"https://example.com/org/repo.git", true},
		{"ssh://git@example.com:2222/org/repo.git", true},
		{"git@example.com:org/repo.git", true},
		{"file:///srv/git/repo.git", true},
		{"", false},
		{"--upload-pack=touch /tmp/x", false},
		{"-oProxyCommand=touch /tmp/x", false},
		{"ext::sh -c touch% /tmp/x", false},
		{"fd::17", false},
		{"https://example.com/\x00repo", false},
		{"https://example.com/re\npo", false},
		{"http://example.com/repo.git", false},
		{"git://example.com/repo.git", false},
		{"ssh://-oProxyCommand=touch%20x/repo", false},
		{"ssh://-x@example.com/repo", false},
		{"-x", false},
		{"https://user:token@example.com/repo.git", false},
		{"file://host/srv/repo.git", false},
		{"file:relative", false},
		{"/srv/git/repo.git", false},
		{"../repo", false},
		{"-@host:path", false},
		{"user@-host:path", false},
		// Credentials: none in an https URL, only a user name in ssh.
		{"https://TOKEN@example.com/repo.git", false},
		{"https://@example.com/repo.git", false},
		{"https://user:@example.com/repo.git", false},
		{"ssh://git:pw@example.com/repo.git", false},
		// Spellings git and net/url read differently.
		{"file:/etc", false},
		{"file:/srv/git/repo.git", false},
		{"file:srv/repo.git", false},
		{"FILE:///srv/repo.git", false},
		{"HTTPS://example.com/repo.git", false},
		{"https:example.com/repo.git", false},
		{"https:/example.com/repo.git", false},
		{"ssh:/example.com/repo.git", false},
		{"file:///srv/../etc", false},
		{"file:///srv//repo.git", false},
		{"file:///srv/repo.git/", false},
		{"file:///srv/%2e%2e/etc", false},
		{"file:///srv/r%00.git", false},
		{"file:///srv/r%E2%80%AE.git", false},
		{`https://example.com\@evil.example/repo.git`, false},
		{"https://example.com/repo.git?x=1", false},
		{"https://example.com/repo.git#x", false},
		// Invisible characters.
		{"https://example.com/\u202erepo.git", false},
		{"https://example.com/re\u200bpo.git", false},
		{"https://example.com/re\u2028po.git", false},
		{"https://example.com/re\u2066po.git", false},
		{"https://example.com/\ufeffrepo.git", false},
		{"https://example.com/re\u00a0po.git", false},
		{"https://example.com/re\u0085po.git", false},
		{"https://example.com/re\xffpo.git", false},
		{"git@example.com:org/re\u202epo.git", false},
		{"https://example.com/d%C3%A9p%C3%B4t.git", true},
	} {
		err := CheckURL(tt.url)
		if (err == nil) != tt.ok {
			t.Errorf("CheckURL(%q) = %v, want ok=%v", tt.url, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadURL) {
			t.Errorf("CheckURL(%q) = %v, not ErrBadURL", tt.url, err)
		}
	}
}

func TestCheckBranch(t *testing.T) {
	for _, tt := range []struct {
		branch string
		ok     bool
	}{
		{"main", true},
		{"feature/x-1", true},
		{"codumentor/fix.readme", true},
		{"", false},
		{"../x", false},
		{"-x", false},
		{"a\x00b", false},
		{"a b", false},
		{"a..b", false},
		{"a/.hidden", false},
		{"x.lock", false},
		{"a//b", false},
		{"/a", false},
		{"a/", false},
		{"a.", false},
		{"a@{1}", false},
		{"@", false},
		{"HEAD", false},
		{"a~1", false},
		{"a^", false},
		{"a:b", false},
		{"a?", false},
		{"a*", false},
		{"a[", false},
		{`a\b`, false},
		{"a\x7f", false},
		{strings.Repeat("a", 256), false},
		// Names git would read as something else.
		{"refs/heads/main", false},
		{"heads/main", false},
		{"tags/v1", false},
		{"remotes/origin/main", false},
		{"+main", false},
		{"FETCH_HEAD", false},
		{"x/HEAD", false},
		{"deadbeef", false},
		{strings.Repeat("a", 40), false},
		// Invisible characters.
		{"ma\u202ein", false},
		{"a\u200bb", false},
		{"a\u2028b", false},
		{"a\u00a0b", false},
		{"a\xff", false},
		// Still fine.
		{"fix/\u00fcmlaut", true},
		{"a+b", true},
		{"cafe", true},
		{"release/v1.2", true},
		{"user/refs", true},
	} {
		err := CheckBranch(tt.branch)
		if (err == nil) != tt.ok {
			t.Errorf("CheckBranch(%q) = %v, want ok=%v", tt.branch, err, tt.ok)
		}
		// What we accept, git accepts as a branch name too.
		if err == nil {
			if out, err := exec.Command("git", "check-ref-format", "--branch", tt.branch).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != tt.branch {
				t.Errorf("CheckBranch accepts %q, git check-ref-format --branch says %q (%v)", tt.branch, out, err)
			}
		}
	}
}

// recordingGit is a git that records each call in log and runs nothing.
func recordingGit(t *testing.T) (path, log string) {
	t.Helper()
	dir := t.TempDir()
	path, log = filepath.Join(dir, "git"), filepath.Join(dir, "calls")
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> " + log + "\nexit 1\n"
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return path, log
}

// The hostile inputs are refused before any git process starts.
func TestRefusedBeforeGitRuns(t *testing.T) {
	path, log := recordingGit(t)
	g := &Git{Path: path, TempDir: t.TempDir()}
	mirror := filepath.Join(t.TempDir(), "m.git")
	ctx := context.Background()
	for _, tt := range []struct{ url, branch string }{
		{"--upload-pack=touch /tmp/x", "main"},
		{"ext::sh -c touch% /tmp/x", "main"},
		{"-oProxyCommand=touch /tmp/x", "main"},
		{"ssh://-oProxyCommand=touch%20/tmp/x/r", "main"},
		{"file:///srv/r.git", "../x"},
		{"file:///srv/r.git", "-x"},
		{"file:///srv/r\x00.git", "main"},
		{"file:///srv/r.git", "ma\x00in"},
		{"file:/etc", "main"},
		{"https://TOKEN@example.com/r.git", "main"},
		{"https://example.com/\u202er.git", "main"},
		{"file:///srv/r.git", "refs/heads/main"},
		{"file:///srv/r.git", "ma\u200bin"},
	} {
		if _, err := g.Fetch(ctx, mirror, tt.url, tt.branch, nil, nil); !errors.Is(err, ErrBadURL) && !errors.Is(err, ErrBadBranch) {
			t.Errorf("Fetch(%q, %q) = %v, want a refusal", tt.url, tt.branch, err)
		}
		if err := g.Push(ctx, mirror, tt.url, strings.Repeat("a", 40), tt.branch, nil); !errors.Is(err, ErrBadURL) && !errors.Is(err, ErrBadBranch) {
			t.Errorf("Push(%q, %q) = %v, want a refusal", tt.url, tt.branch, err)
		}
	}
	if b, err := os.ReadFile(log); err == nil || len(b) > 0 {
		t.Fatalf("git ran for a refused input: %q (%v)", b, err)
	}
	if _, err := os.Stat(mirror); err == nil {
		t.Fatal("a refused fetch created the mirror")
	}
	// The wrapper does record calls: a good input reaches it.
	g.Fetch(ctx, mirror, "file:///srv/r.git", "main", nil, nil)
	if b, _ := os.ReadFile(log); !strings.Contains(string(b), "init") {
		t.Fatalf("the recording git saw no call for a good input: %q", b)
	}
}

// A credential reaches git only through the fixed helpers, for the one
// command: GIT_ASKPASS answers with the token, GIT_SSH is the ssh helper
// (never GIT_SSH_COMMAND), and the helpers' directory is gone after it.
// The token is redacted from the error.
func TestCredentialHelpers(t *testing.T) {
	dir := t.TempDir()
	path, log := filepath.Join(dir, "git"), filepath.Join(dir, "seen")
	script := `#!/bin/sh
case "$*" in *" fetch --progress"*)
  { printf 'user=%s\n' "$("$GIT_ASKPASS" "Username for 'https://example.com': ")"
    printf 'pass=%s\n' "$("$GIT_ASKPASS" "Password for 'https://u@example.com': ")"
    printf 'ssh=%s sshcmd=%s nosystem=%s global=%s prompt=%s home=%s\n' "$(basename "$GIT_SSH")" "${GIT_SSH_COMMAND-unset}" "$GIT_CONFIG_NOSYSTEM" "$GIT_CONFIG_GLOBAL" "$GIT_TERMINAL_PROMPT" "$HOME"
    printf 'helpers=%s\n' "$(dirname "$GIT_ASKPASS")"
  } > ` + log + `
  echo "fatal: auth failed for s3cr3t-token" >&2; exit 128;;
esac
exit 0
`
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	g := &Git{Path: path, TempDir: tmp}
	_, err := g.Fetch(context.Background(), filepath.Join(dir, "m.git"), "https://example.com/r.git", "main", &Credential{Username: "bot", Password: "s3cr3t-token"}, nil)
	if err == nil || strings.Contains(err.Error(), "s3cr3t-token") || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("Fetch error %v: want the token redacted", err)
	}
	b, _ := os.ReadFile(log)
	seen := string(b)
	for _, want := range []string{"user=bot\n", "pass=s3cr3t-token\n", "ssh=ssh sshcmd=unset nosystem=1 global=/dev/null prompt=0 home=/nonexistent"} {
		if !strings.Contains(seen, want) {
			t.Errorf("git saw %q, missing %q", seen, want)
		}
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("the helpers' directory outlived the command: %v", ents)
	}
}
