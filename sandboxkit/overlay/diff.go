package overlay

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// ChangeKind says how an entry of the merged view differs from the lower tree.
type ChangeKind int

const (
	Added ChangeKind = iota + 1
	Modified
	Deleted
)

func (k ChangeKind) String() string {
	switch k {
	case Added:
		return "added"
	case Modified:
		return "modified"
	case Deleted:
		return "deleted"
	}
	return fmt.Sprintf("ChangeKind(%d)", int(k))
}

// Change is one entry the sandbox added, modified or deleted.
type Change struct {
	Path string // slash-separated, relative to the workspace root
	Kind ChangeKind
	Dir  bool // the entry is (Added) or was (Deleted) a directory
	// Unreadable says that the entry is a directory in upper that its
	// owner cannot read (the sandbox can chmod 000 it): Diff could not
	// look inside, and reports it as Added or Modified.
	Unreadable bool
}

// Diff compares the merged view of lower and upper with lower and returns
// the changes, sorted by path; where a path has two changes (a directory
// replaced by a file, or the reverse) the deletion comes first.
//
//   - A whiteout (a 0/0 character device in upper) deletes what lower has
//     at its path. A deleted directory is reported as itself plus one
//     Deleted entry for every entry below it, so that a caller listing
//     deleted files needs no second walk.
//   - An opaque directory (xattr user.overlay.opaque = "y") hides lower's
//     entries below it: those
//     that upper does not have are Deleted.
//   - A non-directory in both trees is Modified only if its type, its
//     permission bits, its content or its symlink target differ; overlayfs
//     copies a file up on touch or chmod, and a copy that ends up equal is
//     no change.
//   - A directory is reported only when it is added or deleted, never
//     because overlayfs copied it up or its mode changed.
//
// Diff never follows a symlink in either tree. Comparing the content of
// files of equal size reads them, within a budget of DefaultMaxPatchBytes:
// past it, such files are reported Modified unread. It reads upper as it is:
// run it while no sandbox is writing to the layer for a consistent answer.
// Whiteouts of the xwhiteout kind (regular files marked by xattr, which
// only composed lower layers carry) are not interpreted.
func Diff(lower, upper string) ([]Change, error) {
	return diff(lower, upper, DefaultMaxPatchBytes)
}

// diff is Diff reading at most budget bytes to compare contents.
func diff(lower, upper string, budget int64) ([]Change, error) {
	low, err := openRootDir(lower)
	if err != nil {
		return nil, err
	}
	defer low.close()
	up, err := openRootDir(upper)
	if errors.Is(err, unix.EACCES) && RestoreAccess(upper) == nil {
		up, err = openRootDir(upper) // chmod 000 /workspace
	}
	if err != nil {
		return nil, err
	}
	defer up.close()
	w := diffWalker{budget: budget}
	if err := w.walk("", up, low, false); err != nil {
		return nil, err
	}
	slices.SortFunc(w.changes, func(a, b Change) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return deletionFirst(a.Kind) - deletionFirst(b.Kind)
	})
	return w.changes, nil
}

func deletionFirst(k ChangeKind) int {
	if k == Deleted {
		return 0
	}
	return 1
}

// dirFD is an open directory walked by file descriptor, so that a symlink
// swapped in by a running sandbox cannot lead the walk outside its tree.
type dirFD struct {
	f    *os.File // for ReadDir and Close
	fd   int
	name string // the directory's path in its tree ("" for the root), for error messages
}

func openRootDir(path string) (*dirFD, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openError(path, err)
	}
	return &dirFD{f: os.NewFile(uintptr(fd), "."), fd: fd}, nil
}

// path names the entry name of d in messages, relative to the tree's root:
// they may reach an API client, who must not learn host paths.
func (d *dirFD) path(name string) string {
	return joinRel(d.name, name)
}

func (d *dirFD) open(name string) (*dirFD, error) {
	path := d.path(name)
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openError(path, err)
	}
	return &dirFD{f: os.NewFile(uintptr(fd), path), fd: fd, name: path}, nil
}

func (d *dirFD) close() { d.f.Close() }

// openError says which entry could not be opened and, when the sandbox
// (or the user) took away the owner's own permission, how to restore it.
func openError(path string, err error) error {
	if errors.Is(err, unix.EACCES) {
		return fmt.Errorf("overlay: diff: open %s: %w; give its owner read access (chmod u+rX) and try again", path, err)
	}
	return fmt.Errorf("overlay: diff: open %s: %w", path, err)
}

// lstat returns the entry's stat, or ok false if there is none.
func (d *dirFD) lstat(name string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("overlay: diff: stat %s: %w", d.path(name), err)
	}
	return st, true, nil
}

func (d *dirFD) names() ([]string, error) {
	names, err := d.f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("overlay: diff: read %s: %w", cmp.Or(d.name, "."), err)
	}
	return names, nil
}

// opaque reports whether overlayfs marked the directory as hiding the lower
// directory of the same path (see isOpaque).
func (d *dirFD) opaque() bool { return isOpaque(d.fd) }

func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }

// isWhiteout reports overlayfs's mark for a deleted entry: a character
// device with device number 0/0.
func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

type diffWalker struct {
	changes []Change
	budget  int64 // bytes left to read comparing contents
}

func (w *diffWalker) add(path string, kind ChangeKind, dir bool) {
	w.changes = append(w.changes, Change{Path: path, Kind: kind, Dir: dir})
}

func joinRel(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// walk compares the upper directory up, at path rel, with low, the lower
// directory at the same path; low is nil where lower has no directory
// there, which makes everything in up Added. hidden says that an opaque
// directory at or above rel hides lower: then the merged view below rel is
// upper alone, and what lower has that upper does not is Deleted. (A
// directory made inside an opaque one is not itself marked opaque, so the
// mark has to be carried down.)
func (w *diffWalker) walk(rel string, up, low *dirFD, hidden bool) error {
	names, err := up.names()
	if err != nil {
		return err
	}
	hidden = hidden || low != nil && up.opaque()
	for _, name := range names {
		p := joinRel(rel, name)
		ust, ok, err := up.lstat(name)
		if err != nil {
			return err
		}
		if !ok {
			continue // removed while we walked
		}
		var lst unix.Stat_t
		inLower := false
		if low != nil {
			if lst, inLower, err = low.lstat(name); err != nil {
				return err
			}
		}
		lowerDir := inLower && isDir(&lst)
		switch {
		case isWhiteout(&ust):
			if inLower {
				if err := w.deleted(low, name, p, lowerDir); err != nil {
					return err
				}
			}
		case isDir(&ust):
			if inLower && !lowerDir {
				w.add(p, Deleted, false)
			}
			child, err := up.open(name)
			if errors.Is(err, unix.EACCES) {
				kind := Added
				if lowerDir {
					kind = Modified
				}
				w.changes = append(w.changes, Change{Path: p, Kind: kind, Dir: true, Unreadable: true})
				continue
			}
			if err != nil {
				return err
			}
			var lowChild *dirFD
			if lowerDir {
				lowChild, err = low.open(name)
			} else {
				w.add(p, Added, true)
			}
			if err == nil {
				err = w.walk(p, child, lowChild, hidden)
			}
			child.close()
			if lowChild != nil {
				lowChild.close()
			}
			if err != nil {
				return err
			}
		case lowerDir:
			if err := w.deleted(low, name, p, true); err != nil {
				return err
			}
			w.add(p, Added, false)
		case inLower:
			same, err := w.sameEntry(up, low, name, &ust, &lst)
			if err != nil {
				return err
			}
			if !same {
				w.add(p, Modified, false)
			}
		default:
			w.add(p, Added, false)
		}
	}
	if low == nil || !hidden {
		return nil
	}
	lowNames, err := low.names()
	if err != nil {
		return err
	}
	inUpper := make(map[string]bool, len(names))
	for _, name := range names {
		inUpper[name] = true
	}
	for _, name := range lowNames {
		if inUpper[name] {
			continue
		}
		st, ok, err := low.lstat(name)
		if err != nil {
			return err
		}
		if ok {
			if err := w.deleted(low, name, joinRel(rel, name), isDir(&st)); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleted reports lower's entry name in dir, at path p, and, for a
// directory, everything below it.
func (w *diffWalker) deleted(dir *dirFD, name, p string, isDirectory bool) error {
	w.add(p, Deleted, isDirectory)
	if !isDirectory {
		return nil
	}
	child, err := dir.open(name)
	if err != nil {
		return err
	}
	defer child.close()
	names, err := child.names()
	if err != nil {
		return err
	}
	for _, n := range names {
		st, ok, err := child.lstat(n)
		if err != nil {
			return err
		}
		if ok {
			if err := w.deleted(child, n, p+"/"+n, isDir(&st)); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameEntry reports whether the non-directory name is the same in up and
// low: same type, permission bits, and content or target.
func (w *diffWalker) sameEntry(up, low *dirFD, name string, ust, lst *unix.Stat_t) (bool, error) {
	if ust.Mode != lst.Mode {
		return false, nil // type or permission bits
	}
	switch ust.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		ut, err := readlinkAt(up, name)
		if err != nil {
			return false, err
		}
		lt, err := readlinkAt(low, name)
		if err != nil {
			return false, err
		}
		return ut == lt, nil
	case unix.S_IFREG:
		if ust.Size != lst.Size || 2*ust.Size > w.budget {
			return false, nil
		}
		w.budget -= 2 * ust.Size
		return sameContent(up, low, name)
	default: // fifo, socket, device
		return ust.Rdev == lst.Rdev, nil
	}
}

func readlinkAt(d *dirFD, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(d.fd, name, buf)
	if err != nil {
		return "", fmt.Errorf("overlay: diff: read link %s: %w", d.path(name), err)
	}
	return string(buf[:n]), nil
}

// openFileAt opens a regular file without following a symlink and without
// blocking on a fifo that replaced it since it was examined.
func openFileAt(d *dirFD, name string) (*os.File, error) {
	path := d.path(name)
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openError(path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("overlay: diff: %s changed while it was read; stop the sandbox and try again", path)
	}
	return os.NewFile(uintptr(fd), path), nil
}

func sameContent(up, low *dirFD, name string) (bool, error) {
	uf, err := openFileAt(up, name)
	if err != nil {
		return false, err
	}
	defer uf.Close()
	lf, err := openFileAt(low, name)
	if err != nil {
		return false, err
	}
	defer lf.Close()
	ub, lb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		un, uerr := io.ReadFull(uf, ub)
		ln, lerr := io.ReadFull(lf, lb)
		if un != ln || !bytes.Equal(ub[:un], lb[:ln]) {
			return false, nil
		}
		uend := uerr == io.EOF || uerr == io.ErrUnexpectedEOF
		lend := lerr == io.EOF || lerr == io.ErrUnexpectedEOF
		switch {
		case uerr != nil && !uend:
			return false, fmt.Errorf("overlay: diff: read %s: %w", uf.Name(), uerr)
		case lerr != nil && !lend:
			return false, fmt.Errorf("overlay: diff: read %s: %w", lf.Name(), lerr)
		case uend || lend:
			return uend == lend, nil
		}
	}
}
