// Package overlay holds the per-conversation copy-on-write layers that a
// sandbox mounts over a workspace, and reads back what the sandbox changed.
//
// bubblewrap mounts a workspace as
//
//	--overlay-src LOWER --overlay UPPER WORK /workspace
//
// inside an unprivileged user namespace. The user's files (LOWER) are never
// written: every change lands in UPPER, so a conversation can be reviewed,
// exported as a patch ([WritePatch]) or thrown away ([Store.Remove], [Store.GC])
// without touching the project. A [Store] keeps one [Layer] (UPPER and WORK)
// per conversation under a private base directory (0700: the layers hold
// copies of the user's files). A [View] reads the merged tree as the
// sandbox sees it, from the host and by descriptor, while the sandbox may
// still be changing it.
//
// Overlayfs leaves undefined what two mounts sharing an upper directory do
// to it, so an upper directory is mounted by at most one sandbox at a time:
// take [Lock] before mounting it and hold it until the sandbox exits; a
// second Lock fails at once with [ErrInUse]. And entries of the lower tree
// owned by another user cannot be changed in the sandbox (bwrap maps only
// the caller's uid and gid, and overlayfs fails with EOVERFLOW):
// [CheckOwners] finds them before the sandbox starts and says how to fix it.
//
// The layers live as long as their conversations; [Store.GC] removes the
// ones unused for longer than a TTL ([DefaultTTL]).
//
// A conversation's workspace, from start to patch:
//
//	store, err := overlay.Open(base) // e.g. ~/.myapp/workspaces
//	layer, err := store.Create(conversationID) // or store.Get
//	err = overlay.CheckOwners(project, os.Getuid(), os.Getgid())
//	unlock, err := overlay.Lock(layer.Upper)
//	// run bwrap ... --overlay-src project --overlay layer.Upper layer.Work /workspace ...
//	unlock()
//	layer.Touch(time.Now())
//	changes, err := overlay.Diff(project, layer.Upper)
//	err = overlay.WritePatch(w, project, layer.Upper)
package overlay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultTTL is how long an unused layer is kept before GC removes it.
const DefaultTTL = 30 * 24 * time.Hour

// ErrInUse reports that a layer's upper directory is locked by a sandbox,
// in this process or another one.
var ErrInUse = errors.New("in use by another sandbox")

// stampName is the file whose mtime records a layer's last use.
const stampName = "last-use"

// maxIDLen bounds a layer id so that <base>/<id>/upper stays a short path.
const maxIDLen = 128

// Store keeps per-conversation layers under one base directory:
// <base>/<id>/upper, <base>/<id>/work and <base>/<id>/last-use.
type Store struct {
	base string
}

// Layer is one conversation's copy-on-write layer. Upper and Work are the
// UPPER and WORK arguments of bwrap's --overlay.
type Layer struct {
	ID    string
	Dir   string // <base>/<id>
	Upper string // the changes: new and copied-up files, whiteouts
	Work  string // overlayfs's scratch directory, on the same filesystem as Upper
}

// Open returns the store at base, creating base (mode 0700) if it is missing.
// The caller chooses base (there is no default). A base that other users
// can read or that belongs to another user is refused: the layers hold
// copies of the user's files.
func Open(base string) (*Store, error) {
	if base == "" {
		return nil, errors.New("overlay: no workspace base directory given")
	}
	base, err := filepath.Abs(base)
	if err != nil {
		return nil, fmt.Errorf("overlay: workspace base %q: %w", base, err)
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("overlay: create workspace base: %w", err)
	}
	fi, err := os.Stat(base)
	if err != nil {
		return nil, fmt.Errorf("overlay: workspace base: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("overlay: workspace base %s is not a directory; remove it or choose another base", base)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("overlay: workspace base %s has mode %#o, so other users could read conversation files; run: chmod 700 %s", base, perm, base)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("overlay: workspace base %s belongs to uid %d, not to this process (uid %d); choose a base directory you own", base, st.Uid, os.Geteuid())
	}
	return &Store{base: base}, nil
}

// Base is the directory holding the layers (for the Doctor's overlay
// check, which must probe the same filesystem).
func (s *Store) Base() string { return s.base }

// checkID refuses ids that could name anything but a direct child of the
// base: no separators, no "." or "..", no hidden names.
func checkID(id string) error {
	ok := len(id) >= 1 && len(id) <= maxIDLen && id[0] != '.'
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("overlay: invalid layer id %q: use 1 to %d characters of A-Z a-z 0-9 . _ -, not starting with a dot", id, maxIDLen)
	}
	return nil
}

func (s *Store) layer(id string) *Layer {
	dir := filepath.Join(s.base, id)
	return &Layer{ID: id, Dir: dir, Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work")}
}

// Create makes a new, empty layer and stamps its last use with the current
// time. It fails with an error wrapping fs.ErrExist if the id is taken.
func (s *Store) Create(id string) (*Layer, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	l := s.layer(id)
	if err := os.Mkdir(l.Dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("overlay: layer %q already exists in %s: %w", id, s.base, fs.ErrExist)
		}
		return nil, fmt.Errorf("overlay: create layer %q: %w", id, err)
	}
	err := os.Mkdir(l.Upper, 0o700)
	if err == nil {
		err = os.Mkdir(l.Work, 0o700)
	}
	if err == nil {
		err = l.Touch(time.Now())
	}
	if err != nil {
		// Leave no half-made layer behind for Get to trip over.
		_ = removeTree(s.base, id)
		return nil, fmt.Errorf("overlay: create layer %q: %w", id, err)
	}
	return l, nil
}

// Get returns an existing layer. It fails with an error wrapping
// fs.ErrNotExist if there is none with that id.
func (s *Store) Get(id string) (*Layer, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	l := s.layer(id)
	for _, d := range []string{l.Dir, l.Upper, l.Work} {
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist) && d == l.Dir:
			return nil, fmt.Errorf("overlay: no layer %q in %s: %w", id, s.base, fs.ErrNotExist)
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("overlay: layer %q is incomplete (%s is missing); remove it and create it again", id, d)
		case err != nil:
			return nil, fmt.Errorf("overlay: layer %q: %w", id, err)
		case !fi.IsDir():
			return nil, fmt.Errorf("overlay: layer %q: %s is not a directory; remove the layer and create it again", id, d)
		}
	}
	return l, nil
}

// Layers lists the store's layers, sorted by id. Entries of the base that
// are not layer directories are ignored.
func (s *Store) Layers() ([]*Layer, error) {
	entries, err := os.ReadDir(s.base)
	if err != nil {
		return nil, fmt.Errorf("overlay: list layers: %w", err)
	}
	var layers []*Layer
	for _, e := range entries {
		if e.IsDir() && checkID(e.Name()) == nil {
			layers = append(layers, s.layer(e.Name()))
		}
	}
	return layers, nil
}

// Remove deletes a layer and everything in it. It refuses with an error
// wrapping ErrInUse while a sandbox holds the layer's lock, and with one
// wrapping fs.ErrNotExist if there is no such layer.
func (s *Store) Remove(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	l := s.layer(id)
	if _, err := os.Lstat(l.Dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("overlay: no layer %q in %s: %w", id, s.base, fs.ErrNotExist)
		}
		return fmt.Errorf("overlay: remove layer %q: %w", id, err)
	}
	return s.removeLocked(l)
}

// removeLocked removes l while holding its lock, so that no sandbox can
// mount it half-deleted. A layer without an upper directory has nothing to
// lock and is removed as it is.
func (s *Store) removeLocked(l *Layer) error {
	unlock, err := Lock(l.Upper)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		unlock = func() error { return nil }
	case err != nil:
		return err // names the upper directory, so the layer
	}
	err = removeTree(s.base, l.ID)
	if uerr := unlock(); err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("overlay: remove layer %q: %w", l.ID, err)
	}
	return nil
}

// GC removes the layers whose last use is older than ttl at now, skipping
// locked ones, and returns their ids. With dryRun it only returns the ids it
// would remove. A layer it cannot examine or remove is skipped too: GC goes
// on with the others and then returns, with the ids removed, an error
// naming every layer that failed (errors.Join of one error per layer).
func (s *Store) GC(ctx context.Context, ttl time.Duration, now time.Time, dryRun bool) ([]string, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("overlay: GC with TTL %v would remove every layer; use a positive TTL such as DefaultTTL", ttl)
	}
	layers, err := s.Layers()
	if err != nil {
		return nil, err
	}
	var removed []string
	var failed []error
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return removed, errors.Join(append(failed, err)...)
		}
		last, err := l.LastUse()
		if err != nil {
			failed = append(failed, fmt.Errorf("overlay: GC skipped layer %q: %w", l.ID, err))
			continue
		}
		if now.Sub(last) < ttl {
			continue
		}
		if dryRun {
			unlock, err := Lock(l.Upper)
			if errors.Is(err, ErrInUse) {
				continue
			}
			if err == nil {
				err = unlock()
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				failed = append(failed, fmt.Errorf("overlay: GC skipped layer %q: %w", l.ID, err))
				continue
			}
		} else if err := s.removeLocked(l); errors.Is(err, ErrInUse) {
			continue
		} else if err != nil {
			failed = append(failed, fmt.Errorf("overlay: GC skipped layer %q: %w", l.ID, err))
			continue
		}
		removed = append(removed, l.ID)
	}
	return removed, errors.Join(failed...)
}

// Touch records now as the layer's last use. Call it when a sandbox mounts
// or releases the layer, so that GC keeps layers that are in use.
func (l *Layer) Touch(now time.Time) error {
	p := filepath.Join(l.Dir, stampName)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
	if err == nil {
		err = f.Close()
	}
	if err == nil {
		err = os.Chtimes(p, now, now)
	}
	if err != nil {
		return fmt.Errorf("overlay: stamp last use of layer %q: %w", l.ID, err)
	}
	return nil
}

// LastUse returns the time last recorded by Touch. A layer that was never
// stamped (made by hand, or left by a crash) counts from its directory's
// modification time.
func (l *Layer) LastUse() (time.Time, error) {
	fi, err := os.Stat(filepath.Join(l.Dir, stampName))
	if errors.Is(err, fs.ErrNotExist) {
		fi, err = os.Stat(l.Dir)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("overlay: last use of layer %q: %w", l.ID, err)
	}
	return fi.ModTime(), nil
}

// Lock takes the exclusive lock on an upper directory, which any sandbox
// must hold while the directory is mounted. It is flock(2) on a lock file
// beside the directory (UPPER.lock, created if missing), not on the
// directory itself: the sandbox owns the directory's mode (chmod 000
// /workspace sets it), and a lock that needs to open it would fail for
// good. It works across processes and between two Locks in one process.
// A held lock makes it fail at once with an error wrapping ErrInUse. Once
// locked, the directory's owner permissions are restored (RestoreAccess),
// so that the next sandbox and Remove can read it. The lock lasts until
// unlock is called or the process exits; it is not inherited by child
// processes.
func Lock(upper string) (unlock func() error, err error) {
	upper = filepath.Clean(upper)
	fi, err := os.Lstat(upper)
	if err != nil {
		return nil, fmt.Errorf("overlay: lock upper directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("overlay: lock upper directory %s: not a directory", upper)
	}
	f, err := os.OpenFile(upper+".lock", os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("overlay: lock upper directory: %w", err)
	}
	conn, err := f.SyscallConn()
	if err == nil {
		cerr := conn.Control(func(fd uintptr) {
			err = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB)
		})
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("overlay: upper directory %s: %w; wait for that sandbox to exit or use another layer", upper, ErrInUse)
		}
		return nil, fmt.Errorf("overlay: lock %s: %w", upper, err)
	}
	if err := RestoreAccess(upper); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	unlock = func() error {
		// Closing the only descriptor of the open file releases the lock.
		var err error
		once.Do(func() { err = f.Close() })
		return err
	}
	return unlock, nil
}

// RestoreAccess gives the owner back read, write and search permission
// on the upper directory upper, which a sandbox can take away (chmod 000
// /workspace sets its mode) while it runs or before it exits. Lock calls
// it, Diff and a patch when they cannot open the upper directory, and so
// should anything else that reads an upper directory host-side. It
// changes nothing else, and nothing if the owner has that access.
func RestoreAccess(upper string) error {
	fi, err := os.Lstat(upper)
	if err != nil {
		return fmt.Errorf("overlay: upper directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("overlay: upper directory %s: not a directory", upper)
	}
	if perm := fi.Mode().Perm(); perm&0o700 != 0o700 {
		if err := os.Chmod(upper, perm|0o700); err != nil {
			return fmt.Errorf("overlay: restore the owner's access to %s: %w", upper, err)
		}
	}
	return nil
}

// RemoveAll removes dir and everything below it, including the mode-000
// work/work dir that overlayfs leaves in a work dir, which os.RemoveAll
// cannot remove.
func RemoveAll(dir string) error {
	dir = filepath.Clean(dir)
	return removeTree(filepath.Dir(dir), filepath.Base(dir))
}

// removeTree removes <base>/<name> through an os.Root on base, so that a
// symlink planted in a layer cannot redirect the removal. Directories the
// sandbox made unreadable, and the mode-000 work/work that overlayfs
// creates, are made accessible first.
func removeTree(base, name string) error {
	root, err := os.OpenRoot(base)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.RemoveAll(name); err == nil {
		return nil
	}
	_ = fs.WalkDir(root.FS(), name, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			// WalkDir calls this before reading the directory.
			_ = root.Chmod(p, 0o700)
		}
		return nil
	})
	return root.RemoveAll(name)
}
