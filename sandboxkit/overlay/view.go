package overlay

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrOutsideView is wrapped by the error of a View method for a name that
// resolves outside the view: through a symlink whose target is absolute or
// climbs above the root. Nothing outside the view is looked at.
var ErrOutsideView = errors.New("path leaves the workspace")

// DefaultMaxReadFile is View.MaxReadFile's default.
const DefaultMaxReadFile = 64 << 20

// maxSymlinks bounds the symlinks followed while resolving one name.
const maxSymlinks = 40

// maxDepth bounds how deep Walk descends (each level holds a descriptor
// per layer open).
const maxDepth = 128

// View is the merged view of overlay layers as overlayfs shows it at the
// mount point: upper over lower, where a whiteout in a higher layer (a 0/0
// character device) deletes the lower entry and an opaque directory
// (xattr user.overlay.opaque=y, the userxattr form used in a user
// namespace) hides the directories below it. It reads the layer
// directories from the host, without mounting them.
//
// A sandbox may run on the layers while the view is read, and can swap
// any directory for a symlink at any moment (renameat2 RENAME_EXCHANGE),
// so nothing is ever resolved by host path below a layer's root: the view
// walks by descriptor, opening one component at a time with
// O_NOFOLLOW|O_DIRECTORY and stat-ing, reading links and opening files
// relative to the parent's descriptor. A swap then makes a read fail; it
// never leads it out. Symlinks inside the view are followed by the view's
// own rules (their targets resolved against the merged tree); one whose
// target is absolute or leaves the root fails with ErrOutsideView.
//
// Names are as io/fs has them (slash-separated, unrooted, "." the root);
// "" names the root too. Errors name view paths only, never a host path.
// View implements fs.FS, fs.StatFS, fs.ReadDirFS, fs.ReadFileFS and
// fs.ReadLinkFS.
type View struct {
	// MaxReadFile bounds ReadFile: a larger file is refused before it is
	// read (DefaultMaxReadFile if 0).
	MaxReadFile int64
	layers      []string // top first
}

// NewView returns the merged view of layers, given top first: the upper
// layer, any read-only layers between, and the lower tree last.
func NewView(layers ...string) *View {
	return &View{layers: slices.Clone(layers)}
}

// Upper is the top layer's directory.
func (v *View) Upper() string { return v.layers[0] }

// Entry is a name found in a merged directory (see Dir.Lookup).
type Entry struct {
	Info fs.FileInfo
	// Layer is the index of the layer it lives in (0: the top one).
	Layer int
	// shows, for a directory, marks the layers (Layer and below) that
	// have a real directory here, which merge unless a higher one of
	// them is opaque.
	shows []bool
}

// IsLink reports whether the entry is a symlink.
func (e Entry) IsLink() bool { return e.Info.Mode()&fs.ModeSymlink != 0 }

// Dir is a directory of the merged view, open in each layer whose
// directory at its path shows through. Close it after use.
type Dir struct {
	rel  string // its view path ("" the root), for messages
	dirs []*os.File
}

// Layer is the directory's descriptor in layer i (0: the top one), or
// nil where the layer has no directory here that shows through.
func (d *Dir) Layer(i int) *os.File { return d.dirs[i] }

// Layers is how many layers the view has.
func (d *Dir) Layers() int { return len(d.dirs) }

// Close closes the directory in every layer.
func (d *Dir) Close() error {
	if d == nil {
		return nil
	}
	for _, f := range d.dirs {
		if f != nil {
			f.Close()
		}
	}
	return nil
}

// show names the root in messages.
func show(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// errChanged reports an entry that changed type between its stat and its
// open: the sandbox is changing the tree.
func errChanged(rel string) error {
	return fmt.Errorf("%s changed while it was read (the sandbox is changing it); try again", show(rel))
}

// statInfo is an fs.FileInfo made from a stat taken by descriptor. Sys
// returns the *unix.Stat_t.
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

// isOpaque reports whether overlayfs marked the directory fd as hiding
// the directories below it. bwrap mounts the overlay in a user namespace,
// where overlayfs uses the user. xattr namespace (userxattr), never
// trusted.
func isOpaque(fd int) bool {
	var buf [4]byte
	n, err := unix.Fgetxattr(fd, "user.overlay.opaque", buf[:])
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

// rel turns an io/fs name into the view's internal form ("" the root),
// refusing names io/fs calls invalid.
func rel(op, name string) (string, error) {
	if name == "" || name == "." {
		return "", nil
	}
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return name, nil
}

// fsName is the io/fs name of the internal rel.
func fsName(rel string) string { return show(rel) }

// openRoot opens the root in each layer down to the first opaque one.
func (v *View) openRoot() (*Dir, error) {
	d := &Dir{dirs: make([]*os.File, len(v.layers))}
	for i, p := range v.layers {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EACCES) && i < len(v.layers)-1 && RestoreAccess(p) == nil {
			// A sandbox did chmod 000 its root (the lower tree is
			// never changed).
			fd, err = unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			d.Close()
			return nil, ViewError("", err)
		}
		d.dirs[i] = os.NewFile(uintptr(fd), ".")
		if isOpaque(fd) {
			break
		}
	}
	return d, nil
}

// Lookup finds name (one component) in d, without following a symlink.
// It fails with an error wrapping fs.ErrNotExist if the merged directory
// has no such entry.
func (d *Dir) Lookup(name string) (Entry, error) {
	rel := path.Join(d.rel, name)
	e := Entry{Layer: -1}
	for i, f := range d.dirs {
		if f == nil {
			continue
		}
		st, ok, err := statAt(f, name)
		if err != nil {
			return Entry{}, ViewError(rel, err)
		}
		if !ok {
			continue
		}
		if isWhiteout(&st.st) {
			// Deleted here: nothing below shows.
			break
		}
		if e.Layer < 0 {
			e.Info, e.Layer = st, i
			if !st.IsDir() {
				return e, nil
			}
			e.shows = make([]bool, len(d.dirs))
			e.shows[i] = true
			continue
		}
		// Lower layers show through a directory only where they have a
		// directory too (and none above is opaque, which Sub checks); a
		// lower symlink or file there is hidden, as overlayfs hides it,
		// and hides what is below it.
		if !st.IsDir() {
			break
		}
		e.shows[i] = true
	}
	if e.Layer < 0 {
		return Entry{}, fmt.Errorf("%s: %w", rel, fs.ErrNotExist)
	}
	return e, nil
}

// Sub opens the directory name of d, which Lookup found as e.
func (d *Dir) Sub(name string, e Entry) (*Dir, error) {
	rel := path.Join(d.rel, name)
	if !e.Info.IsDir() {
		return nil, fmt.Errorf("%q is not a directory", rel)
	}
	c := &Dir{rel: rel, dirs: make([]*os.File, len(d.dirs))}
	for i := e.Layer; i < len(d.dirs); i++ {
		if !e.shows[i] {
			continue
		}
		f, err := OpenDirAt(d.dirs[i], name, rel)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.dirs[i] = f
		if isOpaque(int(f.Fd())) {
			break
		}
	}
	return c, nil
}

// openDir opens the merged directory rel (internal form, symlink-free).
func (v *View) openDir(rel string) (*Dir, error) {
	d, err := v.openRoot()
	if err != nil || rel == "" {
		return d, err
	}
	for comp := range strings.SplitSeq(rel, "/") {
		e, err := d.Lookup(comp)
		if err == nil {
			if e.IsLink() {
				err = fmt.Errorf("%s: a symlink where a directory was resolved (the sandbox is changing it); try again", path.Join(d.rel, comp))
			} else {
				var c *Dir
				c, err = d.Sub(comp, e)
				d.Close()
				d = c
			}
		}
		if err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// find returns the entry rel (internal, symlink-free before its last
// component) names and its parent directory, open (nil for the root,
// whose entry is the top layer's root). The caller closes parent.
func (v *View) find(rel string) (e Entry, parent *Dir, err error) {
	if rel == "" {
		d, err := v.openRoot()
		if err != nil {
			return Entry{}, nil, err
		}
		defer d.Close()
		st := &statInfo{name: "."}
		if err := unix.Fstat(int(d.dirs[0].Fd()), &st.st); err != nil {
			return Entry{}, nil, ViewError("", err)
		}
		shows := make([]bool, len(d.dirs))
		for i, f := range d.dirs {
			shows[i] = f != nil
		}
		return Entry{Info: st, shows: shows}, nil, nil
	}
	dir, name := path.Split(rel)
	parent, err = v.openDir(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return Entry{}, nil, err
	}
	if e, err = parent.Lookup(name); err != nil {
		parent.Close()
		return Entry{}, nil, err
	}
	return e, parent, nil
}

// resolve follows the symlinks of rel inside the view, one component at a
// time, and returns the symlink-free path it names (internal form). It
// descends by descriptor, reopening from the root only after a symlink.
func (v *View) resolve(rel string, followLast bool) (string, error) {
	done, todo := "", rel
	var d *Dir // the merged directory done, open
	defer func() { d.Close() }()
	for hops := 0; todo != ""; {
		comp, rest, _ := strings.Cut(todo, "/")
		next := path.Join(done, comp)
		if d == nil {
			var err error
			if d, err = v.openDir(done); err != nil {
				return "", err
			}
		}
		e, err := d.Lookup(comp)
		if errors.Is(err, fs.ErrNotExist) {
			// Nothing below a missing entry exists, so no symlink either:
			// a write creates it all.
			return path.Join(next, rest), nil
		}
		if err != nil {
			return "", err
		}
		if !e.IsLink() || rest == "" && !followLast {
			if rest != "" {
				c, err := d.Sub(comp, e)
				if err != nil {
					return "", err
				}
				d.Close()
				d = c
			}
			done, todo = next, rest
			continue
		}
		if hops++; hops > maxSymlinks {
			return "", fmt.Errorf("too many levels of symlinks in %q", rel)
		}
		target, err := ReadLinkAt(d.dirs[e.Layer], comp)
		d.Close()
		d = nil
		if err != nil {
			return "", errChanged(next)
		}
		if strings.HasPrefix(target, "/") {
			return "", fmt.Errorf("%w: %q is a symlink to the absolute path %q; only links within the workspace are followed", ErrOutsideView, next, target)
		}
		t := path.Join(done, target)
		if t == ".." || strings.HasPrefix(t, "../") {
			return "", fmt.Errorf("%w: %q is a symlink to %q, which is outside the workspace", ErrOutsideView, next, target)
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

// Resolve follows the symlinks of name inside the view, one component at
// a time, and returns the symlink-free name it stands for ("." the root).
// A link whose target is absolute or climbs above the root fails with
// ErrOutsideView before its target is looked at. followLast says whether
// a symlink as the last component is followed (reads) or kept (writes,
// which then refuse it). From the first missing component on, the name is
// returned as is: reads then fail, writes create it.
func (v *View) Resolve(name string, followLast bool) (string, error) {
	r, err := rel("resolve", name)
	if err != nil {
		return "", err
	}
	r, err = v.resolve(r, followLast)
	return fsName(r), err
}

// lookup resolves name (following the last symlink with follow) and finds
// it, returning its resolved internal path too.
func (v *View) lookup(op, name string, follow bool) (string, Entry, *Dir, error) {
	r, err := rel(op, name)
	if err != nil {
		return "", Entry{}, nil, err
	}
	if r, err = v.resolve(r, follow); err != nil {
		return "", Entry{}, nil, err
	}
	e, parent, err := v.find(r)
	return r, e, parent, err
}

// Stat returns the FileInfo of what name names, following symlinks
// inside the view.
func (v *View) Stat(name string) (fs.FileInfo, error) {
	_, e, parent, err := v.lookup("stat", name, true)
	parent.Close()
	return e.Info, err
}

// Lstat is Stat without following a symlink as the last component.
func (v *View) Lstat(name string) (fs.FileInfo, error) {
	_, e, parent, err := v.lookup("lstat", name, false)
	parent.Close()
	return e.Info, err
}

// ReadLink returns the target of the symlink name (its directories
// resolved inside the view), as it is written.
func (v *View) ReadLink(name string) (string, error) {
	r, e, parent, err := v.lookup("readlink", name, false)
	if err != nil {
		return "", err
	}
	defer parent.Close()
	if !e.IsLink() || parent == nil {
		return "", fmt.Errorf("%s: %w", show(r), fs.ErrInvalid)
	}
	t, err := ReadLinkAt(parent.dirs[e.Layer], path.Base(r))
	if err != nil {
		return "", errChanged(r)
	}
	return t, nil
}

// OpenFile opens the regular file name (symlinks followed inside the
// view) for reading. The *os.File's name is the resolved view name. A
// FIFO or device, also one swapped in meanwhile, is refused without
// blocking.
func (v *View) OpenFile(name string) (*os.File, error) {
	r, e, parent, err := v.lookup("open", name, true)
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	if !e.Info.Mode().IsRegular() || parent == nil {
		return nil, fmt.Errorf("%q is not a regular file", show(r))
	}
	// Opened relative to the parent's descriptor.
	f, ok, err := openRegularAt(parent.dirs[e.Layer], path.Base(r), r)
	if err == nil && !ok {
		err = fmt.Errorf("%q is not a regular file", show(r))
	}
	return f, err
}

// ReadFile returns the content of the regular file name, refusing one
// larger than MaxReadFile before reading it.
func (v *View) ReadFile(name string) ([]byte, error) {
	max := v.MaxReadFile
	if max <= 0 {
		max = DefaultMaxReadFile
	}
	return v.ReadFileMax(name, max)
}

// ReadFileMax is ReadFile with the bound max.
func (v *View) ReadFileMax(name string, max int64) ([]byte, error) {
	f, err := v.OpenFile(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, ViewError(f.Name(), err)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%q is %d bytes, more than the read limit of %d bytes; use shell (e.g. head, sed -n) to read part of it", f.Name(), fi.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, ViewError(f.Name(), err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%q is more than the read limit of %d bytes", f.Name(), max)
	}
	return b, nil
}

// OpenDir opens the merged directory name (symlinks followed inside the
// view), for a caller that walks it by descriptor. Close it after use.
func (v *View) OpenDir(name string) (*Dir, error) {
	r, e, parent, err := v.lookup("open", name, true)
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	if !e.Info.IsDir() {
		return nil, fmt.Errorf("%q is not a directory", show(r))
	}
	if parent == nil {
		return v.openRoot()
	}
	return parent.Sub(path.Base(r), e)
}

// dirEntry is one entry of a merged directory, as fs.DirEntry.
type dirEntry struct {
	name string
	fi   fs.FileInfo
}

func (d dirEntry) Name() string               { return d.name }
func (d dirEntry) IsDir() bool                { return d.fi.IsDir() }
func (d dirEntry) Type() fs.FileMode          { return d.fi.Mode().Type() }
func (d dirEntry) Info() (fs.FileInfo, error) { return d.fi, nil }
func (d dirEntry) String() string             { return fs.FormatDirEntry(d) }

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

// List returns the first limit entries of d, in name order (byte-wise),
// whose names sort after after, and whether more follow. It reads names
// in batches and keeps only the limit smallest, so neither its memory nor
// its stat calls grow with the directory (a sandbox can make millions of
// entries); only the names are read in full. Each entry's Info is its
// Lstat.
func (d *Dir) List(after string, limit int) ([]fs.DirEntry, bool, error) {
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
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return ViewError(d.rel, err)
		}
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
				return ViewError(d.rel, err)
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
				return ViewError(path.Join(d.rel, name), err)
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
	slices.SortFunc(h, func(a, b dirEntry) int { return strings.Compare(a.name, b.name) })
	more := len(h) > limit
	if more {
		h = h[:limit]
	}
	out := make([]fs.DirEntry, len(h))
	for i, e := range h {
		out[i] = e
	}
	return out, more, nil
}

// ReadDirPage lists the merged directory name (symlinks followed inside
// the view): the first limit entries in name order after the name after,
// and whether more follow.
func (v *View) ReadDirPage(name, after string, limit int) ([]fs.DirEntry, bool, error) {
	d, err := v.OpenDir(name)
	if err != nil {
		return nil, false, err
	}
	defer d.Close()
	return d.List(after, limit)
}

// MaxReadDir bounds ReadDir: a merged directory with more entries is
// refused (ReadDirPage reads one of any size a page at a time).
const MaxReadDir = 1 << 16

// ReadDir lists the merged directory name in name order.
func (v *View) ReadDir(name string) ([]fs.DirEntry, error) {
	ents, more, err := v.ReadDirPage(name, "", MaxReadDir)
	if err == nil && more {
		err = fmt.Errorf("%s has more than %d entries; list it a page at a time", name, MaxReadDir)
	}
	return ents, err
}

// Walk visits the merged tree below name (symlinks followed to reach it)
// depth-first in name order, without following symlinks inside it, until
// fn returns false or max entries were visited; it then returns nil. It
// descends by descriptor, so a directory swapped for a symlink meanwhile
// is never followed; an entry gone or changed meanwhile is skipped. fn
// gets each entry's io/fs name and its Lstat.
func (v *View) Walk(name string, max int, fn func(name string, fi fs.FileInfo) bool) error {
	d, err := v.OpenDir(name)
	if err != nil {
		return err
	}
	defer d.Close()
	left := max
	if err := d.walk(0, &left, fn); err != errStop {
		return err
	}
	return nil
}

var errStop = errors.New("stop")

func (d *Dir) walk(depth int, left *int, fn func(rel string, fi fs.FileInfo) bool) error {
	ents, _, err := d.List("", *left)
	if err != nil {
		return err
	}
	for _, de := range ents {
		if *left <= 0 {
			return errStop
		}
		*left--
		fi, _ := de.Info()
		if !fn(path.Join(d.rel, de.Name()), fi) {
			return errStop
		}
		if !fi.IsDir() || depth >= maxDepth {
			continue
		}
		e, err := d.Lookup(de.Name())
		if err != nil || e.IsLink() {
			continue // gone or changed meanwhile
		}
		c, err := d.Sub(de.Name(), e)
		if err != nil {
			continue
		}
		err = c.walk(depth+1, left, fn)
		c.Close()
		if err == errStop {
			return err
		}
	}
	return nil
}

// Open opens name for fs.FS: a regular file as an *os.File (OpenFile), a
// directory as an fs.ReadDirFile listing the merged directory. Symlinks
// are followed inside the view.
func (v *View) Open(name string) (fs.File, error) {
	r, e, parent, err := v.lookup("open", name, true)
	if err != nil {
		return nil, err
	}
	parent.Close()
	if e.Info.IsDir() {
		return &dirFile{v: v, name: fsName(r), fi: e.Info}, nil
	}
	return v.OpenFile(fsName(r))
}

// dirFile is a merged directory opened by Open. It reads its entries in
// pages, reopening the directory by name for each page.
type dirFile struct {
	v     *View
	name  string
	fi    fs.FileInfo
	after string
	done  bool
}

func (f *dirFile) Stat() (fs.FileInfo, error) { return f.fi, nil }
func (f *dirFile) Close() error               { return nil }
func (f *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: f.name, Err: errors.New("is a directory")}
}

func (f *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if f.done {
		if n > 0 {
			return nil, io.EOF
		}
		return nil, nil
	}
	limit := n
	if n <= 0 {
		limit = MaxReadDir
	}
	ents, more, err := f.v.ReadDirPage(f.name, f.after, limit)
	if err != nil {
		return nil, err
	}
	if n <= 0 && more {
		return ents, fmt.Errorf("%s has more than %d entries; read it with ReadDir(n)", f.name, MaxReadDir)
	}
	if len(ents) > 0 {
		f.after = ents[len(ents)-1].Name()
	}
	if !more {
		f.done = true
	}
	if n > 0 && len(ents) == 0 {
		return nil, io.EOF
	}
	return ents, nil
}

var (
	_ fs.StatFS     = (*View)(nil)
	_ fs.ReadDirFS  = (*View)(nil)
	_ fs.ReadFileFS = (*View)(nil)
	_ fs.ReadLinkFS = (*View)(nil)
)

// Name is the directory's io/fs name in the view ("." the root).
func (d *Dir) Name() string { return show(d.rel) }
