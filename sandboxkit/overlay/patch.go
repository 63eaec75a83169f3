package overlay

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

const (
	// maxTextSize is the largest file given a line diff. A larger one is
	// written as binary: the line diff holds both versions in memory and
	// its cost grows with their length, and no reader wants such a hunk.
	maxTextSize = 8 << 20
	// binarySniffLen is how much of a file is searched for a NUL byte,
	// git's test for binary content.
	binarySniffLen = 8000
	// contextLines is the context around each hunk, as git writes by default.
	contextLines = 3
	nullHash     = "0000000000000000000000000000000000000000"
)

// DefaultMaxPatchBytes is the byte budget of a patch when PatchOptions
// gives none: how many bytes of file content it may read (to hash, diff
// and deflate), counting each side of a modified file.
const DefaultMaxPatchBytes = 256 << 20

// ErrPatchTooLarge is wrapped by the error of a patch whose files hold
// more bytes than its budget. A sparse file counts with its apparent size:
// `truncate -s 1T f` costs the sandbox no disk, but a patch would read a
// terabyte of zeros.
var ErrPatchTooLarge = errors.New("overlay: the changed files are too large for a patch")

// PatchOptions are the options of NewPatch.
type PatchOptions struct {
	// MaxBytes is the byte budget (DefaultMaxPatchBytes if 0): a patch
	// whose files hold more is refused before anything is written.
	MaxBytes int64
	// Ignore, if set, says which added paths to leave out as ignored
	// (a repository's .gitignore rules, say): they are listed in the
	// patch's "#" lines instead. It is asked about a directory before
	// the entries in it, and not about those of an ignored one; its
	// error fails NewPatch. Deleted and modified paths, which lower
	// has, are never asked about: like tracked files, they are
	// exported whatever the rules say.
	Ignore func(path string, isDir bool) (bool, error)
	// NoteTag, if set, names the writer in the patch's "#" lines, "# TAG:
	// not exported: ...", say a program's name; empty writes "# not
	// exported: ...".
	NoteTag string
}

// WritePatch writes the changes Diff finds as a patch in git's format, so
// that `git apply` onto a copy of lower reproduces the merged view, with
// the default options; see Patch.
func WritePatch(w io.Writer, lower, upper string) error {
	p, err := NewPatch(lower, upper, PatchOptions{})
	if err != nil {
		return err
	}
	defer p.Close()
	_, err = p.WriteTo(w)
	return err
}

// Patch is the changes of an upper layer, checked and ready to be written
// in git's format by WriteTo, so that `git apply` onto a copy of lower
// reproduces the merged view:
//
//   - text files get hunks with 3 lines of context, and "\ No newline at
//     end of file" where one is missing;
//   - binary files (a NUL byte in the first 8000 bytes, or larger than
//     8 MiB) are written whole as a "GIT binary patch" literal, as
//     `git diff --binary` does, because git cannot apply the bare
//     "Binary files a/P and b/P differ" marker;
//   - symlinks are their target text with mode 120000;
//   - an executable bit change is "old mode"/"new mode". git keeps no other
//     permission bits, so a change of those alone (which Diff reports) is
//     left out;
//   - a change of type (file to symlink, file to directory) is a deletion
//     followed by a creation;
//   - directories appear only through the files in them, so an added empty
//     directory is not in the patch; nor are fifos, sockets and devices.
//
// Some changes are left out and listed in "#" comment lines before the
// first file (git apply and patch skip them): paths with a .git component
// in any case (a repository made in the workspace: git apply refuses such
// paths, and patch(1) would write .git/config, whose core.fsmonitor runs
// a command at the user's next git command), added paths that
// PatchOptions.Ignore says are ignored, and files or directories
// their owner cannot read (the sandbox can chmod 000 them). Symlinks whose
// target is absolute or leaves the tree are in the patch, and flagged in
// those comment lines.
//
// Every file has a full "index" line with git's SHA-1 object names, which
// binary patches need and which lets `git apply --3way` fall back to a merge.
// Like Diff, it expects no sandbox to be writing to upper meanwhile.
type Patch struct {
	lower, upper *os.Root
	changes      []Change
	left         int64 // budget left
	notes        []string
	notePrefix   string   // "# " and the NoteTag
	outside      []string // symlinks pointing outside the tree
}

// OutsideLinks lists the patch's symlinks that point outside the tree
// (absolute, or above its root), as "path -> target": a caller that
// applies the patch on a host should ask before it does.
func (p *Patch) OutsideLinks() []string { return slices.Clone(p.outside) }

// NewPatch finds the changes of upper over lower and checks them against
// the budget: past it, it fails with an error wrapping ErrPatchTooLarge
// that names the largest files. Close the Patch after use.
func NewPatch(lower, upper string, opt PatchOptions) (*Patch, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxPatchBytes
	}
	changes, err := diff(lower, upper, opt.MaxBytes)
	if err != nil {
		return nil, err
	}
	p := &Patch{left: opt.MaxBytes, notePrefix: "# "}
	if opt.NoteTag != "" {
		p.notePrefix = "# " + opt.NoteTag + ": "
	}
	if p.lower, err = os.OpenRoot(lower); err != nil {
		return nil, fmt.Errorf("overlay: patch: %w", err)
	}
	if p.upper, err = os.OpenRoot(upper); err != nil {
		p.lower.Close()
		return nil, fmt.Errorf("overlay: patch: %w", err)
	}
	var notGit, unreadable, outside, ignored []string
	var total int64
	var big []sized
	ignoredDirs := map[string]bool{}
	for _, c := range changes {
		if c.Kind == Added && opt.Ignore != nil && gitPrefix(c.Path) == "" {
			if below(ignoredDirs, c.Path) {
				continue // listed at its directory
			}
			skip, err := opt.Ignore(c.Path, c.Dir)
			if err != nil {
				p.Close()
				return nil, fmt.Errorf("overlay: patch: the ignore rules: %w", err)
			}
			if skip {
				if c.Dir {
					ignoredDirs[c.Path] = true
				}
				ignored = append(ignored, quotePath("", c.Path)+dirMark(c.Dir))
				continue
			}
		}
		switch {
		case gitPrefix(c.Path) != "":
			// Listed once, at the .git component: changes come sorted,
			// the directory itself first.
			if g := gitPrefix(c.Path); len(notGit) == 0 || strings.TrimSuffix(notGit[len(notGit)-1], "/") != quotePath("", g) {
				notGit = append(notGit, quotePath("", g)+dirMark(c.Dir || g != c.Path))
			}
			continue
		case c.Unreadable:
			unreadable = append(unreadable, quotePath("", c.Path)+dirMark(c.Dir))
			continue
		case c.Dir:
			continue
		}
		var sides []*os.Root
		if c.Kind != Added {
			sides = append(sides, p.lower)
		}
		if c.Kind != Deleted {
			sides = append(sides, p.upper)
		}
		var files []sized
		readable := true
		for _, r := range sides {
			fi, err := r.Lstat(c.Path)
			switch {
			case err != nil:
				continue // gone: WriteTo says so
			case fi.Mode()&fs.ModeSymlink != 0 && r == p.upper:
				if t, err := r.Readlink(c.Path); err == nil && leavesTree(c.Path, t) {
					outside = append(outside, quotePath("", c.Path)+" -> "+quotePath("", t))
				}
				continue
			case !fi.Mode().IsRegular():
				continue
			case r == p.upper:
				f, err := r.OpenFile(c.Path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
				if errors.Is(err, fs.ErrPermission) {
					readable = false
				} else if err == nil {
					f.Close()
				}
			}
			files = append(files, sized{c.Path, fi})
		}
		if !readable {
			unreadable = append(unreadable, quotePath("", c.Path))
			continue
		}
		for _, f := range files {
			total += f.fi.Size()
		}
		big = append(big, files...)
		p.changes = append(p.changes, c)
	}
	if total > opt.MaxBytes {
		p.Close()
		return nil, tooLarge(total, opt.MaxBytes, big)
	}
	p.note("not exportable (a .git path; export the repository another way)", notGit)
	p.note("not exported: ignored (the repository's .gitignore or .git/info/exclude)", ignored)
	p.note("not exported: unreadable (its owner has no read permission; chmod u+rX it in the workspace)", unreadable)
	p.note("symlinks pointing outside the workspace tree (check before applying)", outside)
	p.outside = outside
	return p, nil
}

// below reports whether a directory above p is in dirs.
func below(dirs map[string]bool, p string) bool {
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		if dirs[d] {
			return true
		}
	}
	return false
}

// Close releases the directories the Patch holds open.
func (p *Patch) Close() error {
	p.lower.Close()
	return p.upper.Close()
}

func dirMark(dir bool) string {
	if dir {
		return "/"
	}
	return ""
}

// gitPrefix returns the part of p up to its first .git component, or ""
// if it has none. A component is .git if a file system where the patch
// may be applied takes it for .git (isDotGit).
func gitPrefix(p string) string {
	end := 0
	for comp := range strings.SplitSeq(p, "/") {
		end += len(comp)
		if isDotGit(comp) {
			return p[:end]
		}
		end++
	}
	return ""
}

// isDotGit reports whether the name comp means .git somewhere: in any
// case; on Windows also with trailing dots and spaces, an alternate data
// stream (".git::$INDEX_ALLOCATION") or as the 8.3 short name GIT~1;
// on HFS+ also with the code points it ignores in names. These are the
// forms git's own core.protectNTFS and core.protectHFS refuse.
func isDotGit(comp string) bool {
	s := strings.Map(func(r rune) rune {
		if hfsIgnored(r) {
			return -1
		}
		return r
	}, comp)
	s, _, _ = strings.Cut(s, ":")
	s = strings.TrimRight(s, ". ")
	return strings.EqualFold(s, ".git") || strings.EqualFold(s, "git~1")
}

// hfsIgnored reports the code points HFS+ leaves out of names (git's
// list in utf8.c, next_hfs_char).
func hfsIgnored(r rune) bool {
	switch {
	case r == 0x200c, r == 0x200d, r == 0x200e, r == 0x200f,
		0x202a <= r && r <= 0x202e,
		0x206a <= r && r <= 0x206f,
		r == 0xfeff:
		return true
	}
	return false
}

// leavesTree reports whether the symlink at p with target t points
// outside the tree: absolute, or above its root.
func leavesTree(p, t string) bool {
	if strings.HasPrefix(t, "/") {
		return true
	}
	j := path.Join(path.Dir(p), t)
	return j == ".." || strings.HasPrefix(j, "../")
}

// maxNoteLines bounds each list of the patch's leading comment.
const maxNoteLines = 50

func (p *Patch) note(title string, paths []string) {
	if len(paths) == 0 {
		return
	}
	p.notes = append(p.notes, p.notePrefix+title+":")
	for i, s := range paths {
		if i == maxNoteLines {
			p.notes = append(p.notes, fmt.Sprintf("#   ... and %d more", len(paths)-i))
			break
		}
		p.notes = append(p.notes, "#   "+s)
	}
}

// sized is a file the patch would read.
type sized struct {
	path string
	fi   fs.FileInfo
}

func tooLarge(total, max int64, files []sized) error {
	slices.SortFunc(files, func(a, b sized) int { return cmp.Compare(b.fi.Size(), a.fi.Size()) })
	var names []string
	for _, f := range files[:min(3, len(files))] {
		s := fmt.Sprintf("%s (%d bytes", quotePath("", f.path), f.fi.Size())
		if st, ok := f.fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 < f.fi.Size()/2 {
			s += fmt.Sprintf(", sparse: %d bytes on disk", st.Blocks*512)
		}
		names = append(names, s+")")
	}
	return fmt.Errorf("%w: they hold %d bytes, more than the patch budget of %d bytes; largest: %s; delete or shrink them in the workspace, or export them another way",
		ErrPatchTooLarge, total, max, strings.Join(names, ", "))
}

// WriteTo writes the patch. It reads the files again as it writes: a file
// that changed meanwhile (a sandbox still running) fails it midway.
func (p *Patch) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	for _, n := range p.notes {
		bw.WriteString(n + "\n")
	}
	for _, c := range p.changes {
		var old, cur *blob
		var err error
		if c.Kind != Added {
			if old, err = p.load(p.lower, c.Path); err != nil {
				return cw.n, err
			}
		}
		if c.Kind != Deleted {
			if cur, err = p.load(p.upper, c.Path); err != nil {
				old.close()
				if errors.Is(err, fs.ErrPermission) {
					// Made unreadable since NewPatch looked.
					fmt.Fprintf(bw, "%snot exported: unreadable: %s\n", p.notePrefix, quotePath("", c.Path))
					continue
				}
				return cw.n, err
			}
		}
		err = writeFilePatch(bw, c.Path, old, cur)
		old.close()
		cur.close()
		if err != nil {
			return cw.n, err
		}
	}
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("overlay: write patch: %w", err)
	}
	return cw.n, nil
}

// load is loadBlob within the budget.
func (p *Patch) load(root *os.Root, name string) (*blob, error) {
	b, err := loadBlob(root, name)
	if err != nil || b == nil {
		return b, err
	}
	if p.left -= b.size; p.left < 0 {
		b.close()
		return nil, fmt.Errorf("%w: %s grew while the patch was written; stop the sandbox and try again", ErrPatchTooLarge, quotePath("", name))
	}
	return b, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// blob is one side of a file's change, as git sees it.
type blob struct {
	mode   string // git's mode: 100644, 100755 or 120000
	data   []byte // the content or symlink target; nil for a big file
	big    *os.File
	size   int64
	binary bool
	hash   string // git's object name
}

func (b *blob) close() {
	if b != nil && b.big != nil {
		b.big.Close()
	}
}

// loadBlob reads the entry at p, or returns nil for one git cannot hold.
func loadBlob(root *os.Root, p string) (*blob, error) {
	fi, err := root.Lstat(p)
	if err != nil {
		return nil, patchErr(p, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := root.Readlink(p)
		if err != nil {
			return nil, patchErr(p, err)
		}
		b := &blob{mode: "120000", data: []byte(target), size: int64(len(target))}
		b.hash = blobHash(bytes.NewReader(b.data), b.size)
		return b, nil
	case !fi.Mode().IsRegular():
		return nil, nil
	}
	b := &blob{mode: "100644"}
	if fi.Mode()&0o100 != 0 { // git's test for executable
		b.mode = "100755"
	}
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, patchErr(p, err)
	}
	// The file opened must be the one examined: not a symlink's target,
	// not a fifo that a still-running sandbox swapped in.
	ofi, err := f.Stat()
	if err != nil || !ofi.Mode().IsRegular() || !os.SameFile(fi, ofi) {
		f.Close()
		return nil, fmt.Errorf("overlay: patch: %s changed while it was read; stop the sandbox and try again", quotePath("", p))
	}
	b.size = ofi.Size()
	if b.size > maxTextSize {
		b.big, b.binary = f, true
		b.hash = blobHash(f, b.size)
		if _, err := f.Seek(0, io.SeekStart); err != nil || b.hash == "" {
			f.Close()
			return nil, fmt.Errorf("overlay: patch: could not read %s whole; stop the sandbox and try again", quotePath("", p))
		}
		return b, nil
	}
	b.data, err = io.ReadAll(io.LimitReader(f, maxTextSize+1))
	f.Close()
	if err != nil {
		return nil, patchErr(p, err)
	}
	if int64(len(b.data)) != b.size {
		return nil, fmt.Errorf("overlay: patch: %s changed while it was read; stop the sandbox and try again", quotePath("", p))
	}
	b.binary = bytes.IndexByte(b.data[:min(len(b.data), binarySniffLen)], 0) >= 0
	b.hash = blobHash(bytes.NewReader(b.data), b.size)
	return b, nil
}

// patchErr words err for the tree-relative path p, without the host path
// an *fs.PathError carries (a patch error may reach an API client).
func patchErr(p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("overlay: patch: %s: %w", quotePath("", p), err)
}

// blobHash returns git's SHA-1 object name for size bytes read from r, or
// "" if r holds fewer.
func blobHash(r io.Reader, size int64) string {
	h := sha1.New()
	h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	if n, err := io.Copy(h, io.LimitReader(r, size)); err != nil || n != size {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

func isSymlink(b *blob) bool { return b.mode == "120000" }

// writeFilePatch writes the patch taking old to cur at path p; either may
// be nil for a file that does not exist on that side.
func writeFilePatch(w *bufio.Writer, p string, old, cur *blob) error {
	switch {
	case old == nil && cur == nil:
		return nil
	case old != nil && cur != nil && isSymlink(old) != isSymlink(cur):
		// git has no in-place type change: remove, then create.
		if err := writeFilePatch(w, p, old, nil); err != nil {
			return err
		}
		return writeFilePatch(w, p, nil, cur)
	case old != nil && cur != nil && old.mode == cur.mode && old.hash == cur.hash:
		return nil // a change git does not record, such as mode 644 to 600
	}
	a, b := quotePath("a/", p), quotePath("b/", p)
	fmt.Fprintf(w, "diff --git %s %s\n", a, b)
	switch {
	case old == nil:
		fmt.Fprintf(w, "new file mode %s\nindex %s..%s\n", cur.mode, nullHash, cur.hash)
	case cur == nil:
		fmt.Fprintf(w, "deleted file mode %s\nindex %s..%s\n", old.mode, old.hash, nullHash)
	case old.mode != cur.mode:
		fmt.Fprintf(w, "old mode %s\nnew mode %s\n", old.mode, cur.mode)
		if old.hash == cur.hash {
			return nil
		}
		fmt.Fprintf(w, "index %s..%s\n", old.hash, cur.hash)
	default:
		fmt.Fprintf(w, "index %s..%s %s\n", old.hash, cur.hash, cur.mode)
	}
	if old != nil && old.binary || cur != nil && cur.binary {
		return writeBinary(w, cur)
	}
	var oldData, curData []byte
	if old != nil {
		oldData = old.data
	}
	if cur != nil {
		curData = cur.data
	}
	if len(oldData) == 0 && len(curData) == 0 {
		return nil // an empty file made or removed: the header says it all
	}
	if strings.Contains(p, " ") {
		// As git does, end a name that has a space with a tab, which
		// marks where the name ends.
		a, b = a+"\t", b+"\t"
	}
	if old == nil {
		a = "/dev/null"
	}
	if cur == nil {
		b = "/dev/null"
	}
	fmt.Fprintf(w, "--- %s\n+++ %s\n", a, b)
	writeHunks(w, string(oldData), string(curData))
	return nil
}

// quotePath writes prefix+p as git does: bare, or, if p has control
// characters, quotes, backslashes or non-ASCII bytes, in double quotes with
// C escapes (octal for non-ASCII, as with core.quotePath).
func quotePath(prefix, p string) string {
	if !strings.ContainsFunc(p, func(r rune) bool {
		return r < 0x20 || r == '"' || r == '\\' || r >= 0x7f
	}) {
		return prefix + p
	}
	var s strings.Builder
	s.WriteString(`"` + prefix)
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '\a':
			s.WriteString(`\a`)
		case '\b':
			s.WriteString(`\b`)
		case '\t':
			s.WriteString(`\t`)
		case '\n':
			s.WriteString(`\n`)
		case '\v':
			s.WriteString(`\v`)
		case '\f':
			s.WriteString(`\f`)
		case '\r':
			s.WriteString(`\r`)
		case '"':
			s.WriteString(`\"`)
		case '\\':
			s.WriteString(`\\`)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&s, `\%03o`, c)
			} else {
				s.WriteByte(c)
			}
		}
	}
	s.WriteString(`"`)
	return s.String()
}

// splitLines cuts s after each newline; the last line may lack one.
func splitLines(s string) []string {
	lines := make([]string, 0, strings.Count(s, "\n")+1)
	for len(s) > 0 {
		i := strings.IndexByte(s, '\n') + 1
		if i == 0 {
			i = len(s)
		}
		lines = append(lines, s[:i])
		s = s[i:]
	}
	return lines
}

// edit is a run of changed lines: a[i1:i2] replaced by b[j1:j2].
type edit struct{ i1, i2, j1, j2 int }

// writeHunks writes the unified diff hunks from old to cur.
func writeHunks(w *bufio.Writer, old, cur string) {
	a, b := splitLines(old), splitLines(cur)
	ids := make(map[string]int)
	intern := func(lines []string) []int {
		out := make([]int, len(lines))
		for i, l := range lines {
			id, ok := ids[l]
			if !ok {
				id = len(ids)
				ids[l] = id
			}
			out[i] = id
		}
		return out
	}
	delA, insB := diffLines(intern(a), intern(b))

	var edits []edit
	for i, j := 0, 0; i < len(a) || j < len(b); {
		if i < len(a) && j < len(b) && !delA[i] && !insB[j] {
			i, j = i+1, j+1
			continue
		}
		e := edit{i1: i, j1: j}
		for i < len(a) && delA[i] {
			i++
		}
		for j < len(b) && insB[j] {
			j++
		}
		e.i2, e.j2 = i, j
		if e.i1 == e.i2 && e.j1 == e.j2 {
			panic("overlay: line diff marks are inconsistent") // diffLines pairs every kept line
		}
		edits = append(edits, e)
	}

	heading, searched := "", -1
	for len(edits) > 0 {
		// A hunk takes the edits whose gaps its context would cover anyway.
		n := 1
		for n < len(edits) && edits[n].i1-edits[n-1].i2 <= 2*contextLines {
			n++
		}
		first, last := edits[0], edits[n-1]
		lead := min(contextLines, first.i1)
		trail := min(contextLines, len(a)-last.i2)
		aStart, aEnd := first.i1-lead, last.i2+trail
		bStart, bEnd := first.j1-lead, last.j2+trail
		// Lines before the previous hunk were searched for it already.
		for l := aStart - 1; l > searched; l-- {
			if h, ok := funcHeading(a[l]); ok {
				heading = h
				break
			}
		}
		searched = aStart - 1
		if heading != "" {
			fmt.Fprintf(w, "@@ -%s +%s @@ %s\n", hunkRange(aStart, aEnd-aStart), hunkRange(bStart, bEnd-bStart), heading)
		} else {
			fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(aStart, aEnd-aStart), hunkRange(bStart, bEnd-bStart))
		}
		pos := aStart
		for _, e := range edits[:n] {
			writeLines(w, ' ', a[pos:e.i1])
			writeLines(w, '-', a[e.i1:e.i2])
			writeLines(w, '+', b[e.j1:e.j2])
			pos = e.i2
		}
		writeLines(w, ' ', a[pos:aEnd])
		edits = edits[n:]
	}
}

// maxHeading is the most bytes of a line git shows as a hunk's heading.
const maxHeading = 80

// funcHeading is what git's default hunk heading (no diff driver in
// .gitattributes) makes of line, if it is one: a line that starts with an
// ASCII letter, '_' or '$', cut to maxHeading bytes, without trailing
// white space. The hunk's heading is the nearest such line before it in
// the old file, so that the patch is the one git diff writes.
func funcHeading(line string) (string, bool) {
	if line == "" {
		return "", false
	}
	if c := line[0]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '$') {
		return "", false
	}
	// git's isspace: no \v or \f.
	h := strings.TrimRight(line[:min(len(line), maxHeading)], " \t\n\r")
	// git diff then cuts the header line where its UTF-8 stops being
	// valid (git's decoder also refuses U+FFFE and U+FFFF).
	for i := 0; i < len(h); {
		r, n := utf8.DecodeRuneInString(h[i:])
		if r == utf8.RuneError && n == 1 || r == 0xFFFE || r == 0xFFFF {
			return h[:i], true
		}
		i += n
	}
	return h, true
}

// hunkRange formats a hunk's line range: 1-based start, and the count
// unless it is 1. An empty range starts at the line before it.
func hunkRange(start, count int) string {
	switch count {
	case 0:
		return strconv.Itoa(start) + ",0"
	case 1:
		return strconv.Itoa(start + 1)
	}
	return strconv.Itoa(start+1) + "," + strconv.Itoa(count)
}

func writeLines(w *bufio.Writer, prefix byte, lines []string) {
	for _, l := range lines {
		w.WriteByte(prefix)
		w.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			w.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// writeBinary writes cur (nil: deleted, so empty) whole as git's binary
// literal: its zlib-deflated bytes in base85, one line per 52 bytes.
func writeBinary(w *bufio.Writer, cur *blob) error {
	var r io.Reader = bytes.NewReader(nil)
	var size int64
	if cur != nil {
		size = cur.size
		r = bytes.NewReader(cur.data)
		if cur.big != nil {
			r = cur.big
		}
	}
	fmt.Fprintf(w, "GIT binary patch\nliteral %d\n", size)
	lines := &base85Lines{w: w}
	zw := zlib.NewWriter(lines)
	// Hash again while copying, so that a file changed since loadBlob
	// hashed it fails here rather than in git apply.
	var h hash.Hash
	if cur != nil {
		h = sha1.New()
		h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
		r = io.TeeReader(r, h)
	}
	n, err := io.Copy(zw, io.LimitReader(r, size))
	if err == nil && n != size {
		err = errors.New("file shrank while it was read")
	}
	if err == nil && h != nil && hex.EncodeToString(h.Sum(nil)) != cur.hash {
		err = errors.New("file changed while it was read")
	}
	if err != nil {
		return fmt.Errorf("overlay: patch: %w; stop the sandbox and try again", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("overlay: patch: %w", err)
	}
	lines.flush()
	w.WriteString("\n")
	return nil
}

// base85Lines writes its input as git's base85 lines: a length character
// ('A'..'Z' for 1..26 bytes, 'a'..'z' for 27..52), then the bytes in groups
// of 4 as 5 base85 digits, the last group padded with zeros.
type base85Lines struct {
	w   *bufio.Writer
	buf [52]byte
	n   int
}

const base85Digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

func (l *base85Lines) Write(p []byte) (int, error) {
	written := len(p)
	for len(p) > 0 {
		c := copy(l.buf[l.n:], p)
		l.n += c
		p = p[c:]
		if l.n == len(l.buf) {
			l.flush()
		}
	}
	return written, nil
}

func (l *base85Lines) flush() {
	if l.n == 0 {
		return
	}
	if l.n <= 26 {
		l.w.WriteByte(byte('A' + l.n - 1))
	} else {
		l.w.WriteByte(byte('a' + l.n - 27))
	}
	for i := 0; i < l.n; i += 4 {
		var group [4]byte
		copy(group[:], l.buf[i:l.n])
		v := uint32(group[0])<<24 | uint32(group[1])<<16 | uint32(group[2])<<8 | uint32(group[3])
		var digits [5]byte
		for d := 4; d >= 0; d-- {
			digits[d] = base85Digits[v%85]
			v /= 85
		}
		l.w.Write(digits[:])
	}
	l.w.WriteByte('\n')
	l.n = 0
}
