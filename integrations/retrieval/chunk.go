package retrieval

import (
	"bytes"
	"path"
	"strings"
	"unicode/utf8"
)

// Chunk is a piece of one file as indexed and found.
type Chunk struct {
	Repository string
	// Commit is the commit the chunk was indexed at: a file unchanged by
	// later syncs keeps its chunks, and their commit.
	Commit    string
	Path      string
	StartLine int // 1-based, inclusive
	EndLine   int
	Language  string
	Text      string
	// Vector is the chunk's embedding, when a model is configured.
	Vector []float32

	// terms(Path) and terms(Text), when computed ahead of the backend.
	pathTerms, terms string
	termsSet         bool
	// query is the file's row of the query language (querysearch.go),
	// on its first chunk when an Index computed it.
	query *fileQuery
	// file, on the first chunk of a file an Index ingests, holds the
	// file's own fields (its symbols and doc comments); a backend that
	// ranks files computes them itself when a chunk lacks them.
	file *fileFields
}

// fileFields are the fields a file is ranked by besides its chunks'
// text: the names it defines and its doc comments (extractSymbols), and
// their terms, computed once.
type fileFields struct {
	symbols, docs      string
	symTerms, docTerms string
	termsSet           bool
}

// A file's docs field holds the first paragraph of each doc comment, at
// most fieldDoc bytes of it, and at most fieldDocs bytes in all: the
// summaries that say what a file is about, not its comments' text again
// (the chunks have it), which FTS5 would index a second time.
const (
	fieldDoc  = 512
	fieldDocs = 8 << 10
)

// newFileFields are the fields of a file that defines syms
// (extractSymbols).
func newFileFields(syms []Symbol) *fileFields {
	var names, docs strings.Builder
	for _, s := range syms {
		if s.Name != "" {
			names.WriteString(s.Name)
			names.WriteByte(' ')
		}
		if d := s.Doc; d != "" && docs.Len() < fieldDocs {
			if i := strings.Index(d, "\n\n"); i >= 0 {
				d = d[:i]
			}
			if len(d) > fieldDoc { // at a space: no word cut in two
				if j := strings.LastIndexByte(d[:fieldDoc], ' '); j > 0 {
					d = d[:j]
				} else {
					d = strings.ToValidUTF8(d[:fieldDoc], "")
				}
			}
			docs.WriteString(d)
			docs.WriteByte('\n')
		}
	}
	return &fileFields{symbols: names.String(), docs: docs.String()}
}

// indexTerms are terms(f.symbols) and terms(f.docs), computed once.
func (f *fileFields) indexTerms() (symbols, docs string) {
	if !f.termsSet {
		f.symTerms, f.docTerms, f.termsSet = terms(f.symbols), terms(f.docs), true
	}
	return f.symTerms, f.docTerms
}

// indexTerms are terms(c.Path) and terms(c.Text), computed once.
func (c *Chunk) indexTerms() (path, body string) {
	if !c.termsSet {
		c.pathTerms, c.terms, c.termsSet = terms(c.Path), terms(c.Text), true
	}
	return c.pathTerms, c.terms
}

// Chunking limits.
const (
	chunkLines   = 60       // about this many lines per chunk
	chunkOverlap = 10       // lines repeated between windows of a long block
	chunkBytes   = 16 << 10 // and at most this many bytes
	binaryProbe  = 8 << 10  // a NUL in the first 8 KiB: binary
)

// skipReason says why a file is not indexed, from its path and content
// ("" = index it).
func skipReason(p string, data []byte) string {
	if vendored(p) {
		return "vendored"
	}
	if bytes.IndexByte(data[:min(len(data), binaryProbe)], 0) >= 0 {
		return "binary"
	}
	if generated(data) {
		return "generated"
	}
	if minified(p, data) {
		return "minified"
	}
	return ""
}

// vendored: third-party trees copied into the repository.
func vendored(p string) bool {
	for _, dir := range []string{"vendor", "node_modules"} {
		if strings.HasPrefix(p, dir+"/") || strings.Contains(p, "/"+dir+"/") {
			return true
		}
	}
	return false
}

// generated: the convention of https://go.dev/s/generatedcode (and
// others' tools), a line with "Code generated" and "DO NOT EDIT" near the
// top of the file.
func generated(data []byte) bool {
	head := data[:min(len(data), binaryProbe)]
	for len(head) > 0 {
		line := head
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = nil
		}
		if bytes.Contains(line, []byte("Code generated")) && bytes.Contains(line, []byte("DO NOT EDIT")) {
			return true
		}
	}
	return false
}

// minified: *.min.js, or JavaScript/CSS whose lines are mostly very long.
func minified(p string, data []byte) bool {
	if strings.HasSuffix(p, ".min.js") || strings.HasSuffix(p, ".min.css") {
		return true
	}
	switch path.Ext(p) {
	case ".js", ".mjs", ".cjs", ".css":
	default:
		return false
	}
	lines := bytes.Count(data, []byte("\n")) + 1
	return len(data) > 4096 && len(data)/lines > 500
}

// language names a file's language by its name, or "" for plain text.
func language(p string) string {
	base := path.Base(p)
	switch base {
	case "Makefile", "makefile", "GNUmakefile":
		return "make"
	case "Dockerfile":
		return "dockerfile"
	}
	if l, ok := languages[strings.ToLower(path.Ext(base))]; ok {
		return l
	}
	return ""
}

var languages = map[string]string{
	".go": "go", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".cxx": "cpp",
	".java": "java", ".kt": "kotlin", ".scala": "scala", ".cs": "csharp", ".rs": "rust", ".swift": "swift",
	".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
	".ts": "typescript", ".tsx": "typescript", ".css": "css", ".scss": "css", ".html": "html",
	".php": "php", ".s": "asm", ".proto": "protobuf", ".json": "json",
	".py": "python", ".rb": "ruby", ".sh": "shell", ".bash": "shell", ".yaml": "yaml", ".yml": "yaml",
	".toml": "toml", ".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".txt": "text",
	".sql": "sql", ".lua": "lua", ".pl": "perl", ".r": "r", ".ex": "elixir", ".hs": "haskell",
}

// structure is how a language marks top-level declarations.
type structure int

const (
	byBraces structure = iota
	byIndent
	byHeading
	byParagraph
)

func structureOf(lang string) structure {
	switch lang {
	case "python", "yaml", "ruby", "make", "shell", "elixir", "haskell", "toml":
		return byIndent
	case "markdown", "rst":
		return byHeading
	case "text", "":
		return byParagraph
	}
	return byBraces
}

// chunk splits a file into chunks: top-level declarations (a blank line
// at brace depth 0 followed by an unindented line, or a Markdown
// heading) start new units; units are packed into chunks of about
// chunkLines lines; a longer unit is windowed with chunkOverlap lines of
// overlap; no chunk exceeds chunkBytes (a longer line is cut). It is
// linear in the file's size.
func chunk(p string, data []byte) []Chunk {
	text := string(data)
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	lines := strings.SplitAfter(text, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	// A chunk's text is a slice of the file's (no copy): off[i] is where
	// lines[i] starts in it.
	off := make([]int, len(lines)+1)
	for i, l := range lines {
		off[i+1] = off[i] + len(l)
	}
	lang := language(p)
	starts := unitStarts(lines, structureOf(lang))
	var out []Chunk
	emit := func(from, to int) { // lines[from:to]
		out = appendWindowed(out, text, lines, off, from, to, lang, p)
	}
	// Pack units greedily.
	cur := 0
	for i := 1; i <= len(starts); i++ {
		end := len(lines)
		if i < len(starts) {
			end = starts[i]
		}
		if end-cur > chunkLines && starts[i-1]-cur >= chunkOverlap {
			// The unit that begins at starts[i-1] does not fit with what
			// came before: flush, and start over with it (a few lines
			// before it, e.g. a package clause, go with it instead).
			emit(cur, starts[i-1])
			cur = starts[i-1]
		}
		if end-cur >= chunkLines || i == len(starts) {
			emit(cur, end)
			cur = end
		}
	}
	return out
}

// unitStarts are the line indexes where units begin (always 0).
func unitStarts(lines []string, s structure) []int {
	starts := []int{0}
	depth := 0
	inBlock, inFence := false, false
	for i, l := range lines {
		t := strings.TrimRight(l, "\r\n")
		blankBefore := i > 0 && strings.TrimSpace(lines[i-1]) == ""
		switch s {
		case byHeading:
			if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
				inFence = !inFence
			}
			if i > 0 && !inFence && strings.HasPrefix(t, "#") {
				starts = append(starts, i)
			}
			continue
		case byParagraph:
			if i > 0 && blankBefore && strings.TrimSpace(t) != "" {
				starts = append(starts, i)
			}
			continue
		case byIndent:
			if i > 0 && blankBefore && t != "" && t[0] != ' ' && t[0] != '\t' && t[0] != '#' {
				starts = append(starts, i)
			}
			continue
		}
		if i > 0 && depth == 0 && !inBlock && blankBefore && t != "" && t[0] != ' ' && t[0] != '\t' && t[0] != '}' && t[0] != ')' {
			starts = append(starts, i)
		}
		depth, inBlock = braceDepth(t, depth, inBlock)
	}
	return starts
}

// braceDepth follows { } ( ) across a line, outside strings and
// comments (a cheap scan: good enough to find top-level boundaries).
func braceDepth(l string, depth int, inBlock bool) (int, bool) {
	var quote byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case inBlock:
			if c == '*' && i+1 < len(l) && l[i+1] == '/' {
				inBlock = false
				i++
			}
		case quote != 0:
			if c == '\\' && quote != '`' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '/' && i+1 < len(l) && l[i+1] == '/':
			return depth, false
		case c == '/' && i+1 < len(l) && l[i+1] == '*':
			inBlock = true
			i++
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '{' || c == '(':
			depth++
		case c == '}' || c == ')':
			if depth > 0 {
				depth--
			}
		}
	}
	return depth, inBlock
}

// appendWindowed adds lines[from:to] as one chunk, or as windows of
// chunkLines lines overlapping by chunkOverlap, each at most chunkBytes
// (lines are text's, lines[i] at off[i]).
func appendWindowed(out []Chunk, text string, lines []string, off []int, from, to int, lang, p string) []Chunk {
	for from < to {
		end := min(to, from+chunkLines)
		size := 0
		for i := from; i < end; i++ {
			if size+len(lines[i]) > chunkBytes && i > from {
				end = i
				break
			}
			size += len(lines[i])
		}
		if size > chunkBytes { // one line over the cap: cut it
			l := lines[from]
			for len(l) > 0 {
				n := min(len(l), chunkBytes)
				for n < len(l) && !utf8.RuneStart(l[n]) {
					n--
				}
				out = append(out, Chunk{Path: p, Language: lang, StartLine: from + 1, EndLine: from + 1, Text: l[:n]})
				l = l[n:]
			}
			from++
			continue
		}
		if t := text[off[from]:off[end]]; strings.TrimSpace(t) != "" {
			out = append(out, Chunk{Path: p, Language: lang, StartLine: from + 1, EndLine: end, Text: t})
		}
		if end >= to {
			break
		}
		next := end - chunkOverlap
		if next <= from {
			next = end
		}
		from = next
	}
	return out
}
