package retrieval

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestWords(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"parseConfig", "parseconfig parse config"},
		{"parse_config", "parseconfig parse config"},
		{"parse config", "parse config"},
		{"HTTPServer.ServeHTTP", "httpserver http server servehttp serve http"},
		{"utf8.DecodeRune(sha256)", "utf8 decoderune decode rune sha256"},
		{"__init__", "init"},
		{"x" + strings.Repeat("y", maxToken), ""},
		{"naïveCafé", "naïvecafé naïve café"},
		// ASCII takes a byte loop, the rest the rune one: the same rules.
		{"getHTTP2Conn XMLHttpRequest ID a_B__c x9Y", "gethttp2conn get http2 conn xmlhttprequest xml http request id abc a b c x9y x9 y"},
		{"ÀBCdef Été_ÉtéX", "àbcdef àb cdef étéétéx été été x"},
		// Unindexed when they stand alone: one character, common words.
		{"for i := 0; i < n; i++ { x.Is(The) }", ""},
		{"The isValid a_b X é Été the_", "isvalid is valid ab a b été"},
	} {
		if got := terms(tc.in); got != tc.want {
			t.Errorf("terms(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseQuery(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"how does parseConfig work", "[[parse config] [work]]"},
		{`"parse" OR config* NEAR(xy)`, "[[parse] [config] [near] [xy]]"},
		{"the of", "[]"},
		{"a a A", "[]"},
		{"how is x parsed In Go", "[[parsed] [go]]"},
		{"isValid é", "[[is valid]]"},
		{`"" * ^ :`, "[]"},
	} {
		if got := fmt.Sprint(parseQuery(tc.in)); got != tc.want {
			t.Errorf("parseQuery(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("word%d", i))
	}
	if got := len(parseQuery(strings.Join(many, " "))); got != maxQueryWords {
		t.Errorf("%d words kept of 40, want %d", got, maxQueryWords)
	}
	// What reaches FTS5: quoted phrases of letters and digits.
	if got := ftsQuery(parseQuery(`parseConfig" OR xy`), nil); got != `"parse config" OR "parseconfig" OR "xy"` {
		t.Errorf("ftsQuery = %s", got)
	}
}

// lines is n numbered lines.
func lines(n int, f func(i int) string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(f(i) + "\n")
	}
	return b.String()
}

func ranges(cs []Chunk) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%d-%d", c.StartLine, c.EndLine))
	}
	return out
}

func TestChunk(t *testing.T) {
	// Go: three 30-line functions; boundaries where top-level
	// declarations start, never inside one (two would be 61 lines).
	fn := func(name string) string {
		return "func " + name + "() {\n" + lines(28, func(i int) string { return "\tx := 1" }) + "}\n"
	}
	goSrc := "package p\n\n" + fn("a") + "\n" + fn("b") + "\n" + fn("c")
	if got := ranges(chunk("p.go", []byte(goSrc))); !slices.Equal(got, []string{"1-33", "34-64", "65-94"}) {
		t.Errorf("go chunks %v", got)
	}
	// A 150-line function is windowed: 60 lines, 10 overlapping.
	long := "package p\n\n" + "func long() {\n" + lines(148, func(i int) string { return "\ty := 2" }) + "}\n"
	if got := ranges(chunk("l.go", []byte(long))); !slices.Equal(got, []string{"1-60", "51-110", "101-152"}) {
		t.Errorf("long chunks %v", got)
	}
	// Markdown by heading.
	md := "# A\n\ntext\n\n## B\n\nmore\n" + "```\n# not a heading\n```\n"
	cs := chunk("r.md", []byte(md))
	if got := ranges(cs); !slices.Equal(got, []string{"1-10"}) || cs[0].Language != "markdown" {
		t.Errorf("markdown chunks %v", got)
	}
	big := lines(40, func(i int) string { return fmt.Sprintf("# H%d\n%s", i, strings.Repeat("w ", 10)) })
	if got := len(chunk("b.md", []byte(big))); got != 2 {
		t.Errorf("80 lines of headings: %d chunks, want 2", got)
	}
	// One 100 KB line: cut into chunks of at most chunkBytes, same line.
	cs = chunk("one.txt", []byte(strings.Repeat("é", 50<<10)))
	for _, c := range cs {
		if len(c.Text) > chunkBytes || c.StartLine != 1 || c.EndLine != 1 || !strings.HasPrefix(c.Text, "é") {
			t.Errorf("chunk of %d bytes, lines %d-%d", len(c.Text), c.StartLine, c.EndLine)
		}
	}
	if len(cs) != 7 {
		t.Errorf("%d chunks of a 100 KiB line, want 7", len(cs))
	}
	// Invalid UTF-8 is made valid; braces in strings and comments do not count.
	cs = chunk("s.go", []byte("package p\n\nvar s = \"{{{\" // {\n/* { */\n\nfunc f() {}\n\xff\n"))
	if len(cs) != 1 || !strings.Contains(cs[0].Text, "\uFFFD") {
		t.Errorf("chunks %+v", cs)
	}
	if st := unitStarts(strings.SplitAfter("package p\n\nvar s = \"{{{\" // {\n/* { */\n\nfunc f() {}\n", "\n"), byBraces); !slices.Equal(st, []int{0, 2, 5}) {
		t.Errorf("unit starts %v, want [0 2 5]", st)
	}
}
