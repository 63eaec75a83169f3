package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// The functions below read a layer by descriptor, for a caller that walks
// layers itself (Dir.Layer gives the descriptors). Their rel argument is
// the view path of what they open ("" the root): it names the *os.File
// they return and their errors, which never carry a host path.

// ViewError words err for the view path rel: rel and the bare error,
// without the host path an *fs.PathError or *os.LinkError in err
// carries. The bare error stays in the chain for errors.Is.
func ViewError(rel string, err error) error {
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

// OpenDirAt opens the directory name in dir, refusing a symlink. A name
// that is no directory (any more), or is gone, is reported as changed by
// the sandbox, for the caller has just seen a directory there.
func OpenDirAt(dir *os.File, name, rel string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENOENT):
		return nil, errChanged(rel)
	case err != nil:
		return nil, ViewError(rel, err)
	}
	return os.NewFile(uintptr(fd), show(rel)), nil
}

// OpenFileAt opens the regular file name in dir for reading, never
// through a symlink, and refuses anything else as changed by the sandbox.
// A FIFO or device swapped in does not block it (O_NONBLOCK).
func OpenFileAt(dir *os.File, name, rel string) (*os.File, error) {
	f, ok, err := openRegularAt(dir, name, rel)
	if err == nil && !ok {
		err = errChanged(rel)
	}
	return f, err
}

// openRegularAt is OpenFileAt, where ok is false (and the file closed)
// for what is not a regular file.
func openRegularAt(dir *os.File, name, rel string) (f *os.File, ok bool, err error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, ViewError(rel, err)
	}
	f = os.NewFile(uintptr(fd), show(rel))
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, false, nil
	}
	return f, true, nil
}

// ReadLinkAt returns the target of the symlink name in dir. Its error is
// the bare errno.
func ReadLinkAt(dir *os.File, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
