package retrieval

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestExtractSymbolsFields: Go's definitions and doc comments,
// Python's by the line scan; other files and hostile input give nothing
// or what parses, without panicking, in bounded time.
func TestExtractSymbolsFields(t *testing.T) {
	goSrc := "// Package cfg reads settings.\npackage cfg\n\n// Config holds settings.\ntype Config struct{}\n\n// parseConfig reads one.\nfunc parseConfig() {}\n\nfunc (c *Config) Load() {}\n\nconst (\n\t// Max is the limit.\n\tMax = 3\n)\n"
	pySrc := "\"\"\"Settings reader.\n\nMore.\n\"\"\"\n\nclass Config:\n    '''Holds settings.'''\n\n    def load(self):\n        pass\n\nasync def parse_config():\n    \"one line\"\n"
	tests := []struct {
		name, path, content string
		want                []Symbol
	}{
		{"go", "cfg/cfg.go", goSrc, []Symbol{
			{"cfg", "package", 2, "Package cfg reads settings."},
			{"Config", "type", 5, "Config holds settings."},
			{"parseConfig", "func", 8, "parseConfig reads one."},
			{"Load", "method", 10, ""},
			{"Max", "const", 14, "Max is the limit."},
		}},
		{"python", "cfg.py", pySrc, []Symbol{
			{"", "package", 1, "Settings reader.\n\nMore."},
			{"Config", "class", 6, "Holds settings."},
			{"load", "func", 9, ""},
			{"parse_config", "func", 12, "one line"},
		}},
		{"go groups", "g.go", "package g\n\ntype (\n\t// A is a.\n\tA int\n\n\t// B is b.\n\tB struct {\n\t\t// not a doc\n\t\tx int\n\t}\n)\n\n// f's doc\n\nfunc f() {\n\t// inside\n}\n\nfunc (T) M() {}\n", []Symbol{
			{"g", "package", 1, ""},
			{"A", "type", 5, "A is a."},
			{"B", "type", 8, "B is b."},
			{"f", "func", 16, ""},
			{"M", "method", 20, ""},
		}},
		{"go with a syntax error keeps what came before", "x.go", "package x\n\nfunc ok() {}\n\nfunc (", []Symbol{{"x", "package", 1, ""}, {"ok", "func", 3, ""}}},
		{"not go", "x.go", "\x00\xff garbage", nil},
		{"other language", "x.txt", "fn main() {}", nil},
		{"too large", "big.go", "package big\n" + strings.Repeat("// x\n", symbolsMaxBytes/5), nil},
		{"python unterminated docstring", "u.py", "def f():\n    \"\"\"" + strings.Repeat("\n", 100), []Symbol{{"f", "func", 1, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := extractSymbols(tt.path, []byte(tt.content))
			if !slices.Equal(got, tt.want) {
				t.Errorf("extractSymbols(%s) =\n%+v\nwant\n%+v", tt.path, got, tt.want)
			}
		})
	}
	// Hostile input: deep nesting, many definitions, unterminated
	// docstrings; each within symbolsMaxBytes, each quick.
	hostile := map[string]string{
		"nest.go":  "package p\nvar x = " + strings.Repeat("(", 200_000),
		"many.go":  "package p\n" + strings.Repeat("func f() {}\n", 40_000),
		"many.py":  strings.Repeat("def f():\n    \"\"\"\n", 20_000),
		"lines.py": strings.Repeat("class C:\n", 50_000),
	}
	for p, src := range hostile {
		src = src[:min(len(src), symbolsMaxBytes)]
		start := time.Now()
		syms := extractSymbols(p, []byte(src))
		if len(syms) > symbolsMax+1 {
			t.Errorf("%s: %d symbols, more than %d", p, len(syms), symbolsMax+1)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: %v", p, d)
		}
	}
}

// TestFileText: a file put back together from its chunks is the file,
// whatever the chunker did (windows, cut lines).
func TestFileText(t *testing.T) {
	long := strings.Repeat("x", 3*chunkBytes+7)
	files := []string{
		"package p\n\nfunc a() {}\n",
		"package p\n\nfunc big() {\n" + strings.Repeat("\tx++\n", 500) + "}\n\nfunc after() {}\n",
		"package p\n\nvar s = \"" + long + "\"\n\nfunc z() {}\n",
		long,
		"# T\n\ntext\n\n## U\n\nmore",
	}
	for i, f := range files {
		p := "f.go"
		if i == 4 {
			p = "f.md"
		}
		if got := fileText(chunk(p, []byte(f))); got != strings.TrimRight(f, "\n")+"\n" && got != f {
			t.Errorf("file %d: put back together, %d bytes, want %d", i, len(got), len(f))
		}
	}
}

// TestFuseRanks: at weight 0 the lexical ranking stays as it is and the
// vectors only add the files it lacks, after it; at a weight, reciprocal
// rank fusion.
func TestFuseRanks(t *testing.T) {
	keys := func(fs []fused) []string {
		var ks []string
		for _, f := range fs {
			ks = append(ks, f.key)
		}
		return ks
	}
	lex, vec := []string{"a", "b", "c"}, []string{"c", "d", "b", "e"}
	defer func(w float64) { vectorWeight = w }(vectorWeight)
	for _, tt := range []struct {
		weight float64
		want   []string
	}{
		{0, []string{"a", "b", "c", "d", "e"}},
		{1, []string{"c", "b", "a", "d", "e"}},    // c: 1/63+1/61, b: 1/62+1/63, a: 1/61
		{0.01, []string{"a", "b", "c", "d", "e"}}, // the vectors only break near ties
	} {
		vectorWeight = tt.weight
		fs := fuseRanks(lex, vec)
		if got := keys(fs); !slices.Equal(got, tt.want) {
			t.Errorf("weight %g: %v, want %v", tt.weight, got, tt.want)
		}
		for i := 1; i < len(fs); i++ {
			if fs[i].score > fs[i-1].score {
				t.Errorf("weight %g: scores not descending: %v", tt.weight, fs)
			}
		}
	}
	if got := fuseRanks(nil, vec); !slices.Equal(keys(got), vec) {
		t.Errorf("no lexical ranking: %v, want the vectors' %v", keys(got), vec)
	}
}
