package repos

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/codumentor/codumentor/agentcore"
)

// ErrSecretInDiff is wrapped by Push's error (a *SecretInDiffError) for a
// patch that holds the value of one of the pushing user's secrets or of
// the repository's credential: nothing is pushed.
var ErrSecretInDiff = errors.New("repos: the patch holds a secret's value")

// SecretInDiffError says where a patch holds a secret's value, never the
// value.
type SecretInDiffError struct {
	// File is the path in the new tree, with any secret value in it
	// redacted; "" for the commit message.
	File string
	// Line is the line of File in the new tree where the value starts;
	// 0 for a binary file or the file's name.
	Line int
	// Secret names the secret ("" if it could not be told apart).
	Secret string
}

func (e *SecretInDiffError) Error() string {
	where := e.File
	if e.Line > 0 {
		where += " line " + strconv.Itoa(e.Line)
	}
	if e.File == "" {
		where = "the commit message"
	}
	what := "a secret"
	if e.Secret != "" {
		what = "secret " + e.Secret
	}
	return fmt.Sprintf("%s: the value of %s is in %s", ErrSecretInDiff, what, where)
}

func (e *SecretInDiffError) Unwrap() error { return ErrSecretInDiff }

// scanPatch reads a unified patch (as overlay.Patch writes it: text hunks
// and "GIT binary patch" literals) and returns a *SecretInDiffError for
// the first value of sc it adds: in an added run of lines (values that
// span lines, such as a PEM key or wrapped base64, included), in a
// binary file's new content, or in a file's name. max bounds one line
// and a binary file's content.
func scanPatch(r io.Reader, sc *agentcore.SecretScanner, max int64) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		file   string
		line   int      // the next new-side line number
		block  []string // the current run of added lines
		starts []int    // their line numbers
		binary int      // 0: none; 1: want the forward literal's header; 2: in its data; 3: past it
		data   []string // the forward literal's base85 lines
		size   int64
	)
	found := func(name string, at int) error {
		return &SecretInDiffError{File: sc.Redact(file), Line: at, Secret: name}
	}
	flush := func() error {
		if len(block) == 0 {
			return nil
		}
		defer func() { block, starts = block[:0], starts[:0] }()
		if _, ok := sc.Find(strings.Join(block, "\n")); !ok {
			return nil
		}
		// The first match ends in the shortest prefix that holds one and
		// starts in the shortest suffix of that prefix that still does.
		end := sort.Search(len(block), func(k int) bool { _, ok := sc.Find(strings.Join(block[:k+1], "\n")); return ok })
		start := sort.Search(end+1, func(j int) bool { _, ok := sc.Find(strings.Join(block[j:end+1], "\n")); return !ok }) - 1
		start = max0(start)
		name, _ := sc.Find(strings.Join(block[start:end+1], "\n"))
		return found(name, starts[start])
	}
	// literal checks the forward binary literal read so far.
	literal := func() error {
		binary = 3
		content, err := inflateBase85(data, size)
		if err != nil {
			return err
		}
		if name, ok := sc.Find(string(content)); ok {
			return found(name, 0)
		}
		return nil
	}
	for {
		raw, err := br.ReadString('\n')
		if int64(len(raw)) > max {
			return fmt.Errorf("repos: a line of the patch is longer than %d bytes", max)
		}
		if raw == "" && err != nil {
			if err == io.EOF && binary == 2 {
				return literal()
			}
			if err == io.EOF {
				return flush()
			}
			return err
		}
		l := strings.TrimSuffix(raw, "\n")
		switch {
		case binary == 1 && strings.HasPrefix(l, "literal "):
			n, perr := strconv.ParseInt(strings.TrimPrefix(l, "literal "), 10, 64)
			if perr != nil || n < 0 || n > max {
				return fmt.Errorf("repos: a binary literal of the patch has a bad size %q", l)
			}
			binary, size, data = 2, n, data[:0]
			continue
		case binary == 2 && l != "":
			data = append(data, l)
			continue
		case binary == 2:
			if err := literal(); err != nil {
				return err
			}
			continue
		case binary == 3 && !strings.HasPrefix(l, "diff --git "):
			continue
		// In a hunk (line > 0) every line is one of its own, "+++ x" (an
		// added "++ x") too: a file's headers follow its "diff --git"
		// line, which sets line to 0.
		case strings.HasPrefix(l, "+") && line > 0:
			block, starts = append(block, l[1:]), append(starts, line)
			line++
			continue
		case strings.HasPrefix(l, " ") && line > 0:
			line++
		case (strings.HasPrefix(l, "-") || strings.HasPrefix(l, `\`)) && line > 0:
			// Not in the new tree (a removed line, or the mark of a
			// missing newline): the added run goes on past it.
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(l, "diff --git "):
			file, line, binary = diffPath(l), 0, 0
		case strings.HasPrefix(l, "+++ "):
			if p := strings.TrimPrefix(l, "+++ "); p != "/dev/null" {
				file = stripSide(p, "b/")
			}
		case strings.HasPrefix(l, "@@ "):
			line = hunkStart(l)
		case l == "GIT binary patch":
			binary = 1
		}
		// A header names files: the name itself is pushed.
		if line == 0 && !strings.HasPrefix(l, "#") {
			if name, ok := sc.Find(l); ok {
				return found(name, 0)
			}
		}
	}
}

func max0(i int) int {
	if i < 0 {
		return 0
	}
	return i
}

// diffPath is the b-side path of a "diff --git a/X b/Y" line.
func diffPath(l string) string {
	rest := strings.TrimPrefix(l, "diff --git ")
	if i := strings.LastIndex(rest, ` "b/`); i >= 0 {
		return stripSide(rest[i+1:], "b/")
	}
	if i := strings.LastIndex(rest, " b/"); i >= 0 {
		return rest[i+3:]
	}
	return rest
}

// stripSide removes git's a/ or b/ prefix from a path, unquoting it.
func stripSide(p, side string) string {
	if strings.HasPrefix(p, `"`) {
		if u, err := strconv.Unquote(p); err == nil {
			p = u
		}
	}
	return strings.TrimPrefix(p, side)
}

// hunkStart is the new side's first line of a hunk header "@@ -a,b +c,d
// @@" (1 for an empty new side, so that counting stays positive).
func hunkStart(l string) int {
	_, after, ok := strings.Cut(l, " +")
	if !ok {
		return 1
	}
	n, _, _ := strings.Cut(after, " ")
	n, _, _ = strings.Cut(n, ",")
	v, err := strconv.Atoi(n)
	if err != nil || v < 1 {
		return 1
	}
	return v
}

// base85 is git's base85 alphabet.
const base85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// inflateBase85 decodes a binary literal's lines (a length character,
// then base85 groups of 5) and inflates them to at most size bytes.
func inflateBase85(lines []string, size int64) ([]byte, error) {
	bad := errors.New("repos: a binary literal of the patch is not git's base85")
	var z []byte
	for _, l := range lines {
		if len(l) < 6 {
			return nil, bad
		}
		var n int
		switch c := l[0]; {
		case 'A' <= c && c <= 'Z':
			n = int(c-'A') + 1
		case 'a' <= c && c <= 'z':
			n = int(c-'a') + 27
		default:
			return nil, bad
		}
		enc := l[1:]
		if len(enc)%5 != 0 || len(enc)/5*4 < n {
			return nil, bad
		}
		var out []byte
		for i := 0; i < len(enc); i += 5 {
			var v uint64
			for _, c := range []byte(enc[i : i+5]) {
				d := strings.IndexByte(base85, c)
				if d < 0 {
					return nil, bad
				}
				v = v*85 + uint64(d)
			}
			if v > 0xffffffff {
				return nil, bad
			}
			out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
		}
		z = append(z, out[:n]...)
	}
	zr, err := zlib.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, bad
	}
	defer zr.Close()
	content, err := io.ReadAll(io.LimitReader(zr, size+1))
	if err != nil || int64(len(content)) != size {
		return nil, fmt.Errorf("repos: a binary literal of the patch does not inflate to its %d bytes", size)
	}
	return content, nil
}
