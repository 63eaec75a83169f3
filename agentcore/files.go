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
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/codumentor/codumentor/sandboxkit"
)

// ErrOutsideWorkspace is wrapped by a file tool's error for a path that
// is absolute, escapes with "..", or goes through a symlink that leaves
// the workspace. Such paths are refused before any I/O on them.
var ErrOutsideWorkspace = errors.New("path leaves the workspace")

// maxSymlinks bounds the symlinks followed while resolving one path.
const maxSymlinks = 40

// cleanRel checks a path the model gave, lexically, before anything
// touches the file system: it must be relative to /workspace and stay
// inside it. "" and "." name the workspace root.
func cleanRel(p string) (string, error) {
	switch {
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("%w: %q is absolute; give a path relative to the workspace root /workspace, e.g. \"src/main.go\"", ErrOutsideWorkspace, p)
	}
	c := path.Clean("/" + p)[1:] // "/.." cleans to "/": compare the unrooted form too
	if u := path.Clean(p); u == ".." || strings.HasPrefix(u, "../") {
		return "", fmt.Errorf("%w: %q goes above the workspace root with \"..\"", ErrOutsideWorkspace, p)
	}
	return c, nil // "" is the root
}

// view is the merged view of a workspace as overlayfs shows it at
// /workspace: upper over lower, where a whiteout in upper (a 0/0
// character device) deletes the lower entry and an opaque upper
// directory (xattr user.overlay.opaque=y, the userxattr form used in a
// user namespace) hides the lower directory below it. It reads the layer
// directories from the host: file tools are trusted server code (DESIGN
// §1), confined by resolving every path inside the view first.
type view struct {
	lower, upper string
}

// entry is a path found in the view.
type entry struct {
	fi    fs.FileInfo
	layer string // the layer directory it lives in
	// lowerDir says that lower has a real directory here that shows
	// through (for a directory entry: its listing merges lower's).
	lowerDir bool
}

func (e entry) isLink() bool { return e.fi.Mode()&fs.ModeSymlink != 0 }

func isWhiteout(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode()&fs.ModeCharDevice != 0 && fi.Mode()&fs.ModeDevice != 0 && st.Rdev == 0
}

func isOpaque(dir string) bool {
	var buf [4]byte
	n, err := syscall.Getxattr(dir, "user.overlay.opaque", buf[:])
	return err == nil && string(buf[:n]) == "y"
}

// lstat is os.Lstat with "missing" (also below a non-directory) as nil.
func lstat(p string) (fs.FileInfo, error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	return fi, err
}

// lookup finds rel (clean, relative, "" the root) in the view, walking
// both layers one component at a time: a layer is looked into below a
// component only where that layer has a real directory (never a symlink),
// so no host path is resolved through a link. A symlink before the last
// component is an error (resolve replaces those first).
func (v *view) lookup(rel string) (entry, error) {
	root, err := os.Lstat(v.upper)
	if err != nil {
		return entry{}, err
	}
	e := entry{fi: root, layer: v.upper, lowerDir: !isOpaque(v.upper)}
	if rel == "" {
		return e, nil
	}
	cur := ""
	for comp := range strings.SplitSeq(rel, "/") {
		if !e.fi.IsDir() {
			if e.isLink() {
				return entry{}, fmt.Errorf("internal: unresolved symlink %q in %q", cur, rel)
			}
			return entry{}, fmt.Errorf("%q is not a directory", cur)
		}
		cur = path.Join(cur, comp)
		var up, low fs.FileInfo
		if e.layer == v.upper {
			// Only a directory in upper can have upper entries below it.
			if up, err = lstat(filepath.Join(v.upper, cur)); err != nil {
				return entry{}, err
			}
			if up != nil && isWhiteout(up) {
				return entry{}, fs.ErrNotExist
			}
		}
		if e.lowerDir && (up == nil || up.IsDir()) {
			if low, err = lstat(filepath.Join(v.lower, cur)); err != nil {
				return entry{}, err
			}
		}
		switch {
		case up != nil:
			// Lower shows through an upper directory only where it has a
			// directory too and upper's is not opaque; a lower symlink or
			// file there is hidden, as overlayfs hides it.
			e = entry{fi: up, layer: v.upper, lowerDir: up.IsDir() && low != nil && low.IsDir() && !isOpaque(filepath.Join(v.upper, cur))}
		case low != nil:
			e = entry{fi: low, layer: v.lower, lowerDir: low.IsDir()}
		default:
			return entry{}, fs.ErrNotExist
		}
	}
	return e, nil
}

// resolve follows the symlinks of rel inside the view, one component at a
// time, and returns the symlink-free path it names. A link whose target
// is absolute or climbs above the workspace root is refused before its
// target is looked at. followLast says whether a symlink in the last
// component is followed (reads) or returned as is (writes, which then
// refuse it). From the first missing component on, the path is returned
// as is (reads then fail; writes create it).
func (v *view) resolve(rel string, followLast bool) (string, error) {
	done, todo := "", rel
	for hops := 0; todo != ""; {
		comp, rest, _ := strings.Cut(todo, "/")
		next := path.Join(done, comp)
		e, err := v.lookup(next)
		if errors.Is(err, fs.ErrNotExist) {
			// Nothing below a missing entry exists, so no symlink either:
			// a write creates it all.
			return path.Join(next, rest), nil
		}
		if err != nil {
			return "", err
		}
		if e.isLink() && (rest != "" || followLast) {
			if hops++; hops > maxSymlinks {
				return "", fmt.Errorf("too many levels of symlinks in %q", rel)
			}
			target, err := os.Readlink(filepath.Join(e.layer, next))
			if err != nil {
				return "", err
			}
			if strings.HasPrefix(target, "/") {
				return "", fmt.Errorf("%w: %q is a symlink to the absolute path %q; only links within the workspace are followed", ErrOutsideWorkspace, next, target)
			}
			t := path.Join(done, target)
			if t == ".." || strings.HasPrefix(t, "../") {
				return "", fmt.Errorf("%w: %q is a symlink to %q, which is outside the workspace", ErrOutsideWorkspace, next, target)
			}
			if t == "." {
				t = ""
			}
			done, todo = "", strings.TrimPrefix(path.Join(t, rest), "/")
			if todo == "." {
				todo = ""
			}
			continue
		}
		done, todo = next, rest
	}
	return done, nil
}

// readFile returns the content of the regular file rel (resolved), at
// most max bytes.
func (v *view) readFile(rel string, max int64) ([]byte, error) {
	e, err := v.lookup(rel)
	if err != nil {
		return nil, err
	}
	if !e.fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%q is not a regular file", show(rel))
	}
	if e.fi.Size() > max {
		return nil, fmt.Errorf("%q is %d bytes, more than the read limit of %d bytes; use shell (e.g. head, sed -n) to read part of it", show(rel), e.fi.Size(), max)
	}
	// The open is confined to the layer directory even if the tree
	// changed since the lookup; O_NONBLOCK keeps a FIFO swapped in from
	// blocking us.
	root, err := os.OpenRoot(e.layer)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%q is not a regular file", show(rel))
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%q is more than the read limit of %d bytes", show(rel), max)
	}
	return b, nil
}

// dirEntry is one entry of a merged directory.
type dirEntry struct {
	name string
	fi   fs.FileInfo
}

// readDir lists the merged directory rel (resolved), sorted by name.
func (v *view) readDir(rel string) ([]dirEntry, error) {
	e, err := v.lookup(rel)
	if err != nil {
		return nil, err
	}
	if !e.fi.IsDir() {
		return nil, fmt.Errorf("%q is not a directory", show(rel))
	}
	out := map[string]dirEntry{}
	hidden := map[string]bool{}
	if e.layer == v.upper {
		ents, err := os.ReadDir(filepath.Join(v.upper, rel))
		if err != nil {
			return nil, err
		}
		for _, de := range ents {
			fi, err := de.Info()
			if err != nil {
				continue // gone meanwhile
			}
			if isWhiteout(fi) {
				hidden[de.Name()] = true
				continue
			}
			out[de.Name()] = dirEntry{de.Name(), fi}
		}
	}
	if e.lowerDir || e.layer == v.lower {
		ents, err := os.ReadDir(filepath.Join(v.lower, rel))
		if err != nil {
			return nil, err
		}
		for _, de := range ents {
			if _, ok := out[de.Name()]; ok || hidden[de.Name()] {
				continue
			}
			fi, err := de.Info()
			if err != nil {
				continue
			}
			out[de.Name()] = dirEntry{de.Name(), fi}
		}
	}
	list := make([]dirEntry, 0, len(out))
	for _, d := range out {
		list = append(list, d)
	}
	slices.SortFunc(list, func(a, b dirEntry) int { return strings.Compare(a.name, b.name) })
	return list, nil
}

// walk visits the merged tree below rel (resolved) depth-first in name
// order, without following symlinks, until fn returns false.
func (v *view) walk(rel string, fn func(rel string, fi fs.FileInfo) bool) error {
	ents, err := v.readDir(rel)
	if err != nil {
		return err
	}
	for _, d := range ents {
		p := path.Join(rel, d.name)
		if !fn(p, d.fi) {
			return errStop
		}
		if d.fi.IsDir() {
			if err := v.walk(p, fn); err == errStop {
				return err
			}
		}
	}
	return nil
}

var errStop = errors.New("stop")

// show names the workspace root in messages.
func show(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// fileTool is one of the built-in file tools of an Engine.
type fileTool struct {
	e    *Engine
	spec ToolSpec
	run  func(ctx context.Context, ws *workspace, c *Call) (string, error)
}

func (t *fileTool) Spec() ToolSpec { return t.spec }

func (t *fileTool) Run(ctx context.Context, c *Call) (string, error) {
	ws, err := t.e.workspace(ctx, c)
	if err != nil {
		return "", err
	}
	return t.run(ctx, ws, c)
}

func (e *Engine) fileTools() []Tool {
	max := e.cfg.MaxFileSize
	return []Tool{
		&fileTool{e: e, spec: ToolSpec{
			Name:        "read_file",
			Description: fmt.Sprintf("Read a text file of the workspace. Paths are relative to the workspace root (/workspace in shell). At most %d bytes.", max),
			Parameters:  schema([]string{"path"}, map[string]any{"path": prop("string", "file path relative to the workspace root")}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct{ Path string }
			if err := c.Args(&a); err != nil {
				return "", err
			}
			_, b, err := ws.readFile(a.Path, max)
			if err != nil {
				return "", err
			}
			return string(b), nil
		}},
		&fileTool{e: e, spec: ToolSpec{
			Name:        "write_file",
			Description: fmt.Sprintf("Create or overwrite a file of the workspace with content, creating parent directories. At most %d bytes.", max),
			Parameters: schema([]string{"path", "content"}, map[string]any{
				"path":    prop("string", "file path relative to the workspace root"),
				"content": prop("string", "the whole new content"),
			}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct{ Path, Content string }
			if err := c.Args(&a); err != nil {
				return "", err
			}
			if err := e.writeFile(ctx, c, ws, a.Path, []byte(a.Content)); err != nil {
				return "", err
			}
			return fmt.Sprintf("wrote %d bytes to %s", len(a.Content), a.Path), nil
		}},
		&fileTool{e: e, spec: ToolSpec{
			Name:        "edit_file",
			Description: "Replace old_string with new_string in a file of the workspace. old_string must occur exactly once unless replace_all is true.",
			Parameters: schema([]string{"path", "old_string", "new_string"}, map[string]any{
				"path":        prop("string", "file path relative to the workspace root"),
				"old_string":  prop("string", "the exact text to replace"),
				"new_string":  prop("string", "the replacement"),
				"replace_all": prop("boolean", "replace every occurrence"),
			}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct {
				Path       string
				OldString  string `json:"old_string"`
				NewString  string `json:"new_string"`
				ReplaceAll bool   `json:"replace_all"`
			}
			if err := c.Args(&a); err != nil {
				return "", err
			}
			if a.OldString == "" {
				return "", errors.New("old_string is empty")
			}
			rel, b, err := ws.readFile(a.Path, max)
			if err != nil {
				return "", err
			}
			n := bytes.Count(b, []byte(a.OldString))
			switch {
			case n == 0:
				return "", fmt.Errorf("old_string not found in %s; nothing changed", a.Path)
			case n > 1 && !a.ReplaceAll:
				return "", fmt.Errorf("old_string occurs %d times in %s; give more context to make it unique, or set replace_all; nothing changed", n, a.Path)
			}
			if !a.ReplaceAll {
				n = 1
			}
			nb := bytes.Replace(b, []byte(a.OldString), []byte(a.NewString), n)
			if err := e.writeFile(ctx, c, ws, rel, nb); err != nil {
				return "", err
			}
			return fmt.Sprintf("replaced %d occurrence(s) in %s", n, a.Path), nil
		}},
		&fileTool{e: e, spec: ToolSpec{
			Name:        "list_files",
			Description: "List a directory of the workspace (directories end with /, symlinks with @). recursive lists the whole tree below it, up to 1000 entries.",
			Parameters: schema(nil, map[string]any{
				"path":      prop("string", "directory relative to the workspace root; default the root"),
				"recursive": prop("boolean", "list everything below path"),
			}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct {
				Path      string
				Recursive bool
			}
			if err := c.Args(&a); err != nil {
				return "", err
			}
			rel, err := ws.resolve(a.Path, true)
			if err != nil {
				return "", err
			}
			const maxEntries = 1000
			var lines []string
			fn := func(p string, fi fs.FileInfo) bool {
				if len(lines) == maxEntries {
					lines = append(lines, fmt.Sprintf("[listing stopped after %d entries]", maxEntries))
					return false
				}
				name := p
				if rel != "" {
					name = strings.TrimPrefix(p, rel+"/")
				}
				switch {
				case fi.IsDir():
					name += "/"
				case fi.Mode()&fs.ModeSymlink != 0:
					name += "@"
				}
				lines = append(lines, name)
				return true
			}
			if a.Recursive {
				err = ws.view.walk(rel, fn)
			} else {
				var ents []dirEntry
				ents, err = ws.view.readDir(rel)
				for _, d := range ents {
					if !fn(path.Join(rel, d.name), d.fi) {
						break
					}
				}
			}
			if err != nil && err != errStop {
				return "", fileErr(a.Path, err)
			}
			if len(lines) == 0 {
				return "(empty directory)", nil
			}
			return strings.Join(lines, "\n"), nil
		}},
		&fileTool{e: e, spec: ToolSpec{
			Name:        "search_files",
			Description: fmt.Sprintf("Search the workspace's text files (up to %d bytes each) for a Go regular expression (RE2 syntax); prints path:line: text, at most 100 matches.", max),
			Parameters: schema([]string{"pattern"}, map[string]any{
				"pattern": prop("string", "Go regular expression"),
				"path":    prop("string", "directory (or file) to search, relative to the workspace root; default the root"),
			}),
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			var a struct{ Pattern, Path string }
			if err := c.Args(&a); err != nil {
				return "", err
			}
			re, err := regexp.Compile(a.Pattern)
			if err != nil {
				return "", fmt.Errorf("invalid pattern: %v", err)
			}
			rel, err := ws.resolve(a.Path, true)
			if err != nil {
				return "", err
			}
			// maxFiles bounds the work of one search in a huge tree.
			const maxMatches, maxLine, maxFiles = 100, 200, 20000
			var out []string
			files := 0
			search := func(p string, fi fs.FileInfo) bool {
				if ctx.Err() != nil {
					return false
				}
				if !fi.Mode().IsRegular() || fi.Size() > max {
					return true
				}
				if files++; files > maxFiles {
					out = append(out, fmt.Sprintf("[search stopped after %d files; give a narrower path]", maxFiles))
					return false
				}
				b, err := ws.view.readFile(p, max)
				if err != nil || bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 {
					return true // unreadable or binary
				}
				for i, line := range strings.Split(string(b), "\n") {
					if !re.MatchString(line) {
						continue
					}
					if len(out) == maxMatches {
						out = append(out, fmt.Sprintf("[search stopped after %d matches]", maxMatches))
						return false
					}
					if len(line) > maxLine {
						line = line[:maxLine] + "…"
					}
					out = append(out, fmt.Sprintf("%s:%d: %s", p, i+1, line))
				}
				return true
			}
			e, err := ws.view.lookup(rel)
			if err != nil {
				return "", fileErr(a.Path, err)
			}
			if e.fi.IsDir() {
				err = ws.view.walk(rel, search)
			} else {
				search(rel, e.fi)
			}
			if err != nil && err != errStop {
				return "", fileErr(a.Path, err)
			}
			if err := ctx.Err(); err != nil {
				return "", err
			}
			if len(out) == 0 {
				return "no matches", nil
			}
			return strings.Join(out, "\n"), nil
		}},
	}
}

// fileErr words a file system error for the model.
func fileErr(p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: no such file or directory in the workspace", p)
	}
	return err
}

// resolve checks p lexically, then resolves it inside the view.
func (ws *workspace) resolve(p string, followLast bool) (string, error) {
	rel, err := cleanRel(p)
	if err != nil {
		return "", err
	}
	return ws.view.resolve(rel, followLast)
}

// readFile resolves the workspace path p and reads the file it names,
// at most max bytes. It returns the resolved path too.
func (ws *workspace) readFile(p string, max int64) (string, []byte, error) {
	rel, err := ws.resolve(p, true)
	if err != nil {
		return "", nil, err
	}
	b, err := ws.view.readFile(rel, max)
	if err != nil {
		return "", nil, fileErr(p, err)
	}
	return rel, b, nil
}

// writeScript writes stdin to $1, creating its parent directories, and
// refuses a symlink at $1 (checked host-side before, checked again here
// in case one appeared since).
const writeScript = `[ -L "$1" ] && { echo "$1 is a symlink" >&2; exit 3; }; mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`

// writeFile writes data to the workspace path p (as the model gave it, or
// already resolved). The write goes through the conversation's sandbox,
// so it lands in the upper layer exactly as a shell command's would:
// overlayfs does not promise that changes made to the upper directory
// behind a mounted overlay's back become visible inside it, and writing
// as the sandbox does gives the write no more power than the shell has.
// A symlink as the last component is refused: never write through one.
func (e *Engine) writeFile(ctx context.Context, c *Call, ws *workspace, p string, data []byte) error {
	max := e.cfg.MaxFileSize
	if int64(len(data)) > max {
		return fmt.Errorf("content is %d bytes, more than the write limit of %d bytes", len(data), max)
	}
	rel, err := ws.resolve(p, false)
	if err != nil {
		return err
	}
	if rel == "" {
		return errors.New("cannot write the workspace root; name a file")
	}
	ent, err := ws.view.lookup(rel)
	switch {
	case err == nil && ent.isLink():
		return fmt.Errorf("%s is a symlink; write to the file it points to instead", p)
	case err == nil && !ent.fi.Mode().IsRegular():
		return fmt.Errorf("%s exists and is not a regular file", p)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fileErr(p, err)
	}
	var out bytes.Buffer
	var cmd *sandboxkit.Cmd
	err = e.startIn(ctx, c, func(ws *workspace) error {
		cmd = ws.sess.Command(ctx, "sh", "-c", writeScript, "sh", "/workspace/"+rel)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(data), &out, &out
		cmd.OutputLimit = 4096
		return cmd.Start()
	})
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		if msg := strings.TrimSpace(out.String()); msg != "" {
			return fmt.Errorf("writing %s failed: %s", p, msg)
		}
		return fmt.Errorf("writing %s failed: %w", p, err)
	}
	return nil
}
