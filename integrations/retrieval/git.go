package retrieval

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/codumentor/codumentor/integrations/git"
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
func changes(ctx context.Context, gitDir, from, to string) ([]change, error) {
	if !git.IsCommitID(to) || (from != "" && !git.IsCommitID(from)) {
		return nil, fmt.Errorf("%w: %q..%q", ErrBadCommit, from, to)
	}
	var cmd *exec.Cmd
	if from == "" {
		cmd = gitCmd(ctx, gitDir, "ls-tree", "-r", "-z", "--full-tree", to+"^{commit}")
	} else {
		cmd = gitCmd(ctx, gitDir, "diff-tree", "-r", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", from+"^{commit}", to+"^{commit}")
	}
	stderr := &limitedBuffer{n: 4096}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("retrieval: starting git: %w", err)
	}
	r := bufio.NewReaderSize(out, 64<<10)
	var list []change
	if from == "" {
		list, err = parseLsTree(r)
	} else {
		list, err = parseDiffTree(r)
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("retrieval: git %s: %v: %s", cmd.Args[1], err, stderr)
	}
	return list, nil
}

// regularFile reports whether a tree entry's mode is a regular file
// (not a symlink, whose blob is a path, nor a submodule's commit).
func regularFile(mode string) bool { return mode == "100644" || mode == "100755" }

// parseLsTree reads `git ls-tree -r -z`: "MODE TYPE OID\tPATH\0".
func parseLsTree(r *bufio.Reader) ([]change, error) {
	var out []change
	for {
		rec, err := r.ReadString(0)
		if err == io.EOF && rec == "" {
			return out, nil
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		rec = strings.TrimSuffix(rec, "\x00")
		meta, path, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			return nil, fmt.Errorf("retrieval: unexpected ls-tree line %q", rec)
		}
		if f[1] == "blob" && regularFile(f[0]) {
			out = append(out, change{path: path, blob: f[2]})
		}
	}
}

// parseDiffTree reads `git diff-tree -r -z --no-renames`:
// ":OLDMODE NEWMODE OLDOID NEWOID STATUS\0PATH\0".
func parseDiffTree(r *bufio.Reader) ([]change, error) {
	var out []change
	for {
		meta, err := r.ReadString(0)
		if err == io.EOF && meta == "" {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("retrieval: reading diff-tree: %w", err)
		}
		path, err := r.ReadString(0)
		if err != nil {
			return nil, fmt.Errorf("retrieval: reading diff-tree: %w", err)
		}
		f := strings.Fields(strings.TrimSuffix(meta, "\x00"))
		if len(f) != 5 || !strings.HasPrefix(f[0], ":") {
			return nil, fmt.Errorf("retrieval: unexpected diff-tree line %q", meta)
		}
		oldMode, newMode, newOID := f[0][1:], f[1], f[3]
		c := change{path: strings.TrimSuffix(path, "\x00"), oldGone: regularFile(oldMode)}
		if regularFile(newMode) && f[4] != "D" {
			c.blob = newOID
		}
		if c.blob == "" && !c.oldGone {
			continue // a symlink or submodule came or went: never indexed
		}
		out = append(out, c)
	}
}

// blobReader reads blobs with `git cat-file --batch`: git reading its own
// object store, nothing parsed but its header.
type blobReader struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *limitedBuffer
}

func newBlobReader(ctx context.Context, gitDir string, check bool) (*blobReader, error) {
	mode := "--batch"
	if check {
		mode = "--batch-check"
	}
	b := &blobReader{cmd: gitCmd(ctx, gitDir, "cat-file", "--buffer", mode), stderr: &limitedBuffer{n: 4096}}
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
		return 0, fmt.Errorf("retrieval: git cat-file: %w: %s", err, b.stderr)
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
		return fmt.Errorf("retrieval: git cat-file: %v: %s", err, b.stderr)
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

// limitedBuffer keeps the first n bytes written to it (git's stderr,
// which exec copies from a goroutine of its own).
type limitedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(l.b.String())
}
