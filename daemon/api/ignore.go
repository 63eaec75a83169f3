package api

import (
	"errors"
	"io/fs"
	"net/http"

	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// newPatch is overlay.NewPatch of the workspace lower under upper with
// opt and its repository's ignore rules, its notes tagged "codumentor".
// Rules over their bounds are answered as a client error (422
// ignore_rules_too_large).
func newPatch(lower, upper string, opt overlay.PatchOptions) (*overlay.Patch, error) {
	ignore, done, err := patchIgnore(lower, upper)
	if err != nil {
		return nil, err
	}
	defer done()
	opt.Ignore, opt.NoteTag = ignore, patchNoteTag
	p, err := overlay.NewPatch(lower, upper, opt)
	if errors.Is(err, git.ErrIgnoreLimit) {
		return nil, errIgnoreLimit(err)
	}
	return p, err
}

// patchNoteTag names Codumentor in the "#" lines of a workspace's patch
// ("# codumentor: not exported: ...").
const patchNoteTag = "codumentor"

// patchIgnore is the ignore rules of the workspace lower under upper, as
// overlay.PatchOptions.Ignore: the .gitignore files and
// .git/info/exclude of the merged view, read through descriptors. Call
// done when the patch is made.
func patchIgnore(lower, upper string) (ignore func(string, bool) (bool, error), done func(), err error) {
	return git.NewIgnore(noLinksFS{overlay.NewView(upper, lower)}).Ignored, func() {}, nil
}

// errIgnoreLimit answers a patch whose workspace's ignore rules are over
// their bounds: nothing is exported on a guess of what they ignore.
func errIgnoreLimit(err error) error {
	return apiError(http.StatusUnprocessableEntity, "ignore_rules_too_large", "the workspace's .gitignore rules are over their limits, so no patch is made: %v; make them smaller (fewer or shorter .gitignore files)", err)
}

// noLinksFS opens the regular files of a merged view for reading ignore
// rules as git does: a symlink anywhere on the path (git follows none
// for .gitignore) is fs.ErrInvalid, as is anything but a regular file.
// The view reads by descriptor, so a swap in between can change which
// rules apply but never leads a read out of the workspace.
type noLinksFS struct{ v *overlay.View }

func (n noLinksFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	for i, c := range name {
		if c != '/' && i != len(name)-1 {
			continue
		}
		prefix := name
		if c == '/' {
			prefix = name[:i]
		}
		st, err := n.v.Lstat(prefix)
		if err != nil {
			return nil, err
		}
		if last := prefix == name; (!last && !st.IsDir()) || (last && !st.Mode().IsRegular()) {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
		}
	}
	return n.v.OpenFile(name)
}
