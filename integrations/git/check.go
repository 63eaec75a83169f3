package git

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

var (
	// ErrBadURL is wrapped by CheckURL's errors: a repository URL git
	// must never be given.
	ErrBadURL = errors.New("git: refused repository URL")
	// ErrBadBranch is wrapped by CheckBranch's errors.
	ErrBadBranch = errors.New("git: refused branch name")
)

// maxURL bounds a repository URL, in bytes.
const maxURL = 2048

// scpLike is git's scp-like syntax user@host:path, with a user and a
// host that cannot be taken for options; git reads it as ssh.
var scpLike = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*@[A-Za-z0-9][A-Za-z0-9.-]*:([^/:]|/[^/]).*$`)

// CheckURL accepts https://, ssh://, scp-like user@host:path and file://
// URLs, and refuses everything else before any git process sees it:
// anything starting with "-" (an option), remote helpers such as ext::
// and fd:: (they run commands), other transports, control characters and
// NUL, whitespace, and hosts or users that ssh would take for an option.
func CheckURL(raw string) error {
	bad := func(why string) error { return fmt.Errorf("%w: %s", ErrBadURL, why) }
	switch {
	case raw == "":
		return bad("the URL is empty")
	case len(raw) > maxURL:
		return bad(fmt.Sprintf("the URL is longer than %d bytes", maxURL))
	case strings.HasPrefix(raw, "-"):
		return bad("a URL cannot start with '-' (git would read it as an option)")
	case strings.Contains(raw, "::"):
		return bad("remote helpers (transport::address, such as ext:: or fd::) are not allowed")
	case strings.ContainsFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ' ' || r == '\t' }):
		return bad("the URL contains a control character, NUL or whitespace")
	}
	if scpLike.MatchString(raw) && !strings.Contains(raw, "://") {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("it is not a URL")
	}
	switch u.Scheme {
	case "https", "ssh":
		host := u.Hostname()
		if host == "" || strings.HasPrefix(host, "-") || strings.HasPrefix(u.User.Username(), "-") {
			return bad("the host is missing or starts with '-'")
		}
		if _, set := u.User.Password(); set {
			return bad("put credentials in an instance secret, not in the URL")
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return bad("a repository URL has no query or fragment")
		}
		return nil
	case "file":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") || u.RawQuery != "" || u.Fragment != "" {
			return bad("a file URL is file:///absolute/path")
		}
		return nil
	}
	return bad("use https://, ssh://, user@host:path or file://")
}

// maxBranch bounds a branch name, in bytes.
const maxBranch = 255

// CheckBranch refuses what git check-ref-format --branch refuses, in Go:
// no git runs on the input.
func CheckBranch(b string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrBadBranch, b, why) }
	switch {
	case b == "":
		return bad("it is empty")
	case len(b) > maxBranch:
		return bad(fmt.Sprintf("it is longer than %d bytes", maxBranch))
	case strings.HasPrefix(b, "-"):
		return bad("it starts with '-'")
	case b == "@" || b == "HEAD":
		return bad("it is a reserved name")
	case strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") || strings.Contains(b, "//"):
		return bad("it starts or ends with '/', or has '//'")
	case strings.HasSuffix(b, "."):
		return bad("it ends with '.'")
	case strings.Contains(b, ".."):
		return bad("it contains '..'")
	case strings.Contains(b, "@{"):
		return bad("it contains '@{'")
	case strings.ContainsFunc(b, func(r rune) bool {
		return r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r)
	}):
		return bad("it contains a control character, a space or one of ~ ^ : ? * [ \\")
	}
	for _, c := range strings.Split(b, "/") {
		if strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".lock") {
			return bad("a component starts with '.' or ends with '.lock'")
		}
	}
	return nil
}

// commitID is a full SHA-1 or SHA-256 object name.
var commitID = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// IsCommitID reports whether s is a full object name (40 or 64 lowercase
// hex digits), which git cannot read as an option or a revision
// expression.
func IsCommitID(s string) bool { return commitID.MatchString(s) }
