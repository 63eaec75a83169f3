package agentcore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// WorkspaceEntry is one entry of a workspace directory.
type WorkspaceEntry struct {
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	Size int64  `json:"size"`
}

// WorkspaceFile is what a workspace path names: a file's content or one
// page of a directory's entries.
type WorkspaceFile struct {
	Path    string           `json:"path"` // resolved, relative to /workspace; "" is the root
	Dir     bool             `json:"dir"`
	Content []byte           `json:"-"`
	Entries []WorkspaceEntry `json:"entries,omitempty"`
	// NextCursor is set when the directory has entries after this page:
	// pass it as the cursor to ReadWorkspace for the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// WorkspacePageSize is how many entries of a directory ReadWorkspace
// returns at most, in name order (byte-wise).
const WorkspacePageSize = 1000

// ReadWorkspace reads path p of the conversation's workspace as its
// sandbox sees it (the upper layer over the lower tree), confined exactly
// like the read_file tool: an absolute path, ".." or a symlink leaving the
// workspace fails with ErrOutsideWorkspace before any I/O on it, and files
// are read up to Config.MaxFileSize. A directory is listed a page of
// WorkspacePageSize entries at a time: cursor "" starts at the first
// entry, and a page's NextCursor continues after its last. It starts no
// sandbox. The caller checks that user owns the conversation.
func (e *Engine) ReadWorkspace(ctx context.Context, user, conversation, p, cursor string) (*WorkspaceFile, error) {
	rel, err := cleanRel(p)
	if err != nil {
		return nil, err
	}
	after, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || cursor != "" && len(after) == 0 {
		return nil, fmt.Errorf("invalid cursor %q: pass the next_cursor of the previous page as it was", cursor)
	}
	lower, err := e.cfg.Workspaces.Lower(ctx, user, conversation)
	if err != nil {
		return nil, fmt.Errorf("workspace of this conversation: %w", err)
	}
	layer, err := e.layer(conversation)
	if err != nil {
		return nil, err
	}
	mid, err := e.midLayers(ctx, user, conversation)
	if err != nil {
		return nil, err
	}
	v := newView(lower, layer.Upper, reversed(mid))
	r, err := v.Resolve(fsName(rel), true)
	if err != nil {
		return nil, err
	}
	if rel = r; rel == "." {
		rel = ""
	}
	fi, err := v.Lstat(r)
	if err != nil {
		return nil, fileErr(p, err)
	}
	f := &WorkspaceFile{Path: rel}
	if !fi.IsDir() {
		if f.Content, err = v.ReadFileMax(r, e.cfg.MaxFileSize); err != nil {
			return nil, fileErr(p, err)
		}
		return f, nil
	}
	list, more, err := v.ReadDirPage(r, string(after), WorkspacePageSize)
	if err != nil {
		return nil, fileErr(p, err)
	}
	f.Dir, f.Entries = true, make([]WorkspaceEntry, len(list))
	for i, d := range list {
		typ := "other"
		switch m := d.Type(); {
		case m.IsRegular():
			typ = "file"
		case m.IsDir():
			typ = "dir"
		case m&fs.ModeSymlink != 0:
			typ = "symlink"
		}
		var size int64
		if info, err := d.Info(); err == nil {
			size = info.Size()
		}
		f.Entries[i] = WorkspaceEntry{Name: d.Name(), Type: typ, Size: size}
	}
	if more {
		f.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(list[len(list)-1].Name()))
	}
	return f, nil
}

// layer returns the conversation's overlay layer, made if missing. Its
// error names no host path (it reaches the model and API clients); the
// log has the whole one.
func (e *Engine) layer(conversation string) (*overlay.Layer, error) {
	l, err := e.cfg.Layers.Get(conversation)
	if errors.Is(err, fs.ErrNotExist) {
		l, err = e.cfg.Layers.Create(conversation)
	}
	if err != nil {
		e.log.Error("opening a workspace layer failed", "conversation", conversation, "err", err)
		return nil, errors.New("the conversation's workspace layer could not be opened; the server log has the details")
	}
	return l, nil
}

// pathsHidden is an error whose text had host paths replaced.
type pathsHidden struct {
	msg string
	err error
}

func (p *pathsHidden) Error() string { return p.msg }
func (p *pathsHidden) Unwrap() error { return p.err }

// hidePaths returns err with the project directory lower and the layer
// directory layer replaced in its text by what the sandbox calls them;
// errors.Is and errors.As still see err.
func hidePaths(err error, lower, layer string) error {
	msg := strings.NewReplacer(layer+"/upper", "/workspace (upper layer)", layer, "(the conversation's layer)", lower, "/workspace (project)").Replace(err.Error())
	if msg == err.Error() {
		return err
	}
	return &pathsHidden{msg, err}
}

// Forget ends everything the engine holds for a conversation being
// deleted: its turn is cancelled (and waited for), its sandbox closed, so
// its layer can be removed, and its event streams end. It is final: call
// it before deleting the conversation, and StartTurn refuses the ID from
// then on (ErrNotFound), also for a request that checked ownership before
// the deletion; so does Subscribe (a closed channel).
func (e *Engine) Forget(conversation string) {
	e.mu.Lock()
	if !e.forgotten[conversation] {
		e.forgotten[conversation] = true
		e.forgottenIDs = append(e.forgottenIDs, conversation)
		if len(e.forgottenIDs) > forgottenKept {
			delete(e.forgotten, e.forgottenIDs[0])
			e.forgottenIDs = e.forgottenIDs[1:]
		}
	}
	c := e.convs[conversation]
	e.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	c.gone = true
	t := c.turn
	for wake := range c.subs {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
	if t != nil {
		t.Cancel()
		<-t.done
	}
	c.wsMu.Lock()
	if c.ws != nil {
		c.ws.sess.Close()
		c.ws = nil
	}
	e.dropOwed(c)
	c.wsMu.Unlock()
	c.mu.Lock()
	idle := len(c.subs) == 0 && c.turn == nil
	c.mu.Unlock()
	if idle {
		e.mu.Lock()
		delete(e.convs, conversation)
		e.mu.Unlock()
	}
}

// closeSandbox closes the conversation's sandbox, so that no process
// holds its layer, unless a background job runs in it (ErrWorkspaceBusy).
// The caller holds c.wsMu.
func (c *conv) closeSandbox() error {
	if c.ws == nil {
		return nil
	}
	for _, j := range c.ws.sess.Jobs() {
		if j.Running {
			return fmt.Errorf("%w: background job %d runs in its sandbox; stop it first", ErrWorkspaceBusy, j.ID)
		}
	}
	c.ws.sess.Close()
	c.ws = nil
	return nil
}

// ErrWorkspaceBusy refuses to discard a workspace while something may
// write to it: a turn runs in the conversation, or a background job in
// its sandbox. Nothing was changed.
var ErrWorkspaceBusy = errors.New("agentcore: the workspace is in use")

// DiscardWorkspace drops the conversation's changes to its workspace:
// its sandbox is closed (which unmounts the overlay, so no process holds
// the files) and its layer removed, so that their disk space comes back
// now; the next call starts from the project as it was. It refuses with
// ErrWorkspaceBusy while a turn or a background job runs.
func (e *Engine) DiscardWorkspace(conversation string) error {
	c := e.conv(conversation)
	c.mu.Lock()
	turn := c.turn != nil
	c.mu.Unlock()
	if turn {
		return fmt.Errorf("%w: a turn is running; discard after its turn_finished event, or cancel it", ErrWorkspaceBusy)
	}
	// Held throughout: no sandbox starts on the layer meanwhile.
	c.wsMu.Lock()
	defer c.wsMu.Unlock()
	if err := c.closeSandbox(); err != nil {
		return err
	}
	e.dropOwed(c)
	if err := e.cfg.Layers.Remove(conversation); err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.log.Error("discarding a workspace layer failed", "conversation", conversation, "err", err)
		return errors.New("the workspace's changes could not be removed; the server log has the details")
	}
	return nil
}
