package retrieval

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"strings"
	"unicode"
)

// Symbol is a definition in a file: a package (Doc is the package's doc
// comment), type, function, method or class, with its doc comment.
type Symbol struct {
	Name, Kind string
	Line       int
	Doc        string
}

// Bounds of symbol extraction: a file or a doc comment past them is not
// looked at (a hostile file costs at most this much, an AST being a few
// times the source's size).
const (
	maxSymbolFile = 512 << 10
	maxSymbols    = 4096
	maxSymbolDoc  = 4 << 10
)

// extractSymbols lists the definitions of a Go file (goSymbols) or a
// Python file (a line scan: def, class and docstrings); nothing for other
// languages, files over maxSymbolFile or input that does not parse. It
// never panics.
func extractSymbols(p string, content []byte) (syms []Symbol) {
	if len(content) > maxSymbolFile {
		return nil
	}
	defer func() {
		if recover() != nil { // a parser bug is no reason to fail an ingestion
			syms = nil
		}
	}()
	switch path.Ext(p) {
	case ".go":
		return goSymbols(content)
	case ".py":
		return pySymbols(content)
	}
	return nil
}

// goSymbols: the package clause and its doc comment by go/parser
// (PackageClauseOnly: it stops there), the top-level declarations by a
// line scan of gofmt's layout — "func", "type", "var" and "const" at the
// start of a line or, in a group, after one tab, each with the "//"
// lines right above it as its doc. Parsing whole files with go/parser
// was most of an ingestion's added CPU time: 6.3 times the bare read's
// against 4.1 without fields (BenchmarkIngest's cpu-ratio), the line
// scan about nothing.
func goSymbols(content []byte) []Symbol {
	fset := token.NewFileSet()
	f, _ := parser.ParseFile(fset, "", content, parser.PackageClauseOnly|parser.ParseComments)
	if f == nil || f.Name == nil || f.Name.Name == "" || f.Name.Name == "_" { // no package clause
		return nil
	}
	syms := []Symbol{{Name: f.Name.Name, Kind: "package", Line: fset.Position(f.Package).Line, Doc: docText(f.Doc)}}
	var doc []string // the "//" lines right above
	group := ""      // the keyword of the group the scan is in
	for i, line := range strings.Split(string(content[fset.Position(f.Name.End()).Offset:]), "\n") {
		if len(syms) >= maxSymbols {
			break
		}
		n := fset.Position(f.Name.End()).Line + i
		indent := ""
		if group != "" {
			indent = "\t"
		}
		rest, ok := strings.CutPrefix(line, indent)
		if !ok || group != "" && strings.HasPrefix(rest, "\t") {
			if group != "" && strings.HasPrefix(line, ")") {
				group = ""
			}
			doc = doc[:0]
			continue
		}
		if c, ok := strings.CutPrefix(rest, "//"); ok {
			if len(doc) < maxSymbolDoc/16 {
				doc = append(doc, strings.TrimPrefix(c, " "))
			}
			continue
		}
		kind, name := "", ""
		switch {
		case group != "":
			kind, name = group, identAt(rest)
		case strings.HasPrefix(rest, "func "):
			kind, rest = "func", rest[len("func "):]
			if strings.HasPrefix(rest, "(") { // a receiver
				kind = "method"
				if end := strings.IndexByte(rest, ')'); end >= 0 {
					rest = strings.TrimLeft(rest[end+1:], " ")
				}
			}
			name = identAt(rest)
		default:
			for _, kw := range []string{"type", "var", "const"} {
				if r, ok := strings.CutPrefix(rest, kw+" "); ok {
					kind = kw
					if strings.HasPrefix(r, "(") {
						group = kw
					} else {
						name = identAt(r)
					}
					break
				}
			}
		}
		if name != "" && name != "_" {
			d := ""
			if len(doc) > 0 {
				d = capDoc(strings.Join(doc, "\n") + "\n")
			}
			syms = append(syms, Symbol{Name: name, Kind: kind, Line: n, Doc: d})
		}
		doc = doc[:0]
	}
	return syms
}

// identAt is the identifier (Go's or Python's) s starts with ("" if
// none).
func identAt(s string) string {
	end := strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r))
	})
	if end < 0 {
		end = len(s)
	}
	if end == 0 || unicode.IsDigit(rune(s[0])) {
		return ""
	}
	return s[:end]
}

// docText is a doc comment's text, capped at maxSymbolDoc bytes.
func docText(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return capDoc(g.Text())
}

func capDoc(s string) string {
	if len(s) <= maxSymbolDoc {
		return s
	}
	return strings.ToValidUTF8(s[:maxSymbolDoc], "")
}

// pySymbols scans Python source line by line: def and class statements
// at any indentation, the docstring that opens the module and each of
// them ("package" for the module's).
func pySymbols(content []byte) []Symbol {
	lines := strings.Split(string(content), "\n")
	var syms []Symbol
	// docstring reads a string literal that starts at line i (after
	// blank lines and comments), returning its text.
	docstring := func(i int) string {
		for ; i < len(lines); i++ {
			t := strings.TrimSpace(lines[i])
			if t != "" && !strings.HasPrefix(t, "#") {
				break
			}
		}
		if i >= len(lines) {
			return ""
		}
		t := strings.TrimSpace(lines[i])
		t = strings.TrimLeft(t, "rRuUbB")
		var quote string
		for _, q := range []string{`"""`, `'''`, `"`, `'`} {
			if strings.HasPrefix(t, q) {
				quote = q
				break
			}
		}
		if quote == "" {
			return ""
		}
		t = t[len(quote):]
		var b strings.Builder
		for {
			if end := strings.Index(t, quote); end >= 0 {
				b.WriteString(t[:end])
				break
			}
			if len(quote) == 1 || b.Len() > maxSymbolDoc {
				break
			}
			b.WriteString(t)
			b.WriteByte('\n')
			i++
			if i >= len(lines) {
				break
			}
			t = lines[i]
		}
		return capDoc(b.String())
	}
	if d := docstring(0); d != "" {
		syms = append(syms, Symbol{Kind: "package", Line: 1, Doc: d})
	}
	for i, l := range lines {
		t := strings.TrimLeft(l, " \t")
		kind := ""
		switch {
		case strings.HasPrefix(t, "def "), strings.HasPrefix(t, "async def "):
			kind, t = "func", strings.TrimPrefix(strings.TrimPrefix(t, "async "), "def ")
		case strings.HasPrefix(t, "class "):
			kind, t = "class", strings.TrimPrefix(t, "class ")
		default:
			continue
		}
		name := identAt(t)
		if name == "" {
			continue
		}
		if len(syms) >= maxSymbols {
			break
		}
		// The docstring is the first statement of the body, after the
		// line the header ends on (headers of one line: most of them).
		syms = append(syms, Symbol{Name: name, Kind: kind, Line: i + 1, Doc: docstring(i + 1)})
	}
	return syms
}
