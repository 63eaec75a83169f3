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
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// ErrOutsideWorkspace is wrapped by a file tool's error for a path that
// is absolute, escapes with "..", or goes through a symlink that leaves
// the workspace. Such paths are refused before any I/O on them.
var ErrOutsideWorkspace = overlay.ErrOutsideView

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

// fsName is the overlay.View name of the workspace path rel ("" the root).
func fsName(rel string) string { return show(rel) }

// newView is the merged view file tools read: upper over mid (read-only
// layers, top first: an isolated subagent's view stacks its own upper on
// its parent's upper and lower) over lower.
func newView(lower, upper string, mid []string) *overlay.View {
	return overlay.NewView(append(append([]string{upper}, mid...), lower)...)
}

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
	// direct, if set, may answer the call without the workspace (done).
	direct func(ctx context.Context, c *Call) (out string, done bool, err error)
}

func (t *fileTool) Spec() ToolSpec { return t.spec }

func (t *fileTool) Run(ctx context.Context, c *Call) (string, error) {
	if t.direct != nil {
		if out, done, err := t.direct(ctx, c); done {
			return out, err
		}
	}
	ws, err := t.e.workspace(ctx, c)
	if err != nil {
		return "", err
	}
	if ws.host {
		return "", errHostFiles
	}
	return t.run(ctx, ws, c)
}

func (e *Engine) fileTools() []Tool {
	max := e.cfg.MaxFileSize
	return []Tool{
		&fileTool{e: e, spec: ToolSpec{
			Name: "read_file",
			Description: fmt.Sprintf("Read lines of a text file of the workspace, numbered as cat -n numbers them (the number, a tab, the line). Paths are relative to the workspace root (/workspace in shell). "+
				"Without offset and limit it shows the file from its first line, at most %d lines and about %d bytes; the header says which lines of how many were shown and which offset to send for the next ones. Lines longer than %d bytes are cut.", defaultLines, e.readBudget(), maxLineShown),
			Parameters: schema([]string{"path"}, map[string]any{
				"path":   prop("string", "file path relative to the workspace root"),
				"offset": prop("integer", "the first line to show, counting from 1; default 1"),
				"limit":  prop("integer", fmt.Sprintf("how many lines to show; default %d", defaultLines)),
			}),
		}, direct: func(ctx context.Context, c *Call) (string, bool, error) {
			a, err := readArgs(c)
			if err != nil {
				return "", true, err
			}
			rel, err := cleanRel(a.Path)
			if err != nil || !isOutputPath(rel) {
				return "", false, nil
			}
			f, err := e.openOutput(c.Conversation, a.Path, rel)
			if err != nil {
				return "", true, err
			}
			defer f.Close()
			out, err := showLines(ctx, f, a.Path, rel, a.Offset, a.Limit, e.readBudget())
			return out, true, err
		}, run: func(ctx context.Context, ws *workspace, c *Call) (string, error) {
			a, err := readArgs(c)
			if err != nil {
				return "", err
			}
			return ws.readLines(ctx, a.Path, a.Offset, a.Limit, e.readBudget())
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
				if a.Recursive && underGit(p) {
					return true // .git/ is listed, its insides are git's
				}
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
			// One entry more than shown, so that fn can say it stopped.
			if a.Recursive {
				err = ws.view.Walk(fsName(rel), maxEntries+1, fn)
			} else {
				var ents []fs.DirEntry
				ents, _, err = ws.view.ReadDirPage(fsName(rel), "", maxEntries+1)
				for _, d := range ents {
					fi, _ := d.Info()
					if !fn(path.Join(rel, d.Name()), fi) {
						break
					}
				}
			}
			if err != nil {
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
			const maxMatches, maxLine, maxFiles, maxEntries = 100, 200, 20000, 100000
			var out []string
			files, entries := 0, 0
			search := func(p string, fi fs.FileInfo) bool {
				entries++
				if ctx.Err() != nil {
					return false
				}
				if !fi.Mode().IsRegular() || fi.Size() > max || underGit(p) {
					return true
				}
				if files++; files > maxFiles {
					out = append(out, fmt.Sprintf("[search stopped after %d files; give a narrower path]", maxFiles))
					return false
				}
				b, err := ws.view.ReadFileMax(p, max)
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
			fi, err := ws.view.Lstat(fsName(rel))
			if err != nil {
				return "", fileErr(a.Path, err)
			}
			if fi.IsDir() {
				err = ws.view.Walk(fsName(rel), maxEntries, search)
				if err == nil && entries >= maxEntries && files <= maxFiles && len(out) <= maxMatches {
					out = append(out, fmt.Sprintf("[search stopped after %d entries; give a narrower path]", maxEntries))
				}
			} else {
				search(rel, fi)
			}
			if err != nil {
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
	rel, err = ws.view.Resolve(fsName(rel), followLast)
	if rel == "." {
		rel = ""
	}
	return rel, err
}

// readFile resolves the workspace path p and reads the file it names,
// at most max bytes. It returns the resolved path too.
func (ws *workspace) readFile(p string, max int64) (string, []byte, error) {
	rel, err := ws.resolve(p, true)
	if err != nil {
		return "", nil, err
	}
	b, err := ws.view.ReadFileMax(fsName(rel), max)
	if err != nil {
		return "", nil, fileErr(p, err)
	}
	return rel, b, nil
}

// readFileArgs are read_file's arguments.
type readFileArgs struct {
	Path          string
	Offset, Limit int
}

func readArgs(c *Call) (readFileArgs, error) {
	var a readFileArgs
	if err := c.Args(&a); err != nil {
		return a, err
	}
	if a.Offset < 0 || a.Limit < 0 {
		return a, errors.New("offset and limit count lines from 1; they cannot be negative")
	}
	return a, nil
}

// readBudget is the bytes of numbered lines one read_file result holds:
// under MaxOutput, so that the result reaches the model whole.
func (e *Engine) readBudget() int {
	return max(e.cfg.MaxOutput-1024, e.cfg.MaxOutput/2)
}

// readLines resolves the workspace path p and shows lines offset.. of
// the file it names (see readLines), with a header saying what part of
// the file that is and how to page on.
func (ws *workspace) readLines(ctx context.Context, p string, offset, limit, budget int) (string, error) {
	rel, err := ws.resolve(p, true)
	if err != nil {
		return "", err
	}
	f, err := ws.view.OpenFile(fsName(rel))
	if err != nil {
		return "", fileErr(p, err)
	}
	defer f.Close()
	return showLines(ctx, f, p, rel, offset, limit, budget)
}

// showLines shows lines offset.. of f (the workspace path p, resolved to
// rel) with a header saying what part of the file that is and how to page
// on.
func showLines(ctx context.Context, f *os.File, p, rel string, offset, limit, budget int) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", fileErr(p, overlay.ViewError(rel, err))
	}
	size := fi.Size()
	skipped, at, lines := 0, int64(0), -1
	if x := indexOf(ctx, f); x != nil {
		skipped, at = x.seek(max(offset, 1) - 1)
		lines = x.lines
		if _, err := f.Seek(at, io.SeekStart); err != nil {
			return "", fileErr(p, overlay.ViewError(rel, err))
		}
	}
	body, lr, err := readLinesFrom(ctx, f, offset, limit, budget, skipped, at, lines)
	if errors.Is(err, errPastEnd) {
		return "", fmt.Errorf("%s: %w; send a smaller offset", p, err)
	}
	if err != nil {
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		return "", fileErr(p, overlay.ViewError(rel, err))
	}
	total := commas(int64(lr.Total))
	if !lr.Known {
		total = "at least " + total
	}
	ends := ""
	if lr.CRLF {
		ends = "; CRLF line ends, shown without the CR"
	}
	if lr.Last < lr.First {
		return fmt.Sprintf("%s: empty file (0 lines, %s bytes)", p, commas(size)), nil
	}
	head := fmt.Sprintf("%s: lines %d–%d of %s (bytes %s–%s of %s%s)\n", p, lr.First, lr.Last, total,
		commas(lr.Start), commas(lr.End), commas(size), ends)
	if lr.Last < lr.Total || !lr.Known {
		body += fmt.Sprintf("[more lines follow: send offset %d to read on (with limit for how many)]", lr.Last+1)
	}
	return head + body, nil
}

// writeScript writes stdin to $1, creating its parent directories, and
// refuses a symlink at $1 (checked host-side before, checked again here
// in case one appeared since).
const writeScript = `[ -L "$1" ] && { echo "$1 is a symlink" >&2; exit 3; }; mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`

// writeTimeout bounds a write_file command: writing at most MaxFileSize
// bytes to a regular file takes far less.
const writeTimeout = 30 * time.Second

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
	if inGit(rel) {
		// git runs what .git/config and hooks name: a write here would
		// let an auto-approved "git status" run the model's program.
		return fmt.Errorf("%s is in a .git directory, which the file tools do not write; change the repository with git commands in shell", p)
	}
	fi, err := ws.view.Lstat(fsName(rel))
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink; write to the file it points to instead", p)
	case err == nil && !fi.Mode().IsRegular():
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
		// A FIFO swapped in after the check above would block cat until
		// the turn is cancelled.
		cmd.Timeout = min(e.cfg.CommandTimeout, writeTimeout)
		return cmd.Start()
	})
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("writing %s timed out after %v and was stopped (is it a FIFO or a device now?)", p, cmd.Timeout)
	}
	if err != nil {
		if msg := strings.TrimSpace(out.String()); msg != "" {
			return fmt.Errorf("writing %s failed: %s", p, msg)
		}
		return fmt.Errorf("writing %s failed: %w", p, err)
	}
	return nil
}

// inGit reports whether the workspace path rel is a .git (directory or
// gitdir file) or inside one, at any level.
func inGit(rel string) bool {
	return slices.Contains(strings.Split(rel, "/"), ".git")
}

// underGit reports whether rel is inside a .git directory (not .git
// itself).
func underGit(rel string) bool {
	parts := strings.Split(rel, "/")
	return slices.Contains(parts[:len(parts)-1], ".git")
}
