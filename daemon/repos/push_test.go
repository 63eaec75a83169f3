package repos

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// patchOf writes the patch of upper's files over lower, as the API does,
// and returns it open at its start with its symlinks leaving the tree.
func patchOf(t *testing.T, dir, lower string, files map[string]string, links map[string]string) (*os.File, []string) {
	t.Helper()
	upper := t.TempDir()
	for name, body := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(upper, name)), 0o755)
		if err := os.WriteFile(filepath.Join(upper, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(upper, name)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := overlay.NewPatch(lower, upper, overlay.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, err := os.CreateTemp(dir, "patch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := p.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	f.Seek(0, 0)
	return f, p.OutsideLinks()
}

// A push whose patch holds the value of one of the user's secrets or of
// the repository's credential, in a form the redactor knows, is refused
// naming file and line, never the value; nothing reaches the remote and
// the audit log says it was refused. Symlinks leaving the tree need the
// user's consent.
func TestPushRefusesSecretsAndOutsideLinks(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(context.Background(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "sandbox: %v", err)
	}
	ctx := context.Background()
	s, q := service(t, Options{})
	url, _ := remote(t)
	bare := strings.TrimPrefix(url, "file://")
	const user = "usr_alice"
	tok := "s3cr3t-value-42"
	long := strings.Repeat("0123456789abcdefghij", 5) // wraps as base64
	if _, err := s.o.Secrets.Put(ctx, user, "MYTOK", tok); err != nil {
		t.Fatal(err)
	}
	if _, err := s.o.Secrets.Put(ctx, user, "LONG", long); err != nil {
		t.Fatal(err)
	}
	pem := "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----"
	if _, err := s.o.Secrets.Put(ctx, user, "PEM", pem); err != nil {
		t.Fatal(err)
	}
	if _, err := s.o.Secrets.Put(ctx, InstanceOwner, "DEPLOY", "bot:ghp_deploytoken123"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Add(ctx, Add{Name: "demo", URL: url, Credential: "DEPLOY"})
	if err != nil {
		t.Fatal(err)
	}
	syncNow(t, s, q, r.ID)
	r, _ = s.Get(ctx, r.ID)
	lower, err := s.Snapshot(ctx, r.ID, r.Head)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := base64.StdEncoding.EncodeToString([]byte(long))
	message := "m"
	push := func(f *os.File, links []string, allow bool, branch string) error {
		_, err := s.Push(ctx, Push{Repository: r.ID, Base: r.Head, Branch: branch, Message: message, Author: git.Author{Name: "Alice", Email: "a@x"},
			User: user, Conversation: "conv_1", Patch: f, OutsideLinks: links, AllowOutsideLinks: allow})
		return err
	}
	for i, tt := range []struct {
		name         string
		files        map[string]string
		file, secret string
		line         int
	}{
		{"plain", map[string]string{"config.env": "a=1\ntoken=" + tok + "\n"}, "config.env", "MYTOK", 2},
		{"base64", map[string]string{"x/y.txt": "one\ntwo\nthree " + base64.StdEncoding.EncodeToString([]byte(tok)) + "\n"}, "x/y.txt", "MYTOK", 3},
		{"wrapped base64", map[string]string{"w.txt": "head\n" + wrapped[:60] + "\n" + wrapped[60:] + "\n"}, "w.txt", "LONG", 2},
		{"hex", map[string]string{"h.txt": "% x\n" + strings.ToUpper(hex.EncodeToString([]byte(tok))) + "\n"}, "h.txt", "MYTOK", 2},
		{"binary", map[string]string{"b.bin": "\x00\x01" + tok + "\x00"}, "b.bin", "MYTOK", 0},
		{"credential token", map[string]string{"README": "push with ghp_deploytoken123\n"}, "README", "the repository's credential DEPLOY (its token)", 1},
		{"file name", map[string]string{"keys/" + tok + ".txt": "x\n"}, "keys/[secret:MYTOK].txt", "MYTOK", 0},
		{"multi-line value", map[string]string{"id_ed25519": "# key\n" + pem + "\n"}, "id_ed25519", "PEM", 2},
		// Its patch line is "+++ ...", which is no file header inside a hunk.
		{"added line starting ++", map[string]string{"notes.txt": "a\n++ " + tok + "\n"}, "notes.txt", "MYTOK", 2},
		{"commit message", map[string]string{"ok.txt": "x\n"}, "", "MYTOK", 0},
	} {
		f, _ := patchOf(t, s.o.Dir, lower, tt.files, nil)
		if message = "m"; tt.name == "commit message" {
			message = "use " + tok
		}
		branch := "codumentor/t" + string(rune('a'+i))
		err := push(f, nil, false, branch)
		var sd *SecretInDiffError
		if !errors.As(err, &sd) || !errors.Is(err, ErrSecretInDiff) {
			t.Errorf("%s: Push = %v, want a SecretInDiffError", tt.name, err)
			continue
		}
		if sd.File != tt.file || sd.Line != tt.line || sd.Secret != tt.secret {
			t.Errorf("%s: refused at %q line %d secret %q, want %q line %d secret %q", tt.name, sd.File, sd.Line, sd.Secret, tt.file, tt.line, tt.secret)
		}
		for _, v := range []string{tok, long, "ghp_deploytoken123"} {
			if strings.Contains(err.Error(), v) {
				t.Errorf("%s: the error shows a value: %v", tt.name, err)
			}
		}
		if out := run(t, bare, "for-each-ref", "--format=%(refname)"); out != "refs/heads/main" {
			t.Errorf("%s: the remote's refs changed: %q", tt.name, out)
		}
	}
	recs, err := audit.List(ctx, s.o.DB, audit.Filter{Kind: audit.KindPush})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 10 {
		t.Fatalf("%d push records, want 10 refusals", len(recs))
	}
	var d map[string]any
	json.Unmarshal(recs[0].Data, &d)
	if d["result"] != "refused" || d["reason"] != "secret_in_diff" || d["file"] != "config.env" || d["line"] != float64(2) || d["secret"] != "MYTOK" {
		t.Errorf("audit record of a refusal: %s", recs[0].Data)
	}
	if strings.Contains(string(recs[0].Data), tok) {
		t.Errorf("the audit record holds the value: %s", recs[0].Data)
	}

	message = "m"
	// A symlink leaving the tree: refused without consent, pushed with it.
	f, links := patchOf(t, s.o.Dir, lower, map[string]string{"ok.txt": "fine\n"}, map[string]string{"passwd": "/etc/passwd", "up": "../../x"})
	if err := push(f, links, false, "codumentor/links"); !errors.Is(err, ErrOutsideLinks) || !strings.Contains(err.Error(), "passwd -> /etc/passwd") || !strings.Contains(err.Error(), "up -> ../../x") {
		t.Fatalf("Push with outside links = %v, want ErrOutsideLinks naming both", err)
	}
	if err := push(f, links, true, "codumentor/links"); err != nil {
		t.Fatal(err)
	}
	if got := run(t, bare, "cat-file", "-p", "codumentor/links:passwd"); got != "/etc/passwd" {
		t.Fatalf("the pushed link is %q", got)
	}
	// A clean patch is pushed.
	f, _ = patchOf(t, s.o.Dir, lower, map[string]string{"clean.txt": "nothing secret\n"}, nil)
	if err := push(f, nil, false, "codumentor/clean"); err != nil {
		t.Fatal(err)
	}
}

// PushWorkspace pushes the workspace's patch only as reviewed (its
// digest), non-empty and within MaxPatchBytes, after the branch and the
// repository are checked; the WorkspacePatch's own errors come back as
// they were. The push's ref leaves the mirror, and when it cannot, the
// push stands and the log says so.
func TestPushWorkspace(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(context.Background(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "sandbox: %v", err)
	}
	ctx := context.Background()
	logs := &sandboxtest.Buffer{}
	s, q := service(t, Options{MaxPatchBytes: 1000, Log: hclog.New(&hclog.LoggerOptions{Output: logs})})
	url, _ := remote(t)
	bare := strings.TrimPrefix(url, "file://")
	r, err := s.Add(ctx, Add{Name: "demo", URL: url})
	if err != nil {
		t.Fatal(err)
	}
	syncNow(t, s, q, r.ID)
	r, _ = s.Get(ctx, r.ID)
	lower, err := s.Snapshot(ctx, r.ID, r.Head)
	if err != nil {
		t.Fatal(err)
	}
	upper := func(files map[string]string) string {
		d := t.TempDir()
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	patchOf := func(upper string) WorkspacePatch {
		return func(max int64) (*overlay.Patch, error) {
			return overlay.NewPatch(lower, upper, overlay.PatchOptions{MaxBytes: max})
		}
	}
	digest := func(upper string) string {
		p, err := overlay.NewPatch(lower, upper, overlay.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		h := sha256.New()
		if _, err := p.WriteTo(h); err != nil {
			t.Fatal(err)
		}
		return hex.EncodeToString(h.Sum(nil))
	}
	push := func(branch, reviewed string, patch WorkspacePatch) (PushResult, error) {
		return s.PushWorkspace(ctx, Push{Repository: r.ID, Base: r.Head, Branch: branch, Message: "m", Author: git.Author{Name: "Alice", Email: "a@x"},
			User: "usr_alice", Conversation: "conv_1"}, reviewed, patch)
	}
	ok := upper(map[string]string{"ok.txt": "fine\n"})
	var notCalled = func(int64) (*overlay.Patch, error) {
		t.Error("the patch was made for a push refused before")
		return nil, nil
	}
	errOwn := errors.New("the workspace is held")
	for _, tt := range []struct {
		name, branch, reviewed string
		patch                  WorkspacePatch
		want                   error
	}{
		{"protected branch", "main", digest(ok), notCalled, ErrProtected},
		{"invalid branch", "-x", digest(ok), notCalled, ErrInvalid},
		{"stale digest", "codumentor/a", digest(upper(map[string]string{"ok.txt": "other\n"})), patchOf(ok), ErrDiffChanged},
		{"no layer", "codumentor/a", emptySHA256, func(int64) (*overlay.Patch, error) { return nil, nil }, ErrEmptyPatch},
		{"no changes", "codumentor/a", emptySHA256, patchOf(t.TempDir()), ErrEmptyPatch},
		{"too large", "codumentor/a", digest(upper(map[string]string{"big.txt": strings.Repeat("x", 2000)})), patchOf(upper(map[string]string{"big.txt": strings.Repeat("x", 2000)})), ErrPatchTooLarge},
		{"its own error", "codumentor/a", digest(ok), func(int64) (*overlay.Patch, error) { return nil, errOwn }, errOwn},
	} {
		_, err := push(tt.branch, tt.reviewed, tt.patch)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: PushWorkspace = %v, want %v", tt.name, err, tt.want)
		}
		var pe *PatchError
		if errors.Is(tt.want, errOwn) && (!errors.As(err, &pe) || pe.Err != errOwn) {
			t.Errorf("%s: PushWorkspace = %#v, want a PatchError of it", tt.name, err)
		}
	}
	if out := run(t, bare, "for-each-ref", "--format=%(refname)"); out != "refs/heads/main" {
		t.Fatalf("the remote's refs changed: %q", out)
	}

	pushRefs := func() string {
		return run(t, s.Mirror(r.ID), "for-each-ref", "--format=%(refname)", "refs/codumentor/")
	}
	res, err := push("codumentor/ok", digest(ok), patchOf(ok))
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, bare, "show", res.Commit+":ok.txt"); got != "fine" {
		t.Fatalf("pushed ok.txt = %q", got)
	}
	if refs := pushRefs(); refs != "" {
		t.Fatalf("push refs left in the mirror: %q", refs)
	}
	// A held packed-refs lock makes git refuse to delete a ref (after
	// core.packedRefsTimeout), not to make one.
	lock := filepath.Join(s.Mirror(r.ID), "packed-refs.lock")
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	more := upper(map[string]string{"more.txt": "more\n"})
	if _, err := push("codumentor/more", digest(more), patchOf(more)); err != nil {
		t.Fatalf("a push whose ref could not be removed: %v", err)
	}
	os.Remove(lock)
	if got := run(t, bare, "show", "codumentor/more:more.txt"); got != "more" {
		t.Fatalf("pushed more.txt = %q", got)
	}
	refs := pushRefs()
	if refs == "" || !strings.Contains(logs.String(), "removing a push's ref from the mirror failed") || !strings.Contains(logs.String(), refs) {
		t.Fatalf("push refs %q; log:\n%s\nwant the ref left and the log naming it", refs, logs.String())
	}
}

// emptySHA256 is the digest of no bytes.
var emptySHA256 = func() string { h := sha256.Sum256(nil); return hex.EncodeToString(h[:]) }()

// Lines are counted on the new side, across hunks and context lines;
// removed lines and the patch's comments are not looked at.
func TestScanPatchLines(t *testing.T) {
	sc := agentcore.NewSecretScanner(map[string]string{"K": "v4lue-k"})
	patch := "# codumentor: a note with v4lue-k\n" +
		"diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n" +
		"@@ -1,2 +1,2 @@\n one\n-v4lue-k was here\n+two\n" +
		"@@ -10,3 +10,4 @@\n ten\n-old\n+new\n eleven\n+the v4lue-k\n twelve\n"
	err := scanPatch(strings.NewReader(patch), sc, 1<<20)
	var sd *SecretInDiffError
	if !errors.As(err, &sd) || sd.File != "a.txt" || sd.Line != 13 || sd.Secret != "K" {
		t.Fatalf("scanPatch = %#v, want a.txt line 13", err)
	}
	clean := strings.Replace(patch, "+the v4lue-k", "+the value", 1)
	if err := scanPatch(strings.NewReader(clean), sc, 1<<20); err != nil {
		t.Fatalf("scanPatch of a patch that only removes the value = %v", err)
	}
}

// Protected branches are refused in any case; names git would read as
// another ref are invalid.
func TestCheckPushBranch(t *testing.T) {
	s := &Service{o: Options{ProtectedBranches: []string{"main", "release/1"}}}
	for b, want := range map[string]error{
		"main": ErrProtected, "MAIN": ErrProtected, "Release/1": ErrProtected,
		"refs/heads/main": ErrInvalid, "+main": ErrInvalid, "heads/main": ErrInvalid,
		"codumentor/x": nil,
	} {
		if err := s.CheckPushBranch(b); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("CheckPushBranch(%q) = %v, want %v", b, err, want)
		}
	}
}
