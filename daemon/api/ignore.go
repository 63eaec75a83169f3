package api

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/codumentor/codumentor/agentcore"
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

// WorkspaceDir is the body of GET .../workspace/files for a directory:
// its page of entries, each marked when the workspace's ignore rules
// ignore it (as the diff and the push leave it out).
type WorkspaceDir struct {
	*agentcore.WorkspaceFile
	Entries []WorkspaceEntry `json:"entries"`
	// IgnoreError says why no entry is marked: the rules could not be
	// read (over their bounds), so which ones apply is unknown.
	IgnoreError string `json:"ignore_error,omitempty"`
}

// WorkspaceEntry is an entry of a WorkspaceDir.
type WorkspaceEntry struct {
	agentcore.WorkspaceEntry
	Ignored bool `json:"ignored,omitempty"`
}

// workspaceDir marks the entries of f, a directory of conversation's
// workspace, by the ignore rules the patch applies (newPatch).
func (s *Server) workspaceDir(ctx context.Context, user, conversation string, f *agentcore.WorkspaceFile) (WorkspaceDir, error) {
	d := WorkspaceDir{WorkspaceFile: f, Entries: make([]WorkspaceEntry, len(f.Entries))}
	for i, e := range f.Entries {
		d.Entries[i].WorkspaceEntry = e
	}
	lower, err := s.d.Workspaces.Lower(ctx, user, conversation)
	if err != nil {
		return d, err
	}
	// ReadWorkspace made the layer if it was missing.
	layer, err := s.d.Layers.Get(conversation)
	if err != nil {
		return d, err
	}
	ignored, done, err := patchIgnore(lower, layer.Upper)
	if err != nil {
		return d, err
	}
	defer done()
	for i, e := range d.Entries {
		if strings.EqualFold(e.Name, ".git") {
			// Never in a patch, whatever the rules say.
			d.Entries[i].Ignored = true
			continue
		}
		ok, err := ignored(path.Join(f.Path, e.Name), e.Type == "dir")
		if err != nil {
			for j := range d.Entries {
				d.Entries[j].Ignored = false
			}
			var limit *Error
			if errors.As(errIgnoreLimit(err), &limit) && errors.Is(err, git.ErrIgnoreLimit) {
				d.IgnoreError = limit.Message
			} else {
				// The error may name the layer's host directory.
				s.log.Warn("reading a workspace's ignore rules failed", "conversation", conversation, "err", err)
				d.IgnoreError = "the workspace's .gitignore rules could not be read; the server log has the details"
			}
			break
		}
		d.Entries[i].Ignored = ok
	}
	return d, nil
}
