package api

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// newPatch is overlay.NewPatch of the workspace lower under upper with
// opt and its repository's ignore rules. Rules over their bounds are
// answered as a client error (422 ignore_rules_too_large).
func newPatch(lower, upper string, opt overlay.PatchOptions) (*overlay.Patch, error) {
	ignore, done, err := patchIgnore(lower, upper)
	if err != nil {
		return nil, err
	}
	defer done()
	opt.Ignore = ignore
	p, err := overlay.NewPatch(lower, upper, opt)
	if errors.Is(err, git.ErrIgnoreLimit) {
		return nil, errIgnoreLimit(err)
	}
	return p, err
}

// patchIgnore is the ignore rules of the workspace lower under upper, as
// overlay.PatchOptions.Ignore: the .gitignore files and
// .git/info/exclude of the merged view, read through descriptors. Call
// done when the patch is made.
func patchIgnore(lower, upper string) (ignore func(string, bool) (bool, error), done func(), err error) {
	m := &mergedFS{}
	if m.lower, err = os.OpenRoot(lower); err != nil {
		return nil, nil, err
	}
	if m.upper, err = os.OpenRoot(upper); err != nil {
		m.lower.Close()
		return nil, nil, err
	}
	return git.NewIgnore(m).Ignored, func() { m.lower.Close(); m.upper.Close() }, nil
}

// errIgnoreLimit answers a patch whose workspace's ignore rules are over
// their bounds: nothing is exported on a guess of what they ignore.
func errIgnoreLimit(err error) error {
	return apiError(http.StatusUnprocessableEntity, "ignore_rules_too_large", "the workspace's .gitignore rules are over their limits, so no patch is made: %v; make them smaller (fewer or shorter .gitignore files)", err)
}

// mergedFS opens the regular files of an overlay's merged view (upper
// over lower: whiteouts delete, opaque directories hide lower) for
// reading, following no symlink: one anywhere on the path is
// fs.ErrInvalid, as is anything but a regular file. It is what reading
// ignore files needs, no more.
type mergedFS struct{ lower, upper *os.Root }

func (m *mergedFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	parts := strings.Split(name, "/")
	lowerVisible := true
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		last := i == len(parts)-1
		root := m.upper
		st, err := m.upper.Lstat(prefix)
		switch {
		case err == nil:
			// A whiteout (a 0/0 character device) hides lower's entry
			// like any upper non-directory: below, fs.ErrInvalid.
			if !last && st.IsDir() && lowerVisible && (opaque(m.upper, prefix) || !lowerDir(m.lower, prefix)) {
				lowerVisible = false // overlayfs merges only a directory with a directory
			}
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return nil, err
		case !lowerVisible:
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		default:
			if st, err = m.lower.Lstat(prefix); err != nil {
				return nil, err
			}
			root = m.lower
		}
		switch {
		case !last && !st.IsDir(), last && !st.Mode().IsRegular():
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
		case last:
			return root.OpenFile(prefix, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		}
	}
	panic("unreachable")
}

func lowerDir(lower *os.Root, dir string) bool {
	st, err := lower.Lstat(dir)
	return err == nil && st.IsDir()
}

// opaque reports whether the upper directory dir hides lower's (the
// user.overlay.opaque mark of an overlay mounted in a user namespace).
func opaque(upper *os.Root, dir string) bool {
	f, err := upper.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	var buf [4]byte
	n, err := unix.Fgetxattr(int(f.Fd()), "user.overlay.opaque", buf[:])
	return err == nil && string(buf[:n]) == "y"
}
