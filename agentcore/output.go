package agentcore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// A shell command's whole output (up to Config.OutputKeep bytes) is kept
// in its conversation's output area: <layer dir>/output, beside the
// overlay's upper directory. No sandbox mounts it, so it is not in the
// workspace, its diff or its push; it goes when the layer goes (discard,
// deletion, TTL GC). read_file pages a kept output at the workspace path
// outputPrefix + <name>, where name is what the truncated output said.
const outputPrefix = ".codumentor/output/"

// partSuffix marks a kept output still being written.
const partSuffix = ".part"

// outputDirName is the area's directory in the layer directory.
const outputDirName = "output"

// maxOutputName bounds the name of a kept output (the call ID part).
const maxOutputName = 64

// ErrNoOutput is wrapped by read_file's error for an output path that
// names no kept output of this conversation.
var ErrNoOutput = errors.New("no such kept output")

// outputStem is the file name a call ID is kept under: the ID itself if it
// is a short name of letters, digits, '_' and '-', else a digest of it.
// The ID is the model's text, so it never becomes a path as it is.
func outputStem(id string) string {
	if plainName(id, maxOutputName) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "call-" + hex.EncodeToString(sum[:8])
}

// plainName reports whether s is 1 to max letters, digits, '_' and '-'.
func plainName(s string, max int) bool {
	ok := s != "" && len(s) <= max
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	return ok
}

// validOutputName reports whether name can name a kept output: what
// outputStem makes, with an optional "-N" and the ".txt" suffix. Anything
// else (a separator, "..", a NUL) is refused before the area is opened.
func validOutputName(name string) bool {
	stem, ok := strings.CutSuffix(name, ".txt")
	return ok && plainName(stem, maxOutputName+8)
}

// keptOutput is an io.Writer keeping the first max bytes written to it in
// a file of the output area, and counting the rest. A lazy one holds the
// first bytes in memory and makes its file only once they are more than
// a command's output shown whole: most commands never need one.
type keptOutput struct {
	mu      sync.Mutex // a background job's copier writes, its watcher finishes
	f       *os.File   // nil until made
	dir     string     // the area
	name    string     // the file's name in the area
	max     int64
	n       int64 // bytes kept
	dropped int64
	err     error

	// Lazy: create makes the file; buf holds what came before, up to
	// lazy bytes; createErr is create's failure.
	create    func() (*os.File, string, string, error)
	buf       []byte
	lazy      int
	createErr error
}

func (k *keptOutput) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := len(p)
	if k.err != nil || k.createErr != nil {
		return n, nil
	}
	if k.f == nil {
		if len(k.buf)+len(p) <= k.lazy {
			k.buf = appendCapped(k.buf, p, k.lazy)
			return n, nil
		}
		if !k.made() {
			return n, nil
		}
	}
	k.write(p)
	return n, nil
}

// appendCapped appends p to b, growing b to at most limit bytes.
func appendCapped(b, p []byte, limit int) []byte {
	if len(b)+len(p) > cap(b) {
		b = append(make([]byte, 0, min(limit, max(2*cap(b), len(b)+len(p), 512))), b...)
	}
	return append(b, p...)
}

// made makes a lazy output's file, if not yet made, and writes what it
// held to it; false if it could not be made (createErr).
func (k *keptOutput) made() bool {
	if k.f != nil {
		return true
	}
	if k.createErr != nil {
		return false
	}
	f, dir, name, err := k.create()
	if err != nil {
		k.createErr, k.buf = err, nil
		return false
	}
	k.f, k.dir, k.name = f, dir, name
	buf := k.buf
	k.buf = nil
	k.write(buf)
	return true
}

// write writes p to the file, within max.
func (k *keptOutput) write(p []byte) {
	if k.err != nil {
		return
	}
	if room := k.max - k.n; int64(len(p)) > room {
		k.dropped += int64(len(p)) - room
		p = p[:room]
	}
	if len(p) > 0 {
		m, err := k.f.Write(p)
		k.n += int64(m)
		if err != nil {
			k.err = err // the command goes on; the note says the copy is short
		}
	}
}

// reset forgets what was written (a command started again).
func (k *keptOutput) reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.buf = k.buf[:0]
	if k.err == nil && k.f != nil {
		k.err = k.f.Truncate(0)
		k.f.Seek(0, io.SeekStart)
	}
	k.n, k.dropped = 0, 0
}

// discard removes the kept output: the model saw all of it.
func (k *keptOutput) discard() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.buf = nil
	if k.f == nil {
		return
	}
	k.f.Close()
	k.remove()
}

// remove removes the unfinished file.
func (k *keptOutput) remove() {
	if root, err := os.OpenRoot(k.dir); err == nil {
		root.Remove(k.name + partSuffix)
		root.Close()
	}
}

// rename makes the finished file readable under its name.
func (k *keptOutput) rename() error {
	root, err := os.OpenRoot(k.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Rename(k.name+partSuffix, k.name)
}

// path is the kept output's workspace path for read_file.
func (k *keptOutput) path() string { return outputPrefix + k.name }

// finish redacts the kept output of the turn's secrets (read_file pages
// it later, a page at a time, where a secret could cross a page's edge)
// and closes it. margin bytes are dropped from a cut end, so that no
// piece of a secret cut there is left. It returns the note for the
// model.
func (k *keptOutput) finish(red *redactor, margin int) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.made() {
		return "[the whole output could not be kept: " + k.createErr.Error() + "]"
	}
	defer k.f.Close()
	if k.err == nil && red != nil && red.r != nil {
		b := make([]byte, k.n)
		if _, err := k.f.ReadAt(b, 0); err != nil {
			k.err = err
		} else {
			if k.dropped > 0 {
				cut := max(0, len(b)-margin)
				k.dropped += int64(len(b) - cut)
				b = b[:cut]
			}
			b = []byte(red.String(string(b)))
			if err := k.f.Truncate(0); err != nil {
				k.err = err
			} else if _, err := k.f.WriteAt(b, 0); err != nil {
				k.err = err
			}
			k.n = int64(len(b))
		}
	}
	if k.err == nil {
		k.err = k.rename()
	}
	if k.err != nil {
		// Never a half-redacted copy.
		k.f.Truncate(0)
		k.remove()
		return "[the whole output could not be kept; run the command again with less output]"
	}
	if k.dropped > 0 {
		return fmt.Sprintf("[whole output: read_file path %q (its first %s bytes: %s more were not kept)]", k.path(), commas(k.n), commas(k.dropped))
	}
	return fmt.Sprintf("[whole output: read_file path %q]", k.path())
}

// jobKept is the kept output of a background job: finished, with its
// note, once done is closed.
type jobKept struct {
	path string
	done chan struct{}
	note string // set before done is closed
}

// keepJob finishes kept, the output of job id of s, once the job has ended
// and its output is read: redacted, or removed if shell_output shows all
// of it anyway.
func (e *Engine) keepJob(c *Call, s *sandboxkit.Session, id int, kept *keptOutput) {
	jk := &jobKept{path: kept.path(), done: make(chan struct{})}
	cv := e.conv(c.Conversation)
	cv.mu.Lock()
	if cv.jobKept == nil {
		cv.jobKept = map[string]*jobKept{}
	}
	cv.jobKept[fmt.Sprintf("%p/%d", s, id)] = jk
	cv.mu.Unlock()
	var red *redactor
	margin := 0
	if c.turn != nil {
		red, margin = c.turn.red, c.turn.red.longestSpan()
	}
	e.wg.Go(func() {
		defer close(jk.done)
		if err := s.WaitJob(e.ctx, id, math.MaxInt64); err != nil {
			kept.discard() // the server is closing
			jk.note = "[the whole output was not kept: the server stopped first]"
			return
		}
		o, err := s.JobOutput(id)
		if err == nil && !e.newOutput().fits(o.Total) {
			jk.note = kept.finish(red, margin)
			return
		}
		kept.discard()
	})
}

// outputDir opens the conversation's output area, making it if missing.
func (e *Engine) outputDir(conversation string, make bool) (*os.Root, error) {
	l, err := e.layer(conversation)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(l.Dir, outputDirName)
	if make {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			e.log.Error("making the output area failed", "conversation", conversation, "err", err)
			return nil, errors.New("the conversation's output area could not be made; the server log has the details")
		}
	}
	r, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		e.log.Error("opening the output area failed", "conversation", conversation, "err", err)
		return nil, errors.New("the conversation's output area could not be opened; the server log has the details")
	}
	return r, nil
}

// keepOutput returns the writer that keeps the output of call c. Its
// file is made at once when now is set (a background job's, whose path
// is told before it ends), else once the output is more than the model
// is shown whole (see keptOutput).
func (e *Engine) keepOutput(c *Call, now bool) (*keptOutput, error) {
	k := &keptOutput{max: e.cfg.OutputKeep, create: func() (*os.File, string, string, error) { return e.makeKept(c) }}
	if !now {
		out := e.newOutput()
		k.lazy = out.max + out.tail
		return k, nil
	}
	f, dir, name, err := e.makeKept(c)
	if err != nil {
		return nil, err
	}
	k.f, k.dir, k.name = f, dir, name
	return k, nil
}

// makeKept makes the file that keeps the output of call c, first
// dropping the conversation's oldest kept outputs until the area holds at
// most OutputKeepTotal bytes with this one at its largest. It returns
// the file, the area and the file's name.
func (e *Engine) makeKept(c *Call) (*os.File, string, string, error) {
	e.outputMu.Lock()
	defer e.outputMu.Unlock()
	root, err := e.outputDir(c.Conversation, true)
	if err != nil {
		return nil, "", "", err
	}
	defer root.Close()
	if err := pruneOutputs(root, e.cfg.OutputKeepTotal-e.cfg.OutputKeep); err != nil {
		e.log.Error("pruning the output area failed", "conversation", c.Conversation, "err", err)
		return nil, "", "", errors.New("the conversation's output area could not be pruned; the server log has the details")
	}
	stem := outputStem(c.ID)
	for i := 1; i <= 1000; i++ {
		name := stem + ".txt"
		if i > 1 {
			name = fmt.Sprintf("%s-%d.txt", stem, i)
		}
		if _, err := root.Lstat(name); err == nil {
			continue
		}
		// Written as name.part (which read_file never opens) and renamed
		// when finished, redacted.
		f, err := root.OpenFile(name+partSuffix, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			e.log.Error("keeping a command's output failed", "conversation", c.Conversation, "err", err)
			return nil, "", "", errors.New("the command's output could not be kept; the server log has the details")
		}
		return f, root.Name(), name, nil
	}
	return nil, "", "", fmt.Errorf("too many kept outputs for the call ID %q", c.ID)
}

// pruneOutputs removes the oldest files of the area (by modification
// time) until the rest hold at most budget bytes.
func pruneOutputs(root *os.Root, budget int64) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	type kept struct {
		name string
		fi   fs.FileInfo
	}
	var all []kept
	var total int64
	for _, de := range ents {
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		all = append(all, kept{de.Name(), fi})
		total += fi.Size()
	}
	slices.SortFunc(all, func(a, b kept) int { return a.fi.ModTime().Compare(b.fi.ModTime()) })
	for _, k := range all {
		if total <= budget {
			break
		}
		if err := root.Remove(k.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		total -= k.fi.Size()
	}
	return nil
}

// isOutputPath reports whether the cleaned workspace path rel names the
// output area (which read_file serves from the layer, not the view).
func isOutputPath(rel string) bool {
	return strings.HasPrefix(rel+"/", outputPrefix)
}

// openOutput opens the kept output rel (outputPrefix + name) of the
// conversation for read_file.
func (e *Engine) openOutput(conversation, p, rel string) (*os.File, error) {
	name := strings.TrimPrefix(rel, outputPrefix)
	if rel+"/" == outputPrefix || name == "" {
		return nil, fmt.Errorf("%s is the kept-output area; read one output in it, at the path a command's output named", p)
	}
	if !validOutputName(name) {
		return nil, fmt.Errorf("%w: %q is not the name of a kept output; use the path a command's output named", ErrNoOutput, p)
	}
	root, err := e.outputDir(conversation, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (no command of this conversation kept output yet)", ErrNoOutput, p)
	}
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (it may have been dropped: a conversation keeps the newest %d MiB of output)", ErrNoOutput, p, e.cfg.OutputKeepTotal>>20)
	}
	if err != nil {
		return nil, overlay.ViewError(p, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s", ErrNoOutput, p)
	}
	return f, nil
}

var _ io.Writer = (*keptOutput)(nil)
