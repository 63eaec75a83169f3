package retrieval

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
)

// Symbol is one definition in a file: a function, method, type, class,
// constant or variable, or (Kind "package") the package or file itself,
// whose Doc is the package's or file's doc comment.
type Symbol struct {
	Name string
	Kind string // "package", "func", "method", "type", "class", "interface", "const", "var", "macro", "module"
	Line int    // 1-based line of the name
	Doc  string // the definition's doc comment, without comment markers
}

// Bounds of extractSymbols: files, lines and doc comments past them are
// cut (the content is the repository's, an adversary's).
const (
	symbolsMaxBytes = 1 << 20
	symbolsMax      = 5000
	symbolLineBytes = 1000 // longer lines are not read for definitions
	symbolDocBytes  = 2 << 10
	symbolDocLines  = 40
)

// extractSymbols lists the definitions in a file: Go by go/parser,
// Python, JavaScript/TypeScript, C/C++, Java and Rust by a line-based
// reader of their definition keywords; nothing for other languages or a
// file over symbolsMaxBytes. Bounded in time and memory by the file's
// size, never panics on hostile input.
func extractSymbols(path string, content []byte) (syms []Symbol) {
	if len(content) > symbolsMaxBytes {
		return nil
	}
	defer func() {
		if recover() != nil { // go/parser on input it did not expect: no symbols rather than a crash
			syms = nil
		}
	}()
	switch lang := language(path); lang {
	case "go":
		return goSymbols(content)
	case "python", "javascript", "typescript", "c", "cpp", "java", "rust":
		return lineSymbols(lang, content)
	}
	return nil
}

// goSymbols reads a Go file's declarations with go/parser (an invalid
// file gives what was parsed of it).
func goSymbols(content []byte) []Symbol {
	fset := token.NewFileSet()
	f, _ := parser.ParseFile(fset, "", blankBraces(content), parser.ParseComments|parser.SkipObjectResolution)
	if f == nil || f.Name == nil || f.Name.Name == "" { // not Go: no package clause
		return nil
	}
	var syms []Symbol
	add := func(name *ast.Ident, kind string, doc *ast.CommentGroup) {
		if name == nil || name.Name == "_" || len(syms) >= symbolsMax {
			return
		}
		syms = append(syms, Symbol{Name: name.Name, Kind: kind, Line: fset.Position(name.Pos()).Line, Doc: docText(doc)})
	}
	add(f.Name, "package", f.Doc)
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			kind := "func"
			if d.Recv != nil && len(d.Recv.List) > 0 {
				kind = "method"
			}
			add(d.Name, kind, d.Doc)
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				// A lone spec's doc is the declaration's: `// X is…` above `type X …`.
				doc := d.Doc
				switch sp := sp.(type) {
				case *ast.TypeSpec:
					if sp.Doc != nil {
						doc = sp.Doc
					}
					kind := "type"
					if _, ok := sp.Type.(*ast.InterfaceType); ok {
						kind = "interface"
					}
					add(sp.Name, kind, doc)
				case *ast.ValueSpec:
					if sp.Doc != nil {
						doc = sp.Doc
					}
					kind := "var"
					if d.Tok == token.CONST {
						kind = "const"
					}
					for _, n := range sp.Names {
						add(n, kind, doc)
					}
				}
			}
		}
	}
	return syms
}

// blankBraces is Go source with what is between braces (function
// bodies, struct and interface types, composite literals) left out but
// for its newlines: the top-level declarations, their names, lines and
// doc comments stay as they were, and go/parser has a fraction of the
// file to read (bodies were most of an ingestion's parsing, 5× the
// rest). Strings, runes and comments are skipped whole, so a brace in
// one counts for nothing.
func blankBraces(src []byte) []byte {
	out := make([]byte, 0, len(src)/4)
	depth := 0
	from := 0 // src[from:i] is still to be copied, at depth 0
	for i := 0; i < len(src); {
		c := src[i]
		if !goSpecial[c] {
			i++
			continue
		}
		// Where the token starting at i ends.
		end := i + 1
		switch {
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			end = len(src)
			if j := bytes.IndexByte(src[i:], '\n'); j >= 0 {
				end = i + j
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end = len(src)
			if j := bytes.Index(src[i+2:], []byte("*/")); j >= 0 {
				end = i + 2 + j + 2
			}
		case c == '"' || c == '\'':
			for end < len(src) && src[end] != c && src[end] != '\n' {
				if src[end] == '\\' {
					end++
				}
				end++
			}
			end = min(len(src), end+1)
		case c == '`':
			end = len(src)
			if j := bytes.IndexByte(src[i+1:], '`'); j >= 0 {
				end = i + 1 + j + 1
			}
		}
		if depth > 0 { // only the newlines of what is left out
			for _, b := range src[i:end] {
				if b == '\n' {
					out = append(out, '\n')
				}
			}
		}
		switch c {
		case '{':
			if depth == 0 {
				out = append(out, src[from:end]...)
			}
			depth++
		case '}':
			if depth > 0 {
				depth--
				if depth == 0 {
					out = append(out, '}')
					from = end
				}
			}
		}
		i = end
		if depth > 0 {
			from = i
		}
	}
	if depth == 0 {
		out = append(out, src[from:]...)
	}
	return out
}

// goSpecial marks the bytes blankBraces stops at: braces, the starts of
// strings, runes and comments, and newlines (kept between braces).
var goSpecial = func() (t [256]bool) {
	for _, c := range []byte("{}\"'`/\n") {
		t[c] = true
	}
	return t
}()

// docText is a comment group's text, bounded.
func docText(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return clipDoc(g.Text())
}

func clipDoc(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > symbolDocBytes {
		s = strings.ToValidUTF8(s[:symbolDocBytes], "")
	}
	return s
}

// lineSymbols is the line-based reader: a definition starts a line with
// its language's keyword (after modifiers); its doc comment is the run of
// comment lines just above it (or, in Python, the docstring just below).
func lineSymbols(lang string, content []byte) []Symbol {
	var (
		syms    []Symbol
		comment []string // the comment lines just above the current one
		inBlock bool     // inside /* … */
	)
	lines := bytes.Split(content, []byte("\n"))
	if lang == "python" {
		syms = pyModuleDoc(lines)
	}
	for i, raw := range lines {
		if len(syms) >= symbolsMax {
			break
		}
		if len(raw) > symbolLineBytes {
			comment = comment[:0]
			continue
		}
		line := strings.TrimRight(string(raw), "\r")
		t := strings.TrimSpace(line)
		if text, ok, block := commentLine(lang, t, inBlock); ok {
			inBlock = block
			if len(comment) < symbolDocLines && text != "" {
				comment = append(comment, text)
			}
			continue
		}
		name, kind := definition(lang, line, t)
		if name == "" {
			if t != "" && !strings.HasPrefix(t, "@") && !strings.HasPrefix(t, "#[") { // decorators and attributes keep the comment above
				comment = comment[:0]
			}
			continue
		}
		doc := strings.Join(comment, "\n")
		if lang == "python" {
			doc = pyDocstring(lines[i+1:])
		}
		syms = append(syms, Symbol{Name: name, Kind: kind, Line: i + 1, Doc: clipDoc(doc)})
		comment = comment[:0]
	}
	return syms
}

// commentLine reports whether the trimmed line t is a comment (or part of
// a /* */ block, inBlock), with its text without markers and whether a
// block is still open after it.
func commentLine(lang, t string, inBlock bool) (text string, ok, block bool) {
	if inBlock {
		text, rest, closed := strings.Cut(t, "*/")
		if closed && strings.TrimSpace(rest) != "" {
			return "", false, false // code after the block: not a comment line
		}
		return strings.TrimSpace(strings.TrimPrefix(text, "*")), true, !closed
	}
	if lang == "python" {
		if strings.HasPrefix(t, "#") {
			return strings.TrimSpace(strings.TrimLeft(t, "#")), true, false
		}
		return "", false, false
	}
	switch {
	case strings.HasPrefix(t, "//"):
		return strings.TrimSpace(strings.TrimLeft(t, "/!")), true, false
	case strings.HasPrefix(t, "/*"):
		body := strings.TrimLeft(t[2:], "*!")
		text, rest, closed := strings.Cut(body, "*/")
		if closed && strings.TrimSpace(rest) != "" {
			return "", false, false
		}
		return strings.TrimSpace(text), true, !closed
	}
	return "", false, false
}

// pyDocstring is the docstring on the lines after a def or class, if
// the first of them opens one.
func pyDocstring(after [][]byte) string {
	if len(after) == 0 {
		return ""
	}
	t := strings.TrimSpace(string(after[0]))
	t = strings.TrimLeft(t, "rRbBuU")
	var q string
	for _, p := range []string{`"""`, `'''`} {
		if strings.HasPrefix(t, p) {
			q = p
		}
	}
	if q == "" {
		// A one-line docstring in single quotes: "Does this."
		if len(t) >= 2 && (t[0] == '"' || t[0] == '\'') {
			if text, _, ok := strings.Cut(t[1:], t[:1]); ok {
				return text
			}
		}
		return ""
	}
	t = t[3:]
	if text, _, ok := strings.Cut(t, q); ok {
		return text
	}
	doc := []string{t}
	for _, l := range after[1:min(len(after), symbolDocLines)] {
		if len(l) > symbolLineBytes {
			break
		}
		s := strings.TrimSpace(string(l))
		if text, _, ok := strings.Cut(s, q); ok {
			return strings.Join(append(doc, text), "\n")
		}
		doc = append(doc, s)
	}
	return strings.Join(doc, "\n")
}

// pyModuleDoc is a Python file's module docstring as its "package"
// symbol (no name: the file is the module), if the first statement, past
// blank and comment lines, is a string.
func pyModuleDoc(lines [][]byte) []Symbol {
	for i, raw := range lines[:min(len(lines), symbolDocLines)] {
		t := strings.TrimSpace(string(raw))
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if doc := pyDocstring(lines[i:]); doc != "" {
			return []Symbol{{Kind: "package", Line: i + 1, Doc: clipDoc(doc)}}
		}
		return nil
	}
	return nil
}

// Modifiers that may come before a definition's keyword.
var modifiers = map[string]map[string]bool{
	"python":     {"async": true},
	"javascript": {"export": true, "default": true, "async": true, "declare": true, "abstract": true},
	"java": {"public": true, "private": true, "protected": true, "static": true, "final": true, "abstract": true,
		"sealed": true, "strictfp": true, "synchronized": true, "native": true, "default": true, "non-sealed": true},
	"rust": {"pub": true, "pub(crate)": true, "pub(super)": true, "pub(self)": true, "async": true, "unsafe": true,
		"const": true, "extern": true, "default": true},
	"c": {"static": true, "inline": true, "extern": true, "typedef": true, "export": true, "template<>": true},
}

// Keywords that introduce a definition, and its kind.
var defKeywords = map[string]map[string]string{
	"python":     {"def": "func", "class": "class"},
	"javascript": {"function": "func", "function*": "func", "class": "class", "interface": "interface", "type": "type", "enum": "type", "namespace": "module"},
	"java":       {"class": "class", "interface": "interface", "enum": "type", "record": "class", "@interface": "interface"},
	"rust":       {"fn": "func", "struct": "type", "enum": "type", "trait": "interface", "type": "type", "mod": "module", "union": "type", "macro_rules!": "macro", "static": "var"},
	"c":          {"struct": "type", "union": "type", "enum": "type", "class": "class", "namespace": "module"},
}

// definition is the name and kind a line defines, if it does.
func definition(lang, line, t string) (name, kind string) {
	family := lang
	switch lang {
	case "typescript":
		family = "javascript"
	case "cpp":
		family = "c"
	}
	if family == "c" && strings.HasPrefix(t, "#") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(t, "#")), "define"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			return identPrefix(strings.TrimSpace(rest)), "macro"
		}
		return "", ""
	}
	words := strings.Fields(t)
	i := 0
	for i < len(words) && modifiers[family][words[i]] {
		i++
	}
	if i < len(words) {
		if k, ok := defKeywords[family][words[i]]; ok && i+1 < len(words) {
			n := identPrefix(strings.TrimLeft(words[i+1], "*&"))
			if n != "" && !(family == "c" && strings.HasSuffix(t, ";")) { // `struct x;` declares
				return n, k
			}
		}
	}
	switch family {
	case "javascript":
		// const name = (…) => / function / class
		if i < len(words) && (words[i] == "const" || words[i] == "let" || words[i] == "var") && i+2 < len(words) {
			n := identPrefix(words[i+1])
			rest := strings.Join(words[i+2:], " ")
			if n != "" && strings.HasPrefix(rest, "=") && (strings.Contains(rest, "=>") || strings.Contains(rest, "function") || strings.HasPrefix(rest, "= class")) {
				return n, "func"
			}
		}
		// A method in a class body: indented `name(…) {`.
		if line != t {
			return methodLike(t, "method")
		}
	case "java":
		if line != t && !strings.HasSuffix(t, ";") && strings.Contains(t, "(") {
			return methodLike(lastWordsBeforeParen(t), "method")
		}
	case "c":
		// A function definition at the start of a line: `type name(args)` (and
		// its `{` on this line or the next), not a declaration ending in `;`.
		if line == t && !strings.HasSuffix(t, ";") && strings.Contains(t, "(") && !strings.HasPrefix(t, "}") {
			return methodLike(lastWordsBeforeParen(t), "func")
		}
	}
	return "", ""
}

// lastWordsBeforeParen is t from its last word before the first '(' on.
func lastWordsBeforeParen(t string) string {
	p := strings.IndexByte(t, '(')
	head := strings.TrimRight(t[:p], " \t")
	if !strings.ContainsAny(head, " \t*&") { // a call or control statement alone on its line
		return ""
	}
	j := strings.LastIndexAny(head, " \t*&:")
	return head[j+1:] + t[p:]
}

// controlWords look like calls at the start of a line but define nothing.
var controlWords = map[string]bool{"if": true, "for": true, "while": true, "switch": true, "catch": true, "return": true,
	"function": true, "else": true, "do": true, "try": true, "new": true, "throw": true, "sizeof": true, "super": true, "this": true}

// methodLike is the name of `name(…)` starting s, unless it is a control
// word or a call statement.
func methodLike(s, kind string) (string, string) {
	n := identPrefix(strings.TrimPrefix(strings.TrimPrefix(s, "async "), "static "))
	if n == "" || controlWords[n] {
		return "", ""
	}
	rest := strings.TrimLeft(s[strings.Index(s, n)+len(n):], " \t")
	if !strings.HasPrefix(rest, "(") || strings.HasSuffix(rest, ";") || strings.HasSuffix(rest, ",") {
		return "", ""
	}
	return n, kind
}

// identPrefix is the identifier at the start of s ("" if none).
func identPrefix(s string) string {
	end := 0
	for end < len(s) {
		c := s[end]
		if c == '_' || c == '$' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || end > 0 && '0' <= c && c <= '9' {
			end++
			continue
		}
		break
	}
	if end > maxToken {
		return ""
	}
	return s[:end]
}
