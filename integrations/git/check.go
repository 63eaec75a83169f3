package git

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/codumentor/codumentor/agentcore"
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

// CheckURL accepts https://, ssh://, scp-like user@host:path and
// file:///absolute/path URLs, and refuses everything else before any git
// process sees it: anything starting with "-" (an option), remote helpers
// such as ext:: and fd:: (they run commands), other transports and
// spellings that Go and git read differently (file:/x is ssh to host
// "file" for git), control characters and NUL, whitespace, invisible
// characters (bidi controls, zero-width, line separators), hosts or users
// that ssh would take for an option, and credentials: an https URL has
// no userinfo at all, an ssh URL only a user name.
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
	case !utf8.ValidString(raw) || strings.ContainsFunc(raw, func(r rune) bool { return r == ' ' || r == '\t' || invisible(r) }):
		return bad("the URL contains a control character, NUL, whitespace or an invisible character (bidi control, zero-width, line separator)")
	case strings.Contains(raw, "\\"):
		return bad("the URL contains a backslash")
	}
	if scpLike.MatchString(raw) && !strings.Contains(raw, "://") {
		return nil
	}
	// Only the spellings git and net/url read alike: a lower-case scheme
	// and "//" after it (git takes "file:/x" or "https:x" for ssh).
	scheme, _, _ := strings.Cut(raw, "://")
	if scheme != "https" && scheme != "ssh" && scheme != "file" {
		return bad("use https://, ssh://, user@host:path or file:///absolute/path")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("it is not a URL")
	}
	if u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(raw, "?#") {
		return bad("a repository URL has no query or fragment")
	}
	switch u.Scheme {
	case "https", "ssh":
		host := u.Hostname()
		if host == "" || strings.HasPrefix(host, "-") || strings.HasPrefix(u.User.Username(), "-") {
			return bad("the host is missing or starts with '-'")
		}
		_, pw := u.User.Password()
		if u.Scheme == "https" && u.User != nil || pw {
			return bad("put credentials in an instance secret, not in the URL (an https URL has no user@ part, an ssh URL only a user name)")
		}
		return nil
	case "file":
		if u.Host != "" || !strings.HasPrefix(raw, "file:///") || !strings.HasPrefix(u.Path, "/") || u.Path != path.Clean(u.Path) || strings.ContainsFunc(u.Path, invisible) {
			return bad("a file URL is file:///absolute/path (clean: no '..', '.' or '//' parts, no escaped control or invisible characters)")
		}
		return nil
	}
	return bad("use https://, ssh://, user@host:path or file:///absolute/path")
}

// invisible reports a character that displays as nothing or as something
// else, so that a reviewer would not see what git gets: the control,
// format (bidi controls, zero-width characters, BOM), separator and other
// characters agentcore.Invisible names, tab and newline included, and
// spaces other than ASCII's.
func invisible(r rune) bool {
	return r < 0x20 || agentcore.Invisible(r) || r > 0x7f && unicode.Is(unicode.Zs, r)
}

// StripUserinfo returns raw without the credential it carries, for a URL
// stored before CheckURL refused them: an https URL without its userinfo,
// an ssh URL without its password. Anything else is returned unchanged.
func StripUserinfo(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw, false
	}
	switch u.Scheme {
	case "https":
		u.User = nil
	case "ssh":
		if _, set := u.User.Password(); !set {
			return raw, false
		}
		u.User = url.User(u.User.Username())
	default:
		return raw, false
	}
	return u.String(), true
}

// maxBranch bounds a branch name, in bytes.
const maxBranch = 255

// CheckBranch refuses what git check-ref-format --branch refuses, in Go
// (no git runs on the input), and, stricter, every name that git or a
// reader would take for something other than the branch refs/heads/<b>:
// a full or partial ref name ("refs/heads/main" would become
// refs/heads/refs/heads/main, "heads/main" reads as refs/heads/main), a
// refspec's force mark "+", a pseudo-ref such as FETCH_HEAD, an
// abbreviated or full object name, and invisible characters (bidi
// controls, zero-width, line separators).
func CheckBranch(b string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrBadBranch, b, why) }
	switch {
	case b == "":
		return bad("it is empty")
	case len(b) > maxBranch:
		return bad(fmt.Sprintf("it is longer than %d bytes", maxBranch))
	case !utf8.ValidString(b):
		return bad("it is not UTF-8")
	case strings.HasPrefix(b, "-"):
		return bad("it starts with '-'")
	case strings.HasPrefix(b, "+"):
		return bad("it starts with '+' (a refspec's force mark)")
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
	case strings.ContainsFunc(b, func(r rune) bool { return invisible(r) || strings.ContainsRune(" ~^:?*[\\", r) }):
		return bad("it contains a control character, a space, an invisible character (bidi control, zero-width, line separator) or one of ~ ^ : ? * [ \\")
	case hexName.MatchString(b):
		return bad("it looks like an object name")
	}
	first, _, _ := strings.Cut(b, "/")
	if slices.Contains([]string{"refs", "heads", "tags", "remotes", "notes"}, first) {
		return bad("it starts with " + first + "/: name the branch without refs/heads/ (git would read it as another ref)")
	}
	for _, c := range strings.Split(b, "/") {
		if strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".lock") {
			return bad("a component starts with '.' or ends with '.lock'")
		}
		if c == "HEAD" || strings.HasSuffix(c, "_HEAD") && strings.ToUpper(c) == c {
			return bad("a component is HEAD or a pseudo-ref such as FETCH_HEAD")
		}
	}
	return nil
}

// hexName matches what git prints as an abbreviated or full object name.
var hexName = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// commitID is a full SHA-1 or SHA-256 object name.
var commitID = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// IsCommitID reports whether s is a full object name (40 or 64 lowercase
// hex digits), which git cannot read as an option or a revision
// expression.
func IsCommitID(s string) bool { return commitID.MatchString(s) }

// localPath is the directory a file:// URL (one CheckURL accepted) names,
// or "" for any other URL.
func localPath(raw string) string {
	if !strings.HasPrefix(raw, "file:///") {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Path
}
