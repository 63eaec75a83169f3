package agentcore

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"golang.org/x/sys/unix"
)

// ErrOutsideWorkspace is wrapped by a file tool's error for a path that
// is absolute, escapes with "..", or goes through a symlink that leaves
// the workspace. Such paths are refused before any I/O on them.
var ErrOutsideWorkspace = errors.New("path leaves the workspace")

// maxSymlinks bounds the symlinks followed while resolving one path.
const maxSymlinks = 40

// cleanRel checks a path the model gave, lexically, before anything
// touches the file system: it must be relative to /workspace and stay
// inside it. "" and "." name the workspace root.
func cleanRel(p string) (string, error) {
	switch {
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("%w: %q is absolute; give a path relative to the workspace root /workspace, e.g. \"src/main.go\"", ErrOutsideWorkspace, p)
	}
	c := path.Clean("/" + p)[1:] // "/.." cleans to "/": compare the unrooted form too
	if u := path.Clean(p); u == ".." || strings.HasPrefix(u, "../") {
		return "", fmt.Errorf("%w: %q goes above the workspace root with \"..\"", ErrOutsideWorkspace, p)
	}
	return c, nil // "" is the root
}

// view is the merged view of a workspace as overlayfs shows it at
// /workspace: upper over lower, where a whiteout in upper (a 0/0
// character device) deletes the lower entry and an opaque upper
// directory (xattr user.overlay.opaque=y, the userxattr form used in a
// user namespace) hides the lower directory below it. It reads the layer
// directories from the host: file tools are trusted server code (DESIGN
// §1), confined by resolving every path inside the view first.
//
// The sandbox runs while the view is read and can swap any directory
// for a symlink at any moment (renameat2 RENAME_EXCHANGE), so nothing
// is ever resolved by path below a layer's root: the view walks by
// descriptor, opening one component at a time with O_NOFOLLOW|O_DIRECTORY
// and stat-ing, reading links and opening files relative to the parent's
// descriptor. A swap then makes the walk fail; it never leads it out.
// Errors name workspace paths only, never a host path.
type view struct {
	lower, upper string
	// mid are read-only layers between upper and lower, top first: an
	// isolated subagent's view stacks its own upper on its parent's
	// upper and lower.
	mid []string
}

// layers are v's layer directories, top (upper) first.
func (v *view) layers() []string {
	return append(append([]string{v.upper}, v.mid...), v.lower)
}

// entry is a path found in the view.
type entry struct {
	fi fs.FileInfo
	// layer is the index of the layer it lives in (0: upper).
	layer int
	// shows, for a directory, marks the layers (layer and below) that
	// have a real directory here, which merge unless a higher one of
	// them is opaque.
	shows []bool
}

func (e entry) isLink() bool { return e.fi.Mode()&fs.ModeSymlink != 0 }

// mdir is a directory of the merged view, open in each layer whose
// directory at its path shows through (dirs[i] for layer i, nil where
// none does). Close it after use.
type mdir struct {
	rel  string // its workspace path, for messages
	dirs []*os.File
}

func (d *mdir) close() {
	if d == nil {
		return
	}
	for _, f := range d.dirs {
		if f != nil {
			f.Close()
		}
	}
}

// maxDepth bounds how deep a walk descends (each level holds two
// descriptors open).
const maxDepth = 128

// wsErr words err for the model: the workspace path rel and the bare
// error, without the host path an *fs.PathError carries.
func wsErr(rel string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	return fmt.Errorf("%s: %w", show(rel), err)
}

// errChanged reports a directory that stopped being one between its stat
// and its open: the sandbox is changing the tree.
func errChanged(rel string) error {
	return fmt.Errorf("%s changed while it was read (the sandbox is changing it); try again", show(rel))
}

// statInfo is an fs.FileInfo made from a stat taken by descriptor.
type statInfo struct {
	name string
	st   unix.Stat_t
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (s *statInfo) Sys() any           { return &s.st }
func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if s.st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func isOpaque(f *os.File) bool {
	var buf [4]byte
	n, err := unix.Fgetxattr(int(f.Fd()), "user.overlay.opaque", buf[:])
	return err == nil && string(buf[:n]) == "y"
}

// statAt stats name in the directory f without following a symlink; ok
// is false if there is no such entry.
func statAt(f *os.File, name string) (st *statInfo, ok bool, err error) {
	st = &statInfo{name: name}
	err = unix.Fstatat(int(f.Fd()), name, &st.st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return st, true, nil
}

// openDirAt opens the directory name in f, refusing a symlink. rel names
// it in the new *os.File, so that its errors carry no host path.
func openDirAt(f *os.File, name, rel string) (*os.File, error) {
	fd, err := unix.Openat(int(f.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENOENT):
		return nil, errChanged(rel)
	case err != nil:
		return nil, wsErr(rel, err)
	}
	return os.NewFile(uintptr(fd), show(rel)), nil
}

// openRoot opens the workspace root: upper's root, and lower's unless
// upper's is opaque.
func (v *view) openRoot() (*mdir, error) {
	layers := v.layers()
	d := &mdir{dirs: make([]*os.File, len(layers))}
	for i, p := range layers {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EACCES) && i < len(layers)-1 && overlay.RestoreAccess(p) == nil {
			// An upper layer's sandbox did chmod 000 /workspace (the
			// lower tree is the project's, never changed).
			fd, err = unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			d.close()
			return nil, wsErr("", err)
		}
		d.dirs[i] = os.NewFile(uintptr(fd), ".")
		if isOpaque(d.dirs[i]) {
			break
		}
	}
	return d, nil
}

// child looks name up in d.
func (d *mdir) child(name string) (entry, error) {
	rel := path.Join(d.rel, name)
	e := entry{layer: -1}
	for i, f := range d.dirs {
		if f == nil {
			continue
		}
		st, ok, err := statAt(f, name)
		if err != nil {
			return entry{}, wsErr(rel, err)
		}
		if !ok {
			continue
		}
		if isWhiteout(&st.st) {
			// Deleted here: nothing below shows.
			break
		}
		if e.layer < 0 {
			e.fi, e.layer = st, i
			if !st.IsDir() {
				return e, nil
			}
			e.shows = make([]bool, len(d.dirs))
			e.shows[i] = true
			continue
		}
		// Lower layers show through a directory only where they have a
		// directory too (and none above is opaque, which enter checks);
		// a lower symlink or file there is hidden, as overlayfs hides it,
		// and hides what is below it.
		if !st.IsDir() {
			break
		}
		e.shows[i] = true
	}
	if e.layer < 0 {
		return entry{}, fs.ErrNotExist
	}
	return e, nil
}

// enter opens the directory name of d, which child found as e.
func (d *mdir) enter(name string, e entry) (*mdir, error) {
	rel := path.Join(d.rel, name)
	if !e.fi.IsDir() {
		if e.isLink() {
			return nil, fmt.Errorf("internal: unresolved symlink %q", rel)
		}
		return nil, fmt.Errorf("%q is not a directory", rel)
	}
	c := &mdir{rel: rel, dirs: make([]*os.File, len(d.dirs))}
	for i := e.layer; i < len(d.dirs); i++ {
		if !e.shows[i] {
			continue
		}
		f, err := openDirAt(d.dirs[i], name, rel)
		if err != nil {
			c.close()
			return nil, err
		}
		c.dirs[i] = f
		if isOpaque(f) {
			break
		}
	}
	return c, nil
}

// open opens the merged directory rel (clean, symlink-free; "" the root).
func (v *view) open(rel string) (*mdir, error) {
	d, err := v.openRoot()
	if err != nil || rel == "" {
		return d, err
	}
	for comp := range strings.SplitSeq(rel, "/") {
		e, err := d.child(comp)
		if err == nil {
			var c *mdir
			c, err = d.enter(comp, e)
			d.close()
			d = c
		} else {
			d.close()
		}
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// find returns the entry rel names and its parent directory, open (nil
// for the root, whose entry is upper's root). The caller closes parent.
func (v *view) find(rel string) (e entry, parent *mdir, err error) {
	if rel == "" {
		d, err := v.openRoot()
		if err != nil {
			return entry{}, nil, err
		}
		defer d.close()
		st := &statInfo{name: "."}
		if err := unix.Fstat(int(d.dirs[0].Fd()), &st.st); err != nil {
			return entry{}, nil, wsErr("", err)
		}
		shows := make([]bool, len(d.dirs))
		for i, f := range d.dirs {
			shows[i] = f != nil
		}
		return entry{fi: st, shows: shows}, nil, nil
	}
	dir, name := path.Split(rel)
	parent, err = v.open(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return entry{}, nil, err
	}
	if e, err = parent.child(name); err != nil {
		parent.close()
		return entry{}, nil, err
	}
	return e, parent, nil
}

// lookup finds rel (clean, relative, "" the root) in the view. A symlink
// before the last component is an error (resolve replaces those first).
func (v *view) lookup(rel string) (entry, error) {
	e, parent, err := v.find(rel)
	parent.close()
	return e, err
}

// resolve follows the symlinks of rel inside the view, one component at a
// time, and returns the symlink-free path it names. A link whose target
// is absolute or climbs above the workspace root is refused before its
// target is looked at. followLast says whether a symlink in the last
// component is followed (reads) or returned as is (writes, which then
// refuse it). From the first missing component on, the path is returned
// as is (reads then fail; writes create it).
func (v *view) resolve(rel string, followLast bool) (string, error) {
	done, todo := "", rel
	for hops := 0; todo != ""; {
		comp, rest, _ := strings.Cut(todo, "/")
		next := path.Join(done, comp)
		e, parent, err := v.find(next)
		if errors.Is(err, fs.ErrNotExist) {
			// Nothing below a missing entry exists, so no symlink either:
			// a write creates it all.
			return path.Join(next, rest), nil
		}
		if err != nil {
			return "", err
		}
		if !e.isLink() || rest == "" && !followLast {
			parent.close()
			done, todo = next, rest
			continue
		}
		if hops++; hops > maxSymlinks {
			parent.close()
			return "", fmt.Errorf("too many levels of symlinks in %q", rel)
		}
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(int(parent.dirs[e.layer].Fd()), comp, buf)
		parent.close()
		if err != nil {
			return "", errChanged(next)
		}
		target := string(buf[:n])
		if strings.HasPrefix(target, "/") {
			return "", fmt.Errorf("%w: %q is a symlink to the absolute path %q; only links within the workspace are followed", ErrOutsideWorkspace, next, target)
		}
		t := path.Join(done, target)
		if t == ".." || strings.HasPrefix(t, "../") {
			return "", fmt.Errorf("%w: %q is a symlink to %q, which is outside the workspace", ErrOutsideWorkspace, next, target)
		}
		if t == "." {
			t = ""
		}
		done, todo = "", strings.TrimPrefix(path.Join(t, rest), "/")
		if todo == "." {
			todo = ""
		}
	}
	return done, nil
}

// openFile opens the regular file rel (resolved) for reading and
// returns it with its size.
func (v *view) openFile(rel string) (*os.File, int64, error) {
	e, parent, err := v.find(rel)
	if err != nil {
		return nil, 0, err
	}
	defer parent.close()
	if !e.fi.Mode().IsRegular() || parent == nil {
		return nil, 0, fmt.Errorf("%q is not a regular file", show(rel))
	}
	// Opened relative to the parent's descriptor, never through a
	// symlink; O_NONBLOCK keeps a FIFO swapped in from blocking us.
	fd, err := unix.Openat(int(parent.dirs[e.layer].Fd()), path.Base(rel), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, wsErr(rel, err)
	}
	f := os.NewFile(uintptr(fd), show(rel))
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%q is not a regular file", show(rel))
	}
	return f, fi.Size(), nil
}

// readFile returns the content of the regular file rel (resolved), at
// most max bytes.
func (v *view) readFile(rel string, max int64) ([]byte, error) {
	f, size, err := v.openFile(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > max {
		return nil, fmt.Errorf("%q is %d bytes, more than the read limit of %d bytes; use shell (e.g. head, sed -n) to read part of it", show(rel), size, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, wsErr(rel, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%q is more than the read limit of %d bytes", show(rel), max)
	}
	return b, nil
}

// dirEntry is one entry of a merged directory.
type dirEntry struct {
	name string
	fi   fs.FileInfo
}

// nameHeap is a max-heap of directory entries by name: it keeps the
// smallest names seen so far.
type nameHeap []dirEntry

func (h nameHeap) Len() int           { return len(h) }
func (h nameHeap) Less(i, j int) bool { return h[i].name > h[j].name }
func (h nameHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nameHeap) Push(x any)        { *h = append(*h, x.(dirEntry)) }
func (h *nameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// readBatch is how many names a directory read takes at a time.
const readBatch = 256

// list returns the first limit entries of d, in name order, whose names
// sort after after, and whether more follow. It reads names in batches
// and keeps only the limit smallest, so neither its memory nor its stat
// calls grow with the directory (a sandbox can make millions of
// entries); only the names are read in full.
func (d *mdir) list(after string, limit int) ([]dirEntry, bool, error) {
	h := make(nameHeap, 0, min(limit+1, 1024))
	wanted := func(name string) bool {
		return name > after && (len(h) <= limit || name < h[0].name)
	}
	keep := func(name string, fi fs.FileInfo) {
		heap.Push(&h, dirEntry{name, fi})
		if len(h) > limit+1 {
			heap.Pop(&h)
		}
	}
	scan := func(f *os.File, each func(name string) error) error {
		for {
			names, err := f.Readdirnames(readBatch)
			for _, n := range names {
				if wanted(n) {
					if err := each(n); err != nil {
						return err
					}
				}
			}
			if err == io.EOF || err == nil && len(names) == 0 {
				return nil
			}
			if err != nil {
				return wsErr(d.rel, err)
			}
		}
	}
	for i, f := range d.dirs {
		if f == nil {
			continue
		}
		err := scan(f, func(name string) error {
			for _, above := range d.dirs[:i] {
				// Anything in a higher layer (an entry, or a whiteout)
				// hides it.
				if above == nil {
					continue
				}
				if _, ok, err := statAt(above, name); ok || err != nil {
					return nil
				}
			}
			st, ok, err := statAt(f, name)
			if err != nil {
				return wsErr(path.Join(d.rel, name), err)
			}
			if ok && !isWhiteout(&st.st) {
				keep(name, st)
			}
			return nil
		})
		if err != nil {
			return nil, false, err
		}
	}
	list := []dirEntry(h)
	slices.SortFunc(list, func(a, b dirEntry) int { return strings.Compare(a.name, b.name) })
	more := len(list) > limit
	if more {
		list = list[:limit]
	}
	return list, more, nil
}

// readDir lists the merged directory rel (resolved): the first limit
// entries in name order after the name after, and whether more follow.
func (v *view) readDir(rel, after string, limit int) ([]dirEntry, bool, error) {
	e, parent, err := v.find(rel)
	if err != nil {
		return nil, false, err
	}
	defer parent.close()
	if !e.fi.IsDir() {
		return nil, false, fmt.Errorf("%q is not a directory", show(rel))
	}
	var d *mdir
	if parent == nil {
		d, err = v.openRoot()
	} else {
		d, err = parent.enter(path.Base(rel), e)
	}
	if err != nil {
		return nil, false, err
	}
	defer d.close()
	return d.list(after, limit)
}

// walk visits the merged tree below rel (resolved) depth-first in name
// order, without following symlinks, until fn returns false or max
// entries were visited. It descends by descriptor, so a directory
// swapped for a symlink meanwhile is never followed.
func (v *view) walk(rel string, max int, fn func(rel string, fi fs.FileInfo) bool) error {
	e, parent, err := v.find(rel)
	if err != nil {
		return err
	}
	var d *mdir
	if parent == nil {
		d, err = v.openRoot()
	} else {
		d, err = parent.enter(path.Base(rel), e)
		parent.close()
	}
	if err != nil {
		return err
	}
	defer d.close()
	left := max
	return d.walk(0, &left, fn)
}

func (d *mdir) walk(depth int, left *int, fn func(rel string, fi fs.FileInfo) bool) error {
	ents, _, err := d.list("", *left)
	if err != nil {
		return err
	}
	for _, de := range ents {
		if *left <= 0 {
			return errStop
		}
		*left--
		p := path.Join(d.rel, de.name)
		if !fn(p, de.fi) {
			return errStop
		}
		if !de.fi.IsDir() || depth >= maxDepth {
			continue
		}
		e, err := d.child(de.name)
		if err != nil {
			continue // gone or changed meanwhile
		}
		c, err := d.enter(de.name, e)
		if err != nil {
			continue
		}
		err = c.walk(depth+1, left, fn)
		c.close()
		if err == errStop {
			return err
		}
	}
	return nil
}

var errStop = errors.New("stop")

// show names the workspace root in messages.
func show(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// fileTool is one of the built-in file tools of an Engine.
type fileTool struct {
	e    *Engine
	spec ToolSpec
	run  func(ctx context.Context, ws *workspace, c *Call) (string, error)
}

func (t *fileTool) Spec() ToolSpec { return t.spec }

func (t *fileTool) Run(ctx context.Context, c *Call) (string, error) {
	ws, err := t.e.workspace(ctx, c)
	if err != nil {
		return "", err
	}
	if ws.host {
		return "", errHostFiles
	}
	return t.run(ctx, ws, c)
}

func (e *Engine) fileTools() []Tool {
	max := e.cfg.MaxFileSize
	return []Tool{
		&fileTool{e: e, spec: ToolSpec{
			Name: "read_file",
			Description: fmt.Sprintf("Read lines of a text file of the workspace, numbered as cat -n numbers them (the number, a tab, the line). Paths are relative to the workspace root (/workspace in shell). "+
				"Without offset and limit it shows the file from its first line, at most %d lines and about %d bytes; the header says which lines of how many were shown and which offset to send for the next ones. Lines longer than %d bytes are cut.", defaultLines, e.readBudget(), maxLineShown),
			Parameters: schema([]string{"path"}, map[string]any{
				"path":   prop("string", "file path relative to the workspace root"),
				"offset": prop("integer", "the first line to show, counting from 1; default 1"),
				"limit":  prop("integer", fmt.Sprintf("how many lines to show; default %d", defaultLines)),
			}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct {
				Path          string
				Offset, Limit int
			}
			if err := c.Args(&a); err != nil {
				return "", err
			}
			if a.Offset < 0 || a.Limit < 0 {
				return "", errors.New("offset and limit count lines from 1; they cannot be negative")
			}
			return ws.readLines(ctx, a.Path, a.Offset, a.Limit, e.readBudget())
		}},
		&fileTool{e: e, spec: ToolSpec{
			Name:        "write_file",
			Description: fmt.Sprintf("Create or overwrite a file of the workspace with content, creating parent directories. At most %d bytes.", max),
			Parameters: schema([]string{"path", "content"}, map[string]any{
				"path":    prop("string", "file path relative to the workspace root"),
				"content": prop("string", "the whole new content"),
			}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct{ Path, Content string }
			if err := c.Args(&a); err != nil {
				return "", err
			}
			if err := e.writeFile(ctx, c, ws, a.Path, []byte(a.Content)); err != nil {
				return "", err
			}
			return fmt.Sprintf("wrote %d bytes to %s", len(a.Content), a.Path), nil
		}},
		&fileTool{e: e, spec: ToolSpec{
			Name:        "edit_file",
			Description: "Replace old_string with new_string in a file of the workspace. old_string must occur exactly once unless replace_all is true.",
			Parameters: schema([]string{"path", "old_string", "new_string"}, map[string]any{
				"path":        prop("string", "file path relative to the workspace root"),
				"old_string":  prop("string", "the exact text to replace"),
				"new_string":  prop("string", "the replacement"),
				"replace_all": prop("boolean", "replace every occurrence"),
			}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct {
				Path       string
				OldString  string `json:"old_string"`
				NewString  string `json:"new_string"`
				ReplaceAll bool   `json:"replace_all"`
			}
			if err := c.Args(&a); err != nil {
				return "", err
			}
			if a.OldString == "" {
				return "", errors.New("old_string is empty")
			}
			rel, b, err := ws.readFile(a.Path, max)
			if err != nil {
				return "", err
			}
			n := bytes.Count(b, []byte(a.OldString))
			switch {
			case n == 0:
				return "", fmt.Errorf("old_string not found in %s; nothing changed", a.Path)
			case n > 1 && !a.ReplaceAll:
				return "", fmt.Errorf("old_string occurs %d times in %s; give more context to make it unique, or set replace_all; nothing changed", n, a.Path)
			}
			if !a.ReplaceAll {
				n = 1
			}
			nb := bytes.Replace(b, []byte(a.OldString), []byte(a.NewString), n)
			if err := e.writeFile(ctx, c, ws, rel, nb); err != nil {
				return "", err
			}
			return fmt.Sprintf("replaced %d occurrence(s) in %s", n, a.Path), nil
		}},
		&fileTool{e: e, spec: ToolSpec{
			Name:        "list_files",
			Description: "List a directory of the workspace (directories end with /, symlinks with @). recursive lists the whole tree below it, up to 1000 entries.",
			Parameters: schema(nil, map[string]any{
				"path":      prop("string", "directory relative to the workspace root; default the root"),
				"recursive": prop("boolean", "list everything below path"),
			}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct {
				Path      string
				Recursive bool
			}
			if err := c.Args(&a); err != nil {
				return "", err
			}
			rel, err := ws.resolve(a.Path, true)
			if err != nil {
				return "", err
			}
			const maxEntries = 1000
			var lines []string
			fn := func(p string, fi fs.FileInfo) bool {
				if len(lines) == maxEntries {
					lines = append(lines, fmt.Sprintf("[listing stopped after %d entries]", maxEntries))
					return false
				}
				name := p
				if rel != "" {
					name = strings.TrimPrefix(p, rel+"/")
				}
				switch {
				case fi.IsDir():
					name += "/"
				case fi.Mode()&fs.ModeSymlink != 0:
					name += "@"
				}
				lines = append(lines, name)
				return true
			}
			// One entry more than shown, so that fn can say it stopped.
			if a.Recursive {
				err = ws.view.walk(rel, maxEntries+1, fn)
			} else {
				var ents []dirEntry
				ents, _, err = ws.view.readDir(rel, "", maxEntries+1)
				for _, d := range ents {
					if !fn(path.Join(rel, d.name), d.fi) {
						break
					}
				}
			}
			if err != nil && err != errStop {
				return "", fileErr(a.Path, err)
			}
			if len(lines) == 0 {
				return "(empty directory)", nil
			}
			return strings.Join(lines, "\n"), nil
		}},
		&fileTool{e: e, spec: ToolSpec{
			Name:        "search_files",
			Description: fmt.Sprintf("Search the workspace's text files (up to %d bytes each) for a Go regular expression (RE2 syntax); prints path:line: text, at most 100 matches.", max),
			Parameters: schema([]string{"pattern"}, map[string]any{
				"pattern": prop("string", "Go regular expression"),
				"path":    prop("string", "directory (or file) to search, relative to the workspace root; default the root"),
			}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct{ Pattern, Path string }
			if err := c.Args(&a); err != nil {
				return "", err
			}
			re, err := regexp.Compile(a.Pattern)
			if err != nil {
				return "", fmt.Errorf("invalid pattern: %v", err)
			}
			rel, err := ws.resolve(a.Path, true)
			if err != nil {
				return "", err
			}
			// maxFiles bounds the work of one search in a huge tree.
			const maxMatches, maxLine, maxFiles, maxEntries = 100, 200, 20000, 100000
			var out []string
			files, entries := 0, 0
			search := func(p string, fi fs.FileInfo) bool {
				entries++
				if ctx.Err() != nil {
					return false
				}
				if !fi.Mode().IsRegular() || fi.Size() > max {
					return true
				}
				if files++; files > maxFiles {
					out = append(out, fmt.Sprintf("[search stopped after %d files; give a narrower path]", maxFiles))
					return false
				}
				b, err := ws.view.readFile(p, max)
				if err != nil || bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 {
					return true // unreadable or binary
				}
				for i, line := range strings.Split(string(b), "\n") {
					if !re.MatchString(line) {
						continue
					}
					if len(out) == maxMatches {
						out = append(out, fmt.Sprintf("[search stopped after %d matches]", maxMatches))
						return false
					}
					if len(line) > maxLine {
						line = line[:maxLine] + "…"
					}
					out = append(out, fmt.Sprintf("%s:%d: %s", p, i+1, line))
				}
				return true
			}
			e, err := ws.view.lookup(rel)
			if err != nil {
				return "", fileErr(a.Path, err)
			}
			if e.fi.IsDir() {
				err = ws.view.walk(rel, maxEntries, search)
				if err == errStop && entries >= maxEntries && files <= maxFiles && len(out) <= maxMatches {
					out = append(out, fmt.Sprintf("[search stopped after %d entries; give a narrower path]", maxEntries))
				}
			} else {
				search(rel, e.fi)
			}
			if err != nil && err != errStop {
				return "", fileErr(a.Path, err)
			}
			if err := ctx.Err(); err != nil {
				return "", err
			}
			if len(out) == 0 {
				return "no matches", nil
			}
			return strings.Join(out, "\n"), nil
		}},
	}
}

// fileErr words a file system error for the model.
func fileErr(p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: no such file or directory in the workspace", p)
	}
	return err
}

// resolve checks p lexically, then resolves it inside the view.
func (ws *workspace) resolve(p string, followLast bool) (string, error) {
	rel, err := cleanRel(p)
	if err != nil {
		return "", err
	}
	return ws.view.resolve(rel, followLast)
}

// readFile resolves the workspace path p and reads the file it names,
// at most max bytes. It returns the resolved path too.
func (ws *workspace) readFile(p string, max int64) (string, []byte, error) {
	rel, err := ws.resolve(p, true)
	if err != nil {
		return "", nil, err
	}
	b, err := ws.view.readFile(rel, max)
	if err != nil {
		return "", nil, fileErr(p, err)
	}
	return rel, b, nil
}

// readBudget is the bytes of numbered lines one read_file result holds:
// under MaxOutput, so that the result reaches the model whole.
func (e *Engine) readBudget() int {
	return max(e.cfg.MaxOutput-1024, e.cfg.MaxOutput/2)
}

// readLines resolves the workspace path p and shows lines offset.. of
// the file it names (see readLines), with a header saying what part of
// the file that is and how to page on.
func (ws *workspace) readLines(ctx context.Context, p string, offset, limit, budget int) (string, error) {
	rel, err := ws.resolve(p, true)
	if err != nil {
		return "", err
	}
	f, size, err := ws.view.openFile(rel)
	if err != nil {
		return "", fileErr(p, err)
	}
	defer f.Close()
	body, lr, err := readLines(ctx, f, offset, limit, budget)
	if errors.Is(err, errPastEnd) {
		return "", fmt.Errorf("%s: %w; send a smaller offset", p, err)
	}
	if err != nil {
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		return "", fileErr(p, wsErr(rel, err))
	}
	total := commas(int64(lr.Total))
	if !lr.Known {
		total = "at least " + total
	}
	ends := ""
	if lr.CRLF {
		ends = "; CRLF line ends, shown without the CR"
	}
	if lr.Last < lr.First {
		return fmt.Sprintf("%s: empty file (0 lines, %s bytes)", p, commas(size)), nil
	}
	head := fmt.Sprintf("%s: lines %d–%d of %s (bytes %s–%s of %s%s)\n", p, lr.First, lr.Last, total,
		commas(lr.Start), commas(lr.End), commas(size), ends)
	if lr.Last < lr.Total || !lr.Known {
		body += fmt.Sprintf("[more lines follow: send offset %d to read on (with limit for how many)]", lr.Last+1)
	}
	return head + body, nil
}

// writeScript writes stdin to $1, creating its parent directories, and
// refuses a symlink at $1 (checked host-side before, checked again here
// in case one appeared since).
const writeScript = `[ -L "$1" ] && { echo "$1 is a symlink" >&2; exit 3; }; mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`

// writeTimeout bounds a write_file command: writing at most MaxFileSize
// bytes to a regular file takes far less.
const writeTimeout = 30 * time.Second

// writeFile writes data to the workspace path p (as the model gave it, or
// already resolved). The write goes through the conversation's sandbox,
// so it lands in the upper layer exactly as a shell command's would:
// overlayfs does not promise that changes made to the upper directory
// behind a mounted overlay's back become visible inside it, and writing
// as the sandbox does gives the write no more power than the shell has.
// A symlink as the last component is refused: never write through one.
func (e *Engine) writeFile(ctx context.Context, c *Call, ws *workspace, p string, data []byte) error {
	max := e.cfg.MaxFileSize
	if int64(len(data)) > max {
		return fmt.Errorf("content is %d bytes, more than the write limit of %d bytes", len(data), max)
	}
	rel, err := ws.resolve(p, false)
	if err != nil {
		return err
	}
	if rel == "" {
		return errors.New("cannot write the workspace root; name a file")
	}
	ent, err := ws.view.lookup(rel)
	switch {
	case err == nil && ent.isLink():
		return fmt.Errorf("%s is a symlink; write to the file it points to instead", p)
	case err == nil && !ent.fi.Mode().IsRegular():
		return fmt.Errorf("%s exists and is not a regular file", p)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fileErr(p, err)
	}
	var out bytes.Buffer
	var cmd *sandboxkit.Cmd
	err = e.startIn(ctx, c, func(ws *workspace) error {
		cmd = ws.sess.Command(ctx, "sh", "-c", writeScript, "sh", "/workspace/"+rel)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(data), &out, &out
		cmd.OutputLimit = 4096
		// A FIFO swapped in after the check above would block cat until
		// the turn is cancelled.
		cmd.Timeout = min(e.cfg.CommandTimeout, writeTimeout)
		return cmd.Start()
	})
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("writing %s timed out after %v and was stopped (is it a FIFO or a device now?)", p, cmd.Timeout)
	}
	if err != nil {
		if msg := strings.TrimSpace(out.String()); msg != "" {
			return fmt.Errorf("writing %s failed: %s", p, msg)
		}
		return fmt.Errorf("writing %s failed: %w", p, err)
	}
	return nil
}
