package web

import (
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
		{"table alignment", "|a|b|\n|:-|-:|\n|1|2|", []string{"<table>", "<td"}},
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
