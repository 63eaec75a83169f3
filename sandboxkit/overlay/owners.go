package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
)

// maxReportedPaths bounds UnmappedOwnerError.Paths, so that a tree owned by
// someone else entirely gives a readable message.
const maxReportedPaths = 10

// UnmappedOwnerError reports entries of a lower tree whose owner the
// sandbox's user namespace does not map. bwrap maps only the caller's uid
// and gid, and overlayfs fails with EOVERFLOW to copy up an entry whose
// owner is unmapped, which changing it, or anything in a directory, needs.
type UnmappedOwnerError struct {
	Root     string   // the lower tree checked
	UID, GID int      // the ids the sandbox maps
	Paths    []string // the first entries found (at most 10), under Root
	Count    int      // how many entries in all
}

func (e *UnmappedOwnerError) Error() string {
	more := ""
	if e.Count > len(e.Paths) {
		more = fmt.Sprintf(" and %d more", e.Count-len(e.Paths))
	}
	return fmt.Sprintf("overlay: %d entries under %s are not owned by uid %d and gid %d (%s%s); "+
		"the sandbox cannot map their owner, so changing them would fail with EOVERFLOW; "+
		"fix: chown -R %d:%d %s, or run the server as the user who owns them",
		e.Count, e.Root, e.UID, e.GID, strings.Join(e.Paths, ", "), more, e.UID, e.GID, e.Root)
}

// CheckOwners walks the tree at lower without following symlinks and
// returns an *UnmappedOwnerError if any entry's owner is not uid or its
// group is not gid. It is conservative: the sandbox only fails on such an
// entry once it tries to change it. Directories it cannot read are skipped,
// as the sandbox cannot read them either.
func CheckOwners(lower string, uid, gid int) error {
	// The root is followed like bwrap follows --overlay-src; nothing below it is.
	root, err := filepath.EvalSymlinks(lower)
	if err != nil {
		return fmt.Errorf("overlay: check owners of %s: %w", lower, err)
	}
	e := &UnmappedOwnerError{Root: root, UID: uid, GID: gid}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && errors.Is(err, fs.ErrPermission) {
				return fs.SkipDir
			}
			return err
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while we walked
		}
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("no owner information for %s", p)
		}
		if int(st.Uid) != uid || int(st.Gid) != gid {
			if len(e.Paths) < maxReportedPaths {
				e.Paths = append(e.Paths, p)
			}
			e.Count++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("overlay: check owners of %s: %w", lower, err)
	}
	if e.Count > 0 {
		return e
	}
	return nil
}
