package retrieval

import (
	"errors"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseQueryLanguage: every form of the language, and errors that
// say where (column) and are ErrBadQuery.
func TestParseQueryLanguage(t *testing.T) {
	for _, tc := range []struct {
		q     string
		check func(*parsedQuery) bool
	}{
		{`parseConfig read`, func(q *parsedQuery) bool { return q.plain() && len(q.words) == 2 }},
		{`"exact phrase"`, func(q *parsedQuery) bool { return len(q.phrases) == 1 && q.phrases[0].src == "exact phrase" }},
		{`"say \"hi\" \\ now"`, func(q *parsedQuery) bool { return q.phrases[0].src == `say "hi" \ now` }},
		{`/func \(s \*Server\)/`, func(q *parsedQuery) bool { return len(q.regexps) == 1 }},
		{`/a\/b/`, func(q *parsedQuery) bool { return q.regexps[0].src == "a/b" }},
		{`sym:ListenAndServe`, func(q *parsedQuery) bool { return slices.Equal(q.syms, []string{"ListenAndServe"}) }},
		{`path:net/http file:server`, func(q *parsedQuery) bool { return slices.Equal(q.paths, []string{"net/http", "server"}) }},
		{`lang:go lang:py`, func(q *parsedQuery) bool { return slices.Equal(q.langs, []string{"go", "python"}) }},
		{`repo:backend`, func(q *parsedQuery) bool { return slices.Equal(q.repos, []string{"backend"}) }},
		// A dash before punctuation alone is prose, not an exclusion.
		{`map --> filter`, func(q *parsedQuery) bool { return q.plain() && len(q.words) == 3 }},
		// A slash that starts no delimited regular expression is a word.
		{`/usr/bin/env //go:embed /etc`, func(q *parsedQuery) bool {
			return q.plain() && slices.Equal(q.words, []string{"/usr/bin/env", "//go:embed", "/etc"})
		}},
		// Prose: punctuation may follow a closing quote.
		{`strings like "go1.20", "go1.21".`, func(q *parsedQuery) bool {
			return len(q.phrases) == 2 && q.phrases[0].src == "go1.20" && q.phrases[1].src == "go1.21"
		}},
		{`path:"with space"`, func(q *parsedQuery) bool { return slices.Equal(q.paths, []string{"with space"}) }},
		{`server -test -path:_test.go -lang:c -repo:old -"TODO" -/xx+/`, func(q *parsedQuery) bool {
			return len(q.notWords) == 1 && slices.Equal(q.notPaths, []string{"_test.go"}) && slices.Equal(q.notLangs, []string{"c"}) &&
				slices.Equal(q.notRepos, []string{"old"}) && len(q.not) == 2 && len(q.words) == 1
		}},
		// Other prefixes are words (C++, URLs), as is a lone dash.
		{`std::vector http://x - a:b`, func(q *parsedQuery) bool { return q.plain() && len(q.words) == 4 }},
		// FTS5 syntax is words like any other: nothing reaches SQLite.
		{`NEAR(a b) * ^x col:y AND OR NOT`, func(q *parsedQuery) bool { return q.plain() }},
	} {
		q, err := parseQueryLanguage(tc.q)
		if err != nil {
			t.Errorf("%q: %v", tc.q, err)
			continue
		}
		if !tc.check(q) {
			t.Errorf("%q: parsed as %+v", tc.q, q)
		}
	}
	for _, tc := range []struct {
		q      string
		column int
		msg    string
	}{
		{`foo "unterminated`, 5, "unterminated phrase"},
		{`/a(b/`, 1, "missing closing )"},
		{`x /a{1000}{1000}/`, 3, "regular expression"},
		{`/a{1001}/`, 1, "invalid repeat count"},
		{`"ab"cd`, 5, "a space must follow"},
		{`éé path:`, 4, "path: needs a value"},
		{`lang:cobol2`, 6, "unknown language"},
		{`-sym:x`, 1, "sym: cannot be excluded"},
		{`-foo -path:x`, 1, "only exclusions"},
		{`""`, 1, "empty phrase"},
		{`//`, 1, "empty regular expression"},
		{"a\x00b", 2, "control character"},
		{"ab \xff", 4, "not valid UTF-8"},
		{strings.Repeat("w ", 33), 65, "more than 32 terms"},
		{`/a/ -"b" /c/ /d/ /e/`, 18, "more than 4 regular expressions"},
	} {
		_, err := parseQueryLanguage(tc.q)
		var se *SyntaxError
		if !errors.As(err, &se) || !errors.Is(err, ErrBadQuery) {
			t.Errorf("%q: error %v, want a *SyntaxError", tc.q, err)
			continue
		}
		if se.Column != tc.column || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: %v (column %d), want column %d and %q", tc.q, err, se.Column, tc.column, tc.msg)
		}
	}
}

// TestRegexGrams: the trigram condition of a pattern (and its sure
// literals) holds for every text it matches (no file it matches is
// skipped), and rejects texts without its literals.
func TestRegexGrams(t *testing.T) {
	for _, tc := range []struct {
		re      string
		matches []string
		reject  []string
	}{
		{`func \(s \*Server\) Serve`, []string{"x func (s *Server) Serve(l)"}, []string{"func (s *Client) Do", "serve"}},
		{`(?i)listenandserve`, []string{"ListenAndServe", "LISTENANDSERVE"}, []string{"listen and serve"}},
		{`(?i)sſ`, []string{"Sſ"}, nil},
		{`(?i)kelvin`, []string{"\u212Aelvin"}, []string{"celsius"}},
		{`(foo|bar)baz`, []string{"foobaz", "barbaz"}, []string{"quxbaz", "foo bar"}},
		{`ab+cde`, []string{"abbbbcde"}, []string{"xxxxx"}},
		{`colou?r`, []string{"color", "colour"}, []string{"colr"}},
		{`[Hh]ello world`, []string{"hello world", "Hello world"}, []string{"jello world"}},
		{`(a+)+$`, []string{"aaa"}, nil},
		{`.*`, []string{"", "anything"}, nil},
		{`x{2,}yzw`, []string{"xxyzw"}, []string{"xyzz"}},
		{`über|straße`, []string{"über", "straße"}, nil},
	} {
		re, err := syntax.Parse(tc.re, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		q := regexGrams(re.Simplify())
		for _, m := range tc.matches {
			if !q.mayMatch(fileGrams(m)) {
				t.Errorf("%q: a text it matches, %q, fails its trigrams", tc.re, m)
			}
			if !q.hasLits(string(asciiLower(nil, m))) {
				t.Errorf("%q: a text it matches, %q, lacks one of its literals %q", tc.re, m, q.lits)
			}
		}
		for _, m := range tc.reject {
			if q.mayMatch(fileGrams(m)) {
				t.Errorf("%q: %q passes its trigrams", tc.re, m)
			}
		}
	}
}

// TestExtractSymbols: definitions of every language with their kinds,
// lines and doc comments; hostile input gives nothing, quickly, never a
// panic.
func TestExtractSymbols(t *testing.T) {
	has := func(syms []Symbol, name, kind string, line int, doc string) bool {
		return slices.ContainsFunc(syms, func(s Symbol) bool {
			return s.Name == name && s.Kind == kind && (line == 0 || s.Line == line) && strings.Contains(s.Doc, doc)
		})
	}
	for _, tc := range []struct {
		path, src string
		want      [][4]string // name, kind, line, doc part
	}{
		{"a.go", "// Package a does things.\npackage a\n\n// Server serves.\ntype Server struct{}\n\n// Serve runs.\nfunc (s *Server) Serve() {}\n\nfunc Listen() {}\n\nconst (\n\t// Max is big.\n\tMax = 1\n)\nvar x, y int\ntype I interface{ M() }\n",
			[][4]string{{"a", "package", "2", "Package a does things."}, {"Server", "type", "5", "Server serves."}, {"Serve", "method", "8", "Serve runs."},
				{"Listen", "func", "10", ""}, {"Max", "const", "14", "Max is big."}, {"y", "var", "16", ""}, {"I", "interface", "17", ""}}},
		{"m.py", "# helper\ndef load_config(path):\n    \"\"\"Read the config file.\"\"\"\n\nclass Loader(Base):\n    async def fetch(self):\n        '''Fetch\n        it.'''\n",
			[][4]string{{"load_config", "func", "2", "Read the config file."}, {"Loader", "class", "5", ""}, {"fetch", "func", "6", "Fetch"}}},
		{"w.ts", "/** Parses input. */\nexport function parseInput(s: string) {}\nexport default class App {\n  render() {\n    if (x) {\n    }\n  }\n}\nconst handler = async (req) => {}\ninterface Props {}\n",
			[][4]string{{"parseInput", "func", "2", "Parses input."}, {"App", "class", "3", ""}, {"render", "method", "4", ""}, {"handler", "func", "9", ""}, {"Props", "interface", "10", ""}}},
		{"x.c", "/* Adds. */\nstatic int add(int a, int b)\n{\n\treturn a + b;\n}\nint decl(void);\nstruct point {\n\tint x;\n};\n#define MAX_LEN 10\n",
			[][4]string{{"add", "func", "2", "Adds."}, {"point", "type", "7", ""}, {"MAX_LEN", "macro", "10", ""}}},
		{"K.java", "/**\n * A thing.\n */\npublic final class Thing {\n    /** Does. */\n    public static void doIt(String[] a) {\n        foo(a);\n    }\n}\n",
			[][4]string{{"Thing", "class", "4", "A thing."}, {"doIt", "method", "6", "Does."}}},
		{"l.rs", "/// Makes one.\npub fn make() -> T {}\npub(crate) struct Point { x: i32 }\nimpl Point {}\ntrait Shape {}\nmacro_rules! m {}\n",
			[][4]string{{"make", "func", "2", "Makes one."}, {"Point", "type", "3", ""}, {"Shape", "interface", "5", ""}, {"m", "macro", "6", ""}}},
	} {
		syms := extractSymbols(tc.path, []byte(tc.src))
		for _, w := range tc.want {
			line := 0
			for _, c := range w[2] {
				line = line*10 + int(c-'0')
			}
			if !has(syms, w[0], w[1], line, w[3]) {
				t.Errorf("%s: no %s %s at line %d with doc %q in %+v", tc.path, w[1], w[0], line, w[3], syms)
			}
		}
	}
	if syms := extractSymbols("x.c", []byte("int decl(void);\nfoo(bar);\n")); len(syms) != 0 {
		t.Errorf("declarations and calls as definitions: %+v", syms)
	}
	// Hostile: deep nesting, garbage, huge, one long line.
	for name, src := range map[string]string{
		"nest.go":    "package p\nvar x = " + strings.Repeat("(", 200000) + "1" + strings.Repeat(")", 200000),
		"garbage.go": "package p\nfunc \x00\xff{{{{[[[(((" + strings.Repeat("func (", 10000),
		"huge.py":    strings.Repeat("def f():\n", symbolsMaxBytes/9+1),
		"long.js":    "function " + strings.Repeat("a", 1<<20) + "() {}\n",
	} {
		start := time.Now()
		syms := extractSymbols(name, []byte(src))
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: %v", name, d)
		}
		if name == "huge.py" && syms != nil || name == "long.js" && len(syms) != 0 {
			t.Errorf("%s: %d symbols", name, len(syms))
		}
	}
}
