package daemon

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestBuildStages: build's stages get what they need as arguments, so
// none depends on the order the server's fields are set in. No function
// literal in build reads the server it makes (s), and build calls no
// method of the server but ready (the API's readiness, called once it
// serves); the plugins, which take the whole server, start after
// everything they read.
func TestBuildStages(t *testing.T) {
	fset := token.NewFileSet()
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{}
	var build *ast.FuncDecl
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if fd.Recv == nil {
				if fd.Name.Name == "build" {
					build = fd
				}
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "server" {
					methods[fd.Name.Name] = true
				}
			}
		}
	}
	if build == nil || len(methods) == 0 {
		t.Fatalf("build or the server's methods not found (%d methods)", len(methods))
	}
	// The server build makes: the first statement, s := &server{…}.
	// Nothing in build declares another s.
	if as, ok := build.Body.List[0].(*ast.AssignStmt); !ok || len(as.Lhs) != 1 || !isIdent(as.Lhs[0], "s") {
		t.Fatal("build does not begin with s := &server{…}")
	}
	isServer := func(e ast.Expr) bool { return isIdent(e, "s") }
	ast.Inspect(build.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			ast.Inspect(n.Body, func(m ast.Node) bool {
				if isServer(asExpr(m)) {
					t.Errorf("%s: a closure in build reads the server", fset.Position(m.Pos()))
				}
				return true
			})
		case *ast.SelectorExpr:
			if isServer(n.X) && methods[n.Sel.Name] && n.Sel.Name != "ready" {
				t.Errorf("%s: build calls the server's method %s: make it a stage of its inputs", fset.Position(n.Pos()), n.Sel.Name)
			}
		}
		return true
	})
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func asExpr(n ast.Node) ast.Expr {
	e, _ := n.(ast.Expr)
	return e
}
