package retrieval

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/sandboxkit/headtail"
)

// ErrBadCommit refuses a commit argument that is not a full hexadecimal
// object ID: only IDs reach git's argv, never refs or options.
var ErrBadCommit = errors.New("retrieval: not a full commit ID")

// gitCmd is git with a fixed argv over the bare repository gitDir.
func gitCmd(ctx context.Context, gitDir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = git.Env(gitDir)
	cmd.Dir = os.TempDir()
	return cmd
}

// ErrTooManyEntries is wrapped by Ingest's error for a commit past one
// of an ingestion's caps (Options.MaxFiles, Options.MaxBytes, and the
// hard caps on its tree's listing): such a commit cannot be indexed, and
// trying again changes nothing. Its text starts with the error code the
// API shows, too_many_entries.
var ErrTooManyEntries = errors.New("too_many_entries")

// Hard caps on the listing of a commit's tree, whatever Options say: a
// few kilobytes of trees that refer to one subtree over and over list
// billions of paths (a "git bomb").
const (
	// maxListed caps the entries read from one tree's listing (files,
	// symlinks and submodules), or Options.MaxFiles when that is larger.
	maxListed = 1 << 20
	// maxListBytes caps the bytes of the changed paths kept, scaled up
	// with Options.MaxFiles past DefaultMaxFiles.
	maxListBytes = 64 << 20
	// maxRecord caps one entry (a path and its mode and ID), which is
	// read whole in the reader's buffer.
	maxRecord = 64 << 10
)

// listCaps bound one listing: the regular files of the new tree, the
// entries read from each tree and the bytes of the changed paths kept.
type listCaps struct {
	files, entries int
	bytes          int64
}

// capsFor are the caps of a listing under Options o.
func capsFor(o Options) listCaps {
	return listCaps{
		files:   o.MaxFiles,
		entries: max(maxListed, o.MaxFiles),
		bytes:   max(maxListBytes, int64(o.MaxFiles)*(maxListBytes/DefaultMaxFiles)),
	}
}

// change is one path that differs between two commits.
type change struct {
	path    string
	blob    string // "" when the path left the tree (or is no longer a regular file)
	oldGone bool   // the path had an indexed file before
}

// changes lists what differs from from ("" = the empty tree) to to:
// regular files added or modified carry their blob, deleted ones (and
// files that became symlinks or submodules) none. Renames are a deletion
// and an addition.
//
// Both trees are listed by `git ls-tree -r`, which streams (diff-tree
// first queues every changed path in git's memory), and merged here as
// they come, in git's order; git is stopped as soon as a listing is past
// a cap (ErrTooManyEntries). Only the changes are kept.
func changes(ctx context.Context, gitDir, from, to string, caps listCaps) (list []change, err error) {
	if !git.IsCommitID(to) || (from != "" && !git.IsCommitID(from)) {
		return nil, fmt.Errorf("%w: %q..%q", ErrBadCommit, from, to)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops a listing left unfinished
	var old *treeWalk
	if from != "" {
		if old, err = walkTree(ctx, gitDir, from, caps.entries); err != nil {
			return nil, err
		}
		defer func() { err = cmp.Or(err, old.close()) }()
	}
	cur, err := walkTree(ctx, gitDir, to, caps.entries)
	if err != nil {
		return nil, err
	}
	defer func() { err = cmp.Or(err, cur.close()) }()

	var files int
	var size int64
	add := func(c change) error {
		if size += int64(len(c.path)); size > caps.bytes {
			return fmt.Errorf("%w: the changed paths of the commit are longer than %d bytes together", ErrTooManyEntries, caps.bytes)
		}
		list = append(list, c)
		return nil
	}
	a, b := old.next(), cur.next()
	for a != nil || b != nil {
		if err := cmp.Or(old.err(), cur.err()); err != nil {
			return nil, err // one listing ended early: the other's rest is no change
		}
		order := 0
		switch {
		case a == nil:
			order = 1
		case b == nil:
			order = -1
		default:
			order = bytes.Compare(a.path, b.path)
		}
		if order >= 0 && b.regular() {
			if files++; files > caps.files {
				return nil, fmt.Errorf("%w: the commit has more than %d files (retrieval.max_files)", ErrTooManyEntries, caps.files)
			}
		}
		switch {
		case order < 0: // gone
			if a.regular() {
				err = add(change{path: string(a.path), oldGone: true})
			}
		case order > 0: // new
			if b.regular() {
				err = add(change{path: string(b.path), blob: string(b.oid)})
			}
		case a.regular() && b.regular() && bytes.Equal(a.oid, b.oid): // unchanged
		case b.regular():
			err = add(change{path: string(b.path), blob: string(b.oid), oldGone: a.regular()})
		case a.regular(): // now a symlink or submodule
			err = add(change{path: string(a.path), oldGone: true})
		}
		if err != nil {
			return nil, err
		}
		if order <= 0 {
			a = old.next()
		}
		if order >= 0 {
			b = cur.next()
		}
	}
	if err := cmp.Or(old.err(), cur.err()); err != nil {
		return nil, err
	}
	return list, nil
}

// entry is one entry of `git ls-tree -r -z`, its slices valid until the
// next one is read.
type entry struct {
	mode, typ, oid, path []byte
}

// regular reports whether the entry is a regular file (not a symlink,
// whose blob is a path, nor a submodule's commit).
func (e *entry) regular() bool {
	return string(e.typ) == "blob" && (string(e.mode) == "100644" || string(e.mode) == "100755")
}

// treeWalk reads the listing of one commit's tree, "MODE TYPE
// OID\tPATH\0" entries in git's order (bytewise by path), as git writes
// it.
type treeWalk struct {
	cmd     *exec.Cmd
	r       *bufio.Reader
	stderr  *headtail.Buffer
	e       entry
	prev    []byte // the last path, to check the order
	entries int
	max     int // entries
	failed  error
}

func walkTree(ctx context.Context, gitDir, commit string, max int) (*treeWalk, error) {
	w := &treeWalk{cmd: gitCmd(ctx, gitDir, "ls-tree", "-r", "-z", "--full-tree", commit+"^{commit}"), stderr: headtail.New(4096, 0), max: max}
	w.cmd.Stderr = w.stderr
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("retrieval: starting git ls-tree: %w", err)
	}
	w.r = bufio.NewReaderSize(out, maxRecord)
	return w, nil
}

// next returns the next entry, or nil at the end or on an error (err).
// A nil walk has no entries.
func (w *treeWalk) next() *entry {
	if w == nil || w.failed != nil {
		return nil
	}
	rec, err := w.r.ReadSlice(0)
	switch {
	case err == io.EOF && len(rec) == 0:
		w.failed = io.EOF
		return nil
	case err == io.EOF:
		w.failed = errors.New("retrieval: git ls-tree's output ends inside an entry")
		return nil
	case errors.Is(err, bufio.ErrBufferFull):
		w.failed = fmt.Errorf("%w: an entry of the commit's tree is longer than %d bytes", ErrTooManyEntries, w.r.Size())
		return nil
	case err != nil:
		w.failed = fmt.Errorf("retrieval: reading git ls-tree: %w", err)
		return nil
	}
	if w.entries++; w.entries > w.max {
		w.failed = fmt.Errorf("%w: the commit's tree lists more than %d entries", ErrTooManyEntries, w.max)
		return nil
	}
	rec = rec[:len(rec)-1]
	meta, path, ok := bytes.Cut(rec, []byte{'\t'})
	mode, rest, ok1 := bytes.Cut(meta, []byte{' '})
	typ, oid, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok || !ok1 || !ok2 || len(oid) == 0 || len(path) == 0 || bytes.IndexByte(oid, ' ') >= 0 {
		w.failed = fmt.Errorf("retrieval: unexpected git ls-tree entry %q", rec)
		return nil
	}
	if w.entries > 1 && bytes.Compare(path, w.prev) <= 0 {
		// fsck refuses unsorted trees on fetch; the merge depends on it.
		w.failed = fmt.Errorf("retrieval: git ls-tree listed %q after %q", path, w.prev)
		return nil
	}
	w.prev = append(w.prev[:0], path...)
	w.e = entry{mode: mode, typ: typ, oid: oid, path: path}
	return &w.e
}

// err is what ended the listing early, or nil.
func (w *treeWalk) err() error {
	if w == nil || w.failed == io.EOF {
		return nil
	}
	return w.failed
}

// close ends git: killed if its listing was not read to the end.
func (w *treeWalk) close() error {
	if w.failed != io.EOF {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		return nil
	}
	if err := w.cmd.Wait(); err != nil {
		return fmt.Errorf("retrieval: git ls-tree: %v: %s", err, strings.TrimSpace(w.stderr.String()))
	}
	return nil
}

// blobReader reads blobs with `git cat-file --batch`: git reading its own
// object store, nothing parsed but its header.
type blobReader struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *headtail.Buffer
}

func newBlobReader(ctx context.Context, gitDir string, check bool) (*blobReader, error) {
	mode := "--batch"
	if check {
		mode = "--batch-check"
	}
	b := &blobReader{cmd: gitCmd(ctx, gitDir, "cat-file", "--buffer", mode), stderr: headtail.New(4096, 0)}
	b.cmd.Stderr = b.stderr
	var err error
	if b.in, err = b.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	b.out = bufio.NewReaderSize(out, 256<<10)
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("retrieval: starting git cat-file: %w", err)
	}
	return b, nil
}

// header reads one "OID TYPE SIZE" line.
func (b *blobReader) header() (size int64, err error) {
	line, err := b.out.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("retrieval: git cat-file: %w: %s", err, strings.TrimSpace(b.stderr.String()))
	}
	f := strings.Fields(line)
	if len(f) == 2 && f[1] == "missing" {
		return 0, fmt.Errorf("retrieval: object %s is missing from the repository", f[0])
	}
	if len(f) != 3 || f[1] != "blob" {
		return 0, fmt.Errorf("retrieval: unexpected git cat-file header %q", strings.TrimSpace(line))
	}
	return strconv.ParseInt(f[2], 10, 64)
}

// next reads the next object's content when it is at most max bytes;
// a larger one is streamed past, never held in memory (ok false).
func (b *blobReader) next(max int64, buf []byte) (data []byte, size int64, ok bool, err error) {
	size, err = b.header()
	if err != nil {
		return nil, 0, false, err
	}
	if size > max {
		if _, err := io.CopyN(io.Discard, b.out, size+1); err != nil {
			return nil, size, false, fmt.Errorf("retrieval: git cat-file: %w", err)
		}
		return nil, size, false, nil
	}
	if int64(cap(buf)) < size+1 {
		buf = make([]byte, size+1)
	}
	buf = buf[:size+1]
	if _, err := io.ReadFull(b.out, buf); err != nil {
		return nil, size, false, fmt.Errorf("retrieval: git cat-file: %w", err)
	}
	return buf[:size], size, true, nil
}

// close ends git cat-file and reports how it ended.
func (b *blobReader) close() error {
	b.in.Close()
	io.Copy(io.Discard, b.out)
	if err := b.cmd.Wait(); err != nil {
		return fmt.Errorf("retrieval: git cat-file: %v: %s", err, strings.TrimSpace(b.stderr.String()))
	}
	return nil
}

// feed writes the object IDs to git's stdin from a goroutine, so that
// git is never blocked writing while we are blocked writing too.
func (b *blobReader) feed(ids []string) <-chan error {
	done := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(b.in, 64<<10)
		for _, id := range ids {
			if _, err := w.WriteString(id + "\n"); err != nil {
				done <- err
				return
			}
		}
		err := w.Flush()
		if err == nil {
			err = b.in.Close() // --buffer: git writes its last output at the end of input
		}
		done <- err
	}()
	return done
}
