package agentcore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// ErrCopyBack is wrapped by RunOnCopy's error when what run changed in
// the copy could not all be brought into the workspace.
var ErrCopyBack = errors.New("the changes made in the copy of the workspace could not all be brought back into it")

// RunOnCopy runs run on the host in dir, a private copy of call c's
// workspace as its tools see it (the project tree, setup layers and the
// conversation's changes, merged), made for this call; when run returns
// it brings what run changed there into the conversation's upper layer,
// so the changes show in this conversation's workspace diff and in no
// other conversation, and removes the copy. The shared project tree is
// never written.
//
// It is for programs that run unsandboxed: whatever they leave in dir is
// hostile. Bringing it back never follows a symlink: directories are
// opened one component at a time from their parent's descriptor with
// O_NOFOLLOW, and a symlink comes back as a symlink. Special files
// (FIFOs, sockets, devices) are neither copied nor brought back.
//
// The conversation's workspace is held meanwhile: its sandbox is closed
// (refused while a background job runs in it) and none starts until
// RunOnCopy returns. A changes error wraps ErrCopyBack and takes
// precedence over run's.
func (e *Engine) RunOnCopy(ctx context.Context, c *Call, run func(ctx context.Context, dir string) error) error {
	if err := e.awaitLayers(ctx, c); err != nil {
		return err
	}
	cv := e.conv(c.wsKey())
	cv.wsMu.Lock()
	defer cv.wsMu.Unlock()
	if err := cv.closeIdleLocked("a program on the host works on a copy of the workspace meanwhile"); err != nil {
		return err
	}
	_, v, layer, lower, err := e.workspaceLayers(ctx, c)
	if err != nil {
		return err
	}
	unlock, err := overlay.Lock(v.Upper())
	if err != nil {
		return hidePaths(err, lower, layer.Dir)
	}
	defer unlock()
	layer.Touch(time.Now())
	defer func() { layer.Touch(time.Now()) }()
	// A copy a stopped server left (the workspace is held: no run uses one).
	old, _ := filepath.Glob(filepath.Join(layer.Dir, "hostcopy-*"))
	for _, d := range old {
		overlay.RemoveAll(d)
	}
	tmp, err := os.MkdirTemp(layer.Dir, "hostcopy-")
	if err != nil {
		e.log.Error("making a host copy of a workspace failed", "conversation", c.Conversation, "err", err)
		return errors.New("the copy of the workspace could not be made; the server log has the details")
	}
	defer overlay.RemoveAll(tmp)
	tree := filepath.Join(tmp, "tree")
	budget := sandboxkit.DefaultLimits().Disk
	if e.cfg.Sandbox.Limits != nil {
		budget = e.cfg.Sandbox.Limits.Disk
	}
	x := &copier{skipped: map[string]bool{}, budget: budget}
	if err := x.export(v, tree); err != nil {
		e.log.Error("copying a workspace to the host failed", "conversation", c.Conversation, "err", err)
		return fmt.Errorf("the copy of the workspace could not be made: %w", hidePaths(err, lower, layer.Dir))
	}
	// Whatever changes in the copy from now on has a ctime at or after
	// the stamp's (a process cannot set ctime).
	if err := x.stamp(filepath.Join(tmp, "stamp")); err != nil {
		return fmt.Errorf("the copy of the workspace could not be made: %w", hidePaths(err, lower, layer.Dir))
	}
	runErr := run(ctx, tree)
	if err := x.bringBack(v, tree); err != nil {
		e.log.Error("bringing a host copy's changes into a workspace failed", "conversation", c.Conversation, "err", err)
		return fmt.Errorf("%w: %w", ErrCopyBack, hidePaths(err, lower, layer.Dir))
	}
	return runErr
}

// copier exports a merged view to a host directory and brings the
// directory's changes back into the view's upper layer.
type copier struct {
	// skipped are the paths export left out (special files): their
	// absence in the copy is no deletion.
	skipped map[string]bool
	// since is the copy's stamp: a file whose ctime is before it is as
	// export wrote it.
	since unix.Timespec
	// budget bounds the bytes of the files bringBack writes (the
	// workspace's disk budget; 0: none); written counts them.
	budget, written int64
}

// export writes the merged tree of v to dst, which must not exist.
func (x *copier) export(v *overlay.View, dst string) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	out, err := openDir(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	root, err := v.OpenDir(".")
	if err != nil {
		return err
	}
	defer root.Close()
	return x.exportDir(root, out, 0)
}

// entries are all the names of the merged directory d with their
// entries, in name order.
func entries(d *overlay.Dir) ([]fs.DirEntry, error) {
	var all []fs.DirEntry
	after := ""
	for {
		page, more, err := d.List(after, 1024)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if !more || len(page) == 0 {
			return all, nil
		}
		after = page[len(page)-1].Name()
	}
}

func (x *copier) exportDir(d *overlay.Dir, out *os.File, depth int) error {
	if depth >= maxDepth {
		return fmt.Errorf("%s: the workspace is deeper than %d directories", d.Name(), maxDepth)
	}
	ents, err := entries(d)
	if err != nil {
		return err
	}
	ofd := int(out.Fd())
	for _, de := range ents {
		rel := path.Join(d.Name(), de.Name())
		e, err := d.Lookup(de.Name())
		if err != nil {
			return err
		}
		st := e.Info.Sys().(*unix.Stat_t)
		perm := st.Mode & 0o777
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := unix.Mkdirat(ofd, de.Name(), 0o700); err != nil {
				return overlay.ViewError(rel, err)
			}
			sub, err := d.Sub(de.Name(), e)
			if err != nil {
				return err
			}
			subOut, err := overlay.OpenDirAt(out, de.Name(), rel)
			if err == nil {
				err = x.exportDir(sub, subOut, depth+1)
				if cerr := unix.Fchmod(int(subOut.Fd()), perm); err == nil && cerr != nil {
					err = overlay.ViewError(rel, cerr)
				}
				subOut.Close()
			}
			sub.Close()
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			src, err := overlay.OpenFileAt(d.Layer(e.Layer), de.Name(), rel)
			if errors.Is(err, unix.EACCES) {
				// Unreadable (a sandbox's chmod 000): left as it is.
				x.skipped[rel] = true
				continue
			}
			if err != nil {
				return err
			}
			err = writeFileAt(ofd, de.Name(), perm, src, rel)
			src.Close()
			if err != nil {
				return err
			}
			// The copy keeps the file's times (build tools compare them).
			ts := []unix.Timespec{st.Atim, st.Mtim}
			if err := unix.UtimesNanoAt(ofd, de.Name(), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return overlay.ViewError(rel, err)
			}
		case unix.S_IFLNK:
			target, err := overlay.ReadLinkAt(d.Layer(e.Layer), de.Name())
			if err != nil {
				return overlay.ViewError(rel, err)
			}
			if err := unix.Symlinkat(target, ofd, de.Name()); err != nil {
				return overlay.ViewError(rel, err)
			}
		default:
			x.skipped[rel] = true
		}
	}
	return nil
}

// stamp makes the file p and takes its ctime as x.since.
func (x *copier) stamp(p string) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	x.since = st.Ctim
	return nil
}

// bringBack makes v's upper layer hold what the tree at dir differs in
// from v, whose layers did not change since export.
func (x *copier) bringBack(v *overlay.View, dir string) error {
	after, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("the copy's directory is gone or no longer a directory: %w", err)
	}
	defer after.Close()
	before, err := v.OpenDir(".")
	if err != nil {
		return err
	}
	defer before.Close()
	if err := overlay.RestoreAccess(v.Upper()); err != nil {
		return err
	}
	up, err := openDir(v.Upper())
	if err != nil {
		return err
	}
	root := &upperDir{f: up, root: true}
	defer root.close()
	return x.syncDir("", after, before, root, 0)
}

// upperDir is a directory of the upper layer, opened (or made) only when
// something is written in it.
type upperDir struct {
	parent *upperDir
	name   string
	rel    string
	perm   uint32 // its mode when done
	f      *os.File
	root   bool
}

// open opens u, making it (and its parents) in the upper layer if
// missing, writable by its owner until close.
func (u *upperDir) open() (int, error) {
	if u.f != nil {
		return int(u.f.Fd()), nil
	}
	pfd, err := u.parent.open()
	if err != nil {
		return -1, err
	}
	fd, err := unix.Openat(pfd, u.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		// Shown from a lower layer: made in the upper one, as overlayfs
		// copies a directory up.
		if err := unix.Mkdirat(pfd, u.name, 0o700); err != nil {
			return -1, overlay.ViewError(u.rel, err)
		}
		fd, err = unix.Openat(pfd, u.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, overlay.ViewError(u.rel, err)
	}
	if err := unix.Fchmod(fd, u.perm|0o700); err != nil {
		unix.Close(fd)
		return -1, overlay.ViewError(u.rel, err)
	}
	u.f = os.NewFile(uintptr(fd), show(u.rel))
	return fd, nil
}

// close gives u its mode and closes it.
func (u *upperDir) close() error {
	if u.f == nil {
		return nil
	}
	var err error
	if !u.root {
		err = unix.Fchmod(int(u.f.Fd()), u.perm)
	}
	u.f.Close()
	u.f = nil
	if err != nil {
		return overlay.ViewError(u.rel, err)
	}
	return nil
}

// maxCopyEntries bounds the names of one directory of the copy that
// bringBack reads.
const maxCopyEntries = 1 << 20

// syncDir brings the directory after of the copy into up, the upper
// layer's directory at rel; before is the merged directory there as
// export saw it (nil: there was none).
func (x *copier) syncDir(rel string, after *os.File, before *overlay.Dir, up *upperDir, depth int) error {
	if depth >= maxDepth {
		return fmt.Errorf("%s: the copy is deeper than %d directories", show(rel), maxDepth)
	}
	names, err := after.Readdirnames(maxCopyEntries + 1)
	if err != nil && err != io.EOF {
		return overlay.ViewError(rel, err)
	}
	if len(names) > maxCopyEntries {
		return fmt.Errorf("%s: more than %d entries", show(rel), maxCopyEntries)
	}
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	if before != nil {
		ents, err := entries(before)
		if err != nil {
			return err
		}
		for _, de := range ents {
			if present[de.Name()] || x.skipped[path.Join(rel, de.Name())] {
				continue
			}
			if err := x.remove(before, up, de.Name(), path.Join(rel, de.Name())); err != nil {
				return err
			}
		}
	}
	afd := int(after.Fd())
	for _, name := range names {
		p := path.Join(rel, name)
		var ast unix.Stat_t
		if err := unix.Fstatat(afd, name, &ast, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return overlay.ViewError(p, err)
		}
		var be overlay.Entry
		had := false
		if before != nil {
			if be, err = before.Lookup(name); err == nil {
				had = true
			} else if !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		var bst *unix.Stat_t
		if had {
			bst = be.Info.Sys().(*unix.Stat_t)
		}
		perm := ast.Mode & 0o777
		switch ast.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := x.syncSubdir(p, name, after, before, be, had, up, perm, depth); err != nil {
				return err
			}
		case unix.S_IFREG:
			if had && bst.Mode&unix.S_IFMT == unix.S_IFREG {
				same, err := x.sameFile(after, name, &ast, before.Layer(be.Layer), bst, p)
				if err != nil {
					return err
				}
				if same {
					continue
				}
			}
			src, err := overlay.OpenFileAt(after, name, p)
			if err != nil {
				return err
			}
			if x.written += ast.Size; x.budget > 0 && x.written > x.budget {
				src.Close()
				return fmt.Errorf("%s: the changed files take more than the workspace's disk budget of %d MiB; what came before it was brought back", show(p), x.budget>>20)
			}
			err = x.replace(up, name, p, func(ufd int) error {
				return writeFileAt(ufd, name, perm, io.LimitReader(src, ast.Size), p)
			})
			src.Close()
			if err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := overlay.ReadLinkAt(after, name)
			if err != nil {
				return overlay.ViewError(p, err)
			}
			if had && bst.Mode&unix.S_IFMT == unix.S_IFLNK {
				if old, err := overlay.ReadLinkAt(before.Layer(be.Layer), name); err == nil && old == target {
					continue
				}
			}
			if err := x.replace(up, name, p, func(ufd int) error {
				return wsErrIf(p, unix.Symlinkat(target, ufd, name))
			}); err != nil {
				return err
			}
		}
		// Special files are not brought back.
	}
	return nil
}

// syncSubdir brings the directory name of after (at p) into up.
func (x *copier) syncSubdir(p, name string, after *os.File, before *overlay.Dir, be overlay.Entry, had bool, up *upperDir, perm uint32, depth int) error {
	sub, err := overlay.OpenDirAt(after, name, p)
	if err != nil {
		return err
	}
	defer sub.Close()
	child := &upperDir{parent: up, name: name, rel: p, perm: perm}
	var subBefore *overlay.Dir
	if had && be.Info.IsDir() {
		if subBefore, err = before.Sub(name, be); err != nil {
			return err
		}
		defer subBefore.Close()
		if be.Info.Mode().Perm() != os.FileMode(perm) {
			if _, err := child.open(); err != nil {
				return err
			}
		}
	} else {
		// New here, or in place of a file: a directory of the upper
		// layer, opaque where a lower layer has one (its entries are
		// not the copy's).
		err := x.replace(up, name, p, func(ufd int) error {
			if err := unix.Mkdirat(ufd, name, 0o700); err != nil {
				return overlay.ViewError(p, err)
			}
			if lowerHas(before, name, true) {
				fd, err := unix.Openat(ufd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					return overlay.ViewError(p, err)
				}
				defer unix.Close(fd)
				return wsErrIf(p, unix.Fsetxattr(fd, "user.overlay.opaque", []byte("y"), 0))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if _, err := child.open(); err != nil {
			return err
		}
	}
	err = x.syncDir(p, sub, subBefore, child, depth+1)
	if cerr := child.close(); err == nil {
		err = cerr
	}
	return err
}

// replace clears name in up (the upper layer's entry, if any) and calls
// make with up's descriptor to write the new one.
func (x *copier) replace(up *upperDir, name, p string, make func(ufd int) error) error {
	ufd, err := up.open()
	if err != nil {
		return err
	}
	if err := removeAt(ufd, name, p, 0); err != nil {
		return err
	}
	return make(ufd)
}

// remove deletes name from the view: its upper entry goes, and a
// whiteout hides what a lower layer has.
func (x *copier) remove(before *overlay.Dir, up *upperDir, name, p string) error {
	ufd, err := up.open()
	if err != nil {
		return err
	}
	if err := removeAt(ufd, name, p, 0); err != nil {
		return err
	}
	if !lowerHas(before, name, false) {
		return nil
	}
	// A whiteout: the character device 0/0 (no privilege needed since
	// Linux 5.8).
	return wsErrIf(p, unix.Mknodat(ufd, name, unix.S_IFCHR, 0))
}

// lowerHas reports whether a layer below the upper one shows an entry
// name in the merged directory before (only a directory, with dirOnly).
func lowerHas(before *overlay.Dir, name string, dirOnly bool) bool {
	if before == nil {
		return false
	}
	for i := 1; i < before.Layers(); i++ {
		f := before.Layer(i)
		if f == nil {
			continue
		}
		var st unix.Stat_t
		err := unix.Fstatat(int(f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		return err != nil || !dirOnly || st.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	return false
}

// removeAt removes the entry name of the directory dfd, a directory with
// everything below it, never following a symlink. A missing entry is no
// error.
func removeAt(dfd int, name, p string, depth int) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return overlay.ViewError(p, err)
	}
	if depth >= maxDepth {
		return fmt.Errorf("%s: deeper than %d directories", show(p), maxDepth)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return overlay.ViewError(p, err)
	}
	d := os.NewFile(uintptr(fd), show(p))
	defer d.Close()
	// A sandbox may have left it unreadable or unwritable.
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return overlay.ViewError(p, err)
	}
	for {
		names, err := d.Readdirnames(256)
		for _, n := range names {
			if err := removeAt(fd, n, path.Join(p, n), depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || err == nil && len(names) == 0 {
			break
		}
		if err != nil {
			return overlay.ViewError(p, err)
		}
	}
	return wsErrIf(p, unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR))
}

// sameFile reports whether the regular file name of the copy, ast, still
// has the content and mode of the view's file bst in dir bdir.
func (x *copier) sameFile(after *os.File, name string, ast *unix.Stat_t, bdir *os.File, bst *unix.Stat_t, p string) (bool, error) {
	if ast.Size != bst.Size || ast.Mode&0o777 != bst.Mode&0o777 {
		return false, nil
	}
	if ast.Ctim.Nano() < x.since.Nano() && ast.Mtim == bst.Mtim {
		return true, nil // not touched since export wrote it
	}
	a, err := overlay.OpenFileAt(after, name, p)
	if err != nil {
		return false, err
	}
	defer a.Close()
	b, err := overlay.OpenFileAt(bdir, name, p)
	if err != nil {
		return false, err
	}
	defer b.Close()
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		n, errA := io.ReadFull(a, bufA)
		m, errB := io.ReadFull(b, bufB)
		if n != m || !bytes.Equal(bufA[:n], bufB[:m]) {
			return false, nil
		}
		endA := errA == io.EOF || errA == io.ErrUnexpectedEOF
		endB := errB == io.EOF || errB == io.ErrUnexpectedEOF
		switch {
		case endA && endB:
			return true, nil
		case errA != nil && !endA:
			return false, overlay.ViewError(p, errA)
		case errB != nil && !endB:
			return false, overlay.ViewError(p, errB)
		case endA != endB:
			return false, nil
		}
	}
}

// maxDepth bounds how deep a copy descends.
const maxDepth = 128

// openDir opens the directory at the host path p, refusing a symlink as
// its last component.
func openDir(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// writeFileAt creates the regular file name in the directory dfd (which
// must not have it) with mode perm and src's content.
func writeFileAt(dfd int, name string, perm uint32, src io.Reader, rel string) error {
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return overlay.ViewError(rel, err)
	}
	dst := os.NewFile(uintptr(fd), show(rel))
	defer dst.Close()
	if _, err := io.Copy(dst, src); err != nil {
		return overlay.ViewError(rel, err)
	}
	return wsErrIf(rel, unix.Fchmod(fd, perm))
}

// wsErrIf is overlay.ViewError(rel, err), or nil without err.
func wsErrIf(rel string, err error) error {
	if err == nil {
		return nil
	}
	return overlay.ViewError(rel, err)
}
