package retrieval

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"strings"
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

// extractSymbols lists the definitions of a Go file (go/parser) or a
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

func goSymbols(content []byte) []Symbol {
	fset := token.NewFileSet()
	// A file with errors still has the declarations before them.
	f, _ := parser.ParseFile(fset, "", content, parser.ParseComments|parser.SkipObjectResolution)
	if f == nil || f.Name == nil || f.Name.Name == "" || f.Name.Name == "_" { // no package clause
		return nil
	}
	line := func(p token.Pos) int { return fset.Position(p).Line }
	syms := []Symbol{{Name: f.Name.Name, Kind: "package", Line: line(f.Package), Doc: docText(f.Doc)}}
	add := func(s Symbol) bool {
		if s.Name == "_" || s.Name == "" { // blank, or what the parser made of an error
			return true
		}
		if len(syms) >= maxSymbols {
			return false
		}
		syms = append(syms, s)
		return true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			kind := "func"
			if d.Recv != nil {
				kind = "method"
			}
			if !add(Symbol{Name: d.Name.Name, Kind: kind, Line: line(d.Name.Pos()), Doc: docText(d.Doc)}) {
				return syms
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				var sym Symbol
				switch s := s.(type) {
				case *ast.TypeSpec:
					sym = Symbol{Name: s.Name.Name, Kind: "type", Line: line(s.Name.Pos()), Doc: docText(s.Doc)}
				case *ast.ValueSpec:
					if len(s.Names) == 0 {
						continue
					}
					kind := "var"
					if d.Tok == token.CONST {
						kind = "const"
					}
					sym = Symbol{Name: s.Names[0].Name, Kind: kind, Line: line(s.Names[0].Pos()), Doc: docText(s.Doc)}
				default:
					continue
				}
				if sym.Doc == "" && len(d.Specs) == 1 {
					sym.Doc = docText(d.Doc)
				}
				if !add(sym) {
					return syms
				}
			}
		}
	}
	return syms
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
		end := strings.IndexFunc(t, func(r rune) bool { return !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= 0x80) })
		if end < 0 {
			end = len(t)
		}
		if end == 0 {
			continue
		}
		if len(syms) >= maxSymbols {
			break
		}
		// The docstring is the first statement of the body, after the
		// line the header ends on (headers of one line: most of them).
		syms = append(syms, Symbol{Name: t[:end], Kind: kind, Line: i + 1, Doc: docstring(i + 1)})
	}
	return syms
}
