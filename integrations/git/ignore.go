package git

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// Bounds of the ignore rules one Ignore reads: they are the workspace's
// content, written by whoever wrote the repository or by the agent.
const (
	maxIgnoreFileBytes  = 1 << 20  // one .gitignore or info/exclude
	maxIgnoreTotalBytes = 16 << 20 // all of them
	maxIgnoreFiles      = 4096     // .gitignore files read
	maxIgnoreDirs       = 1 << 18  // directories looked into
	// maxIgnoreWork bounds the pattern matches of all questions asked,
	// so that many patterns times many paths cannot hold the caller.
	maxIgnoreWork = 100_000_000
)

// ErrIgnoreLimit is wrapped by Ignored's error when the work tree's ignore
// rules are over a bound (too large, too many .gitignore files, too much
// matching work): the answer would be a guess, so there is none.
var ErrIgnoreLimit = errors.New("git: the ignore rules are over their limits")

// Ignore answers which paths of a work tree its repository ignores, as
// git does for untracked files: the patterns of .git/info/exclude and of
// the .gitignore in every directory from the root down (a deeper one, and
// a later line, taking precedence; "!" negations), and nothing inside an
// ignored directory can be re-included. It reads those files from fsys,
// the work tree (nothing else: no core.excludesFile, no configuration),
// bounded, and only the ones on the paths it is asked about. Symlinked
// .gitignore files are not followed, as git does not; that is fsys's to
// refuse. The matching is go-git's; an Ignore is not safe for concurrent
// use.
type Ignore struct {
	fsys     fs.FS
	patterns map[string][]rule // by directory ("" the root)
	ignored  map[string]bool   // directories' answers
	files    int
	bytes    int64
	work     int64
}

// NewIgnore returns the Ignore of the work tree fsys.
func NewIgnore(fsys fs.FS) *Ignore {
	return &Ignore{fsys: fsys, patterns: map[string][]rule{}, ignored: map[string]bool{}}
}

// Ignored reports whether name (slash-separated, relative to the work
// tree's root; a directory if isDir) is ignored. Its error wraps
// ErrIgnoreLimit, or is one reading an ignore file.
func (ig *Ignore) Ignored(name string, isDir bool) (bool, error) {
	name = path.Clean(name)
	if name == "." || name == "" || strings.HasPrefix(name, "../") || name == ".." || path.IsAbs(name) {
		return false, nil
	}
	parts := strings.Split(name, "/")
	// git does not look inside an ignored directory: nothing in it is
	// re-included, whatever the patterns below say.
	for i := 1; i < len(parts); i++ {
		ok, err := ig.dirIgnored(parts[:i])
		if err != nil || ok {
			return ok, err
		}
	}
	if isDir {
		return ig.dirIgnored(parts)
	}
	return ig.match(parts, false)
}

func (ig *Ignore) dirIgnored(parts []string) (bool, error) {
	key := strings.Join(parts, "/")
	if v, ok := ig.ignored[key]; ok {
		return v, nil
	}
	if len(ig.ignored) >= maxIgnoreDirs {
		return false, fmt.Errorf("%w: more than %d directories", ErrIgnoreLimit, maxIgnoreDirs)
	}
	v, err := ig.match(parts, true)
	if err != nil {
		return false, err
	}
	ig.ignored[key] = v
	return v, nil
}

// match matches parts against the patterns of its parent directory and
// above, the last matching one deciding.
func (ig *Ignore) match(parts []string, isDir bool) (bool, error) {
	ps, err := ig.dirPatterns(parts[:len(parts)-1])
	if err != nil {
		return false, err
	}
	if ig.work += int64(len(ps)) * int64(len(parts)); ig.work > maxIgnoreWork {
		return false, fmt.Errorf("%w: matching them takes more than %d steps", ErrIgnoreLimit, maxIgnoreWork)
	}
	scratch := make([]string, 0, len(parts))
	for i := len(ps) - 1; i >= 0; i-- {
		if m := ps[i].match(parts, isDir, scratch); m != gitignore.NoMatch {
			return m == gitignore.Exclude, nil
		}
	}
	return false, nil
}

// rule is one pattern of an ignore file. go-git's patterns also match a
// path below what they name (a name pattern any component, "a/b" a/b/c):
// git's hierarchy, which Ignored follows, answers for the parents, so a
// rule only matches what it names. And "x/**" is everything below x,
// not x, which go-git matches too.
type rule struct {
	p      gitignore.Pattern
	domain int  // components of the ignore file's directory
	name   bool // no "/" but a trailing one: matched against the base name
	below  bool // ends in "/**"
}

// match matches parts; scratch is room for a path as long (go-git keeps
// no path it is given).
func (r rule) match(parts []string, isDir bool, scratch []string) gitignore.MatchResult {
	if len(parts) <= r.domain {
		return gitignore.NoMatch
	}
	if r.name {
		return r.p.Match(append(append(scratch[:0], parts[:r.domain]...), parts[len(parts)-1]), isDir)
	}
	m := r.p.Match(parts, isDir)
	if m == gitignore.NoMatch {
		return m
	}
	parent := len(parts)-1 > r.domain && r.p.Match(parts[:len(parts)-1], true) != gitignore.NoMatch
	if parent != r.below {
		return gitignore.NoMatch // it named the parent; or, for x/**, x itself
	}
	return m
}

// dirPatterns are the patterns that apply in directory dir: its parent's
// and then its own .gitignore's (at the root, .git/info/exclude's first).
func (ig *Ignore) dirPatterns(dir []string) ([]rule, error) {
	key := strings.Join(dir, "/")
	if ps, ok := ig.patterns[key]; ok {
		return ps, nil
	}
	var ps []rule
	if len(dir) == 0 {
		ex, err := ig.read(".git/info/exclude", nil)
		if err != nil {
			return nil, err
		}
		ps = ex
	} else {
		parent, err := ig.dirPatterns(dir[:len(dir)-1])
		if err != nil {
			return nil, err
		}
		ps = parent
	}
	own, err := ig.read(path.Join(append(slices.Clone(dir), ".gitignore")...), dir)
	if err != nil {
		return nil, err
	}
	// A copy: the parent's slice is shared by its other children.
	ps = append(slices.Clip(ps), own...)
	ig.patterns[key] = ps
	return ps, nil
}

// read parses one ignore file; a missing one (or one fsys refuses as
// not a regular file) has no patterns.
func (ig *Ignore) read(name string, domain []string) ([]rule, error) {
	f, err := ig.fsys.Open(name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("git: reading the ignore rules of %s: %w", name, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, nil
	} else if st.Size() > maxIgnoreFileBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrIgnoreLimit, name, maxIgnoreFileBytes)
	}
	if ig.files++; ig.files > maxIgnoreFiles {
		return nil, fmt.Errorf("%w: more than %d ignore files", ErrIgnoreLimit, maxIgnoreFiles)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxIgnoreFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("git: reading the ignore rules of %s: %w", name, err)
	}
	if len(b) > maxIgnoreFileBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrIgnoreLimit, name, maxIgnoreFileBytes)
	}
	if ig.bytes += int64(len(b)); ig.bytes > maxIgnoreTotalBytes {
		return nil, fmt.Errorf("%w: more than %d bytes of ignore files", ErrIgnoreLimit, maxIgnoreTotalBytes)
	}
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // git skips a BOM
	var ps []rule
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		body := strings.TrimSuffix(strings.TrimPrefix(strings.TrimRight(line, " "), "!"), "/")
		ps = append(ps, rule{p: gitignore.ParsePattern(line, domain), domain: len(domain), name: !strings.Contains(body, "/"), below: strings.HasSuffix(body, "/**")})
	}
	return ps, nil
}
