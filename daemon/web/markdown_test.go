package web

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestMarkdownIsInert(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // substrings the output must have
	}{
		{"script tag", "hi <script>alert(1)</script>", []string{"hi"}},
		{"img onerror", `<img src=x onerror="alert(1)">`, nil},
		{"html block", "<div onclick=\"alert(1)\">x</div>\n\ntext", []string{"text"}},
		{"javascript link", "[click](javascript:alert(1))", []string{"click"}},
		{"javascript link, upper case", "[click](JaVaScRiPt:alert(1))", []string{"click"}},
		{"javascript link, tab inside", "[click](java&#09;script:alert(1))", []string{"click"}},
		{"javascript link, entity", "[click](&#106;avascript:alert(1))", []string{"click"}},
		{"vbscript link", "[v](vbscript:msgbox(1))", []string{"v"}},
		{"data link", "[d](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)", []string{"d"}},
		{"javascript autolink", "<javascript:alert(1)>", []string{"javascript:alert(1)"}},
		{"image", "![x](http://evil.example/x.png)", []string{`href="http://evil.example/x.png"`, "[image: x]"}},
		{"image javascript", "![x](javascript:alert(1))", []string{"[image: x]"}},
		{"code fence", "```go\nfunc main() { \"<script>\" }\n```", []string{`class="ch-chroma"`, "&lt;script&gt;"}},
		{"code fence, unknown language", "```nosuchlang\n<b>x</b>\n```", []string{"&lt;b&gt;x&lt;/b&gt;"}},
		{"attribute breakout", `[x](http://a.example/"onmouseover="alert(1))`, []string{"http://a.example/"}},
		{"http link kept", "[ok](https://example.com/a?b=c)", []string{`<a href="https://example.com/a?b=c"`}},
		{"relative link kept", "[ok](/c/x)", []string{`<a href="/c/x"`}},
		{"table alignment", "|a|b|\n|:-|-:|\n|1|2|", []string{"<table", "<td"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := string(Markdown(tc.in))
			low := strings.ToLower(out)
			for _, bad := range []string{"<script", "<img", "onerror", "onclick", `onmouseover="`, "javascript:alert", "vbscript:", "data:text", " style=", "<div"} {
				if strings.Contains(low, bad) && !(bad == "javascript:alert" && tc.name == "javascript autolink" && !strings.Contains(low, "href")) {
					t.Errorf("%q renders %q, which holds %q", tc.in, out, bad)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%q renders %q, without %q", tc.in, out, w)
				}
			}
		})
	}
}

func TestSafeURL(t *testing.T) {
	for u, want := range map[string]bool{
		"https://x.example": true, "http://x": true, "mailto:a@b": true, "/rel": true, "rel/x": true, "#frag": true, "?q=1": true,
		"javascript:x": false, " javascript:x": false, "\x01javascript:x": false, "java\nscript:x": false, "JAVASCRIPT:x": false,
		"data:text/html,x": false, "file:///etc/passwd": false, "vbscript:x": false, "blob:x": false,
	} {
		if got := safeURL([]byte(u)); got != want {
			t.Errorf("safeURL(%q) = %v, want %v", u, got, want)
		}
	}
}

// Some inputs take goldmark time that grows with the square of their
// length (nested lists or quotes on one line, unclosed "[](" or
// delimiter runs): a text longer than MaxMarkdown is shown as typed,
// escaped, rather than parsed.
func TestMarkdownLongTextIsPlain(t *testing.T) {
	for name, unit := range map[string]string{"nested lists": "- ", "nested quotes": "> ", "unclosed links": "[](", "delimiters": "~a"} {
		t.Run(name, func(t *testing.T) {
			in := strings.Repeat(unit, (MaxMarkdown+len(unit))/len(unit)) + "<b>x</b>"
			out := string(Markdown(in))
			if !strings.HasPrefix(out, `<pre tabindex="0" class="plain">`) || strings.Contains(out, "<b>") || !strings.Contains(out, "&lt;b&gt;") ||
				strings.Contains(out, "<ul>") || strings.Contains(out, "<blockquote>") || strings.Contains(out, "<del>") {
				t.Errorf("a text of %d bytes renders as %.120q…", len(in), out)
			}
		})
	}
	// At the bound, still formatted.
	in := "*x*" + strings.Repeat(" ", MaxMarkdown-3)
	if out := string(Markdown(in)); !strings.Contains(out, "<em>x</em>") {
		t.Errorf("a text of %d bytes renders as %.120q…", len(in), out)
	}
}

func TestMarkdownBlocks(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"code language shown", "```go\nx := 1\n```", []string{`<figure class="code"><figcaption class="lang">go</figcaption><pre tabindex="0" class="ch-chroma">`, "</pre></figure>"}},
		{"code without language", "```\nx\n```", []string{`<figure class="code"><pre tabindex="0" class="ch-chroma"><code>x`}},
		{"code language escaped and cut", "```<b>" + strings.Repeat("x", 40) + "\nx\n```", []string{`<figcaption class="lang">&lt;b&gt;` + strings.Repeat("x", 21) + "…</figcaption>"}},
		{"task list labelled", "- [x] shipped\n- [ ] tested", []string{`<input type="checkbox" checked disabled aria-label="done"> shipped`, `<input type="checkbox" disabled aria-label="to do"> tested`}},
		{"table focusable", "|a|b|\n|-|-|\n|1|2|", []string{`<table tabindex="0">`, "<th>a</th>", "<td>2</td>", "</table>"}},
		{"blockquote", "> quoted", []string{"<blockquote>\n<p>quoted</p>\n</blockquote>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := string(Markdown(tc.in))
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%q renders %q, without %q", tc.in, out, w)
				}
			}
		})
	}
}

// Every token class the highlighter's stylesheet colours is readable
// (WCAG AA, 4.5:1 against its background) in both themes, with the
// cascade as a browser applies it: a rule of one theme that the other
// does not override stays in force there. (Whitespace and the line
// numbers, which the formatter does not show, are not text.)
func TestChromaCSSContrast(t *testing.T) {
	// The page's own text colours (app.css --fg), for a code block whose
	// style names none.
	themes := map[string]string{"light": "#1b1f24", "dark": "#e6edf3"}
	for theme, fg := range themes {
		rules := map[string]map[string]string{} // selector: property: value
		var order []string
		active := []bool{true}
		for _, line := range strings.Split(string(chromaCSS()), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, "@media"):
				dark := strings.Contains(line, "(prefers-color-scheme: dark)")
				on := dark == (theme == "dark")
				if strings.Contains(line, "not all and") {
					on = !on
				}
				active = append(active, active[len(active)-1] && on)
				continue
			case line == "}":
				active = active[:len(active)-1]
				continue
			case line == "" || !active[len(active)-1]:
				continue
			}
			if i := strings.Index(line, "*/"); i >= 0 {
				line = strings.TrimSpace(line[i+2:])
			}
			sel, decls, ok := strings.Cut(line, "{")
			if !ok {
				t.Fatalf("unexpected CSS line %q", line)
			}
			sel = strings.TrimSpace(sel)
			if rules[sel] == nil {
				rules[sel] = map[string]string{}
				order = append(order, sel)
			}
			for _, d := range strings.Split(strings.TrimSuffix(strings.TrimSpace(decls), "}"), ";") {
				if k, v, ok := strings.Cut(d, ":"); ok {
					rules[sel][strings.TrimSpace(k)] = strings.TrimSpace(v)
				}
			}
		}
		pre := rules[".ch-chroma"]
		baseFG, baseBG := fg, pre["background-color"]
		if c := pre["color"]; c != "" {
			baseFG = c
		}
		for _, sel := range order {
			r := rules[sel]
			if !strings.HasPrefix(sel, ".ch-chroma .") || r["color"] == "" || sel == ".ch-chroma .ch-w" || sel == ".ch-chroma .ch-ln" || sel == ".ch-chroma .ch-lnt" || r["color"] == "inherit" {
				continue
			}
			c, bg := r["color"], baseBG
			if b := r["background-color"]; b != "" {
				bg = b
			}
			if got := contrast(t, c, bg); got < 4.5 {
				t.Errorf("%s: %s is %s on %s, contrast %.2f (want ≥ 4.5)", theme, sel, c, bg, got)
			}
		}
		if got := contrast(t, baseFG, baseBG); got < 4.5 {
			t.Errorf("%s: code text %s on %s, contrast %.2f", theme, baseFG, baseBG, got)
		}
	}
}

// contrast is the WCAG contrast ratio of two #rrggbb colours.
func contrast(t *testing.T, a, b string) float64 {
	t.Helper()
	lum := func(s string) float64 {
		var r, g, bl int
		if _, err := fmt.Sscanf(s, "#%02x%02x%02x", &r, &g, &bl); err != nil {
			t.Fatalf("colour %q: %v", s, err)
		}
		ch := func(v int) float64 {
			c := float64(v) / 255
			if c <= 0.03928 {
				return c / 12.92
			}
			return math.Pow((c+0.055)/1.055, 2.4)
		}
		return 0.2126*ch(r) + 0.7152*ch(g) + 0.0722*ch(bl)
	}
	x, y := lum(a), lum(b)
	if x < y {
		x, y = y, x
	}
	return (x + 0.05) / (y + 0.05)
}
