package web

import (
	"bytes"
	"html"
	"html/template"
	"strings"

	"github.com/alecthomas/chroma/v2"
	chtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/util"
)

// Markdown is text (a message: model output, hostile) rendered as the
// UI shows it. It is safe to insert as HTML: raw HTML in the text is
// dropped (goldmark without WithUnsafe), a link keeps its target only
// for http, https, mailto and relative URLs, an image becomes a link
// (a page never loads what a reply names), and code is highlighted by
// chroma with CSS classes (no style attributes, which the CSP forbids).
// A text longer than MaxMarkdown is shown as typed (Plain).
func Markdown(text string) template.HTML {
	if len(text) > MaxMarkdown {
		return Plain(text)
	}
	var b bytes.Buffer
	if err := md.Convert([]byte(text), &b); err != nil {
		// goldmark fails only on a writer error; show the text as is.
		return template.HTML("<pre>" + html.EscapeString(text) + "</pre>")
	}
	return template.HTML(b.String())
}

// MaxMarkdown is the longest text Markdown formats. goldmark's time
// grows with the square of some texts' length (lists or quotes nested
// on one line, unclosed "[](", runs of delimiters): a hostile reply
// must not cost a render more than a bounded time.
const MaxMarkdown = 64 << 10

// Plain is text shown as typed: escaped, in a <pre>.
func Plain(text string) template.HTML {
	return template.HTML(`<pre tabindex="0" class="plain">` + html.EscapeString(text) + "</pre>")
}

var md = goldmark.New(
	// GFM, with a table cell's alignment as an align attribute: a style
	// attribute is refused by the CSP (and logged as a violation).
	goldmark.WithExtensions(extension.Linkify, extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute)),
		extension.Strikethrough, extension.TaskList),
	goldmark.WithRendererOptions(renderer.WithNodeRenderers(util.Prioritized(safeRenderer{}, 100))),
)

var formatter = chtml.New(chtml.WithClasses(true), chtml.ClassPrefix("ch-"))

// safeURL reports whether a link may keep its target: a relative URL or
// an http, https or mailto one. The browser's own view of the scheme
// counts, so tabs and newlines (which it strips) and leading controls
// and spaces are removed first.
func safeURL(u []byte) bool {
	s := strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, string(u))
	s = strings.TrimLeft(s, "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ")
	i := strings.IndexAny(s, ":/?#")
	if i < 0 || s[i] != ':' {
		return true // no scheme: relative
	}
	switch strings.ToLower(s[:i]) {
	case "http", "https", "mailto":
		return true
	}
	return false
}

// safeRenderer renders links, images and code blocks (see Markdown).
type safeRenderer struct{}

func (safeRenderer) RegisterFuncs(r renderer.NodeRendererFuncRegisterer) {
	r.Register(ast.KindLink, renderLink)
	r.Register(ast.KindImage, renderImage)
	r.Register(ast.KindAutoLink, renderAutoLink)
	r.Register(ast.KindFencedCodeBlock, renderCode)
	r.Register(ast.KindCodeBlock, renderCode)
	r.Register(east.KindTaskCheckBox, renderTaskCheckBox)
	r.Register(east.KindTable, renderTable)
}

// renderTaskCheckBox is a task list item's box, labelled (a screen
// reader says "done" or "to do", not just "checkbox").
func renderTaskCheckBox(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	if node.(*east.TaskCheckBox).IsChecked {
		w.WriteString(`<input type="checkbox" checked disabled aria-label="done"> `)
	} else {
		w.WriteString(`<input type="checkbox" disabled aria-label="to do"> `)
	}
	return ast.WalkContinue, nil
}

// renderTable opens a table focusable, so that a keyboard can scroll a
// wide one (the stylesheet lets it scroll rather than widen the page).
func renderTable(w util.BufWriter, _ []byte, _ ast.Node, entering bool) (ast.WalkStatus, error) {
	if entering {
		w.WriteString("<table tabindex=\"0\">\n")
	} else {
		w.WriteString("</table>\n")
	}
	return ast.WalkContinue, nil
}

// href is a link's destination as the page gets it (entities resolved,
// escaped), and whether it may be kept: the check is of what the
// browser sees, not of the Markdown source.
func href(dest []byte) ([]byte, bool) {
	u := util.URLEscape(dest, true)
	return u, safeURL(u)
}

func openLink(w util.BufWriter, u []byte) {
	w.WriteString(`<a href="`)
	w.WriteString(html.EscapeString(string(u)))
	w.WriteString(`" rel="nofollow noopener noreferrer">`)
}

func renderLink(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.Link)
	u, ok := href(n.Destination)
	if !ok {
		return ast.WalkContinue, nil // the text only
	}
	if entering {
		openLink(w, u)
	} else {
		w.WriteString("</a>")
	}
	return ast.WalkContinue, nil
}

func renderImage(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.Image)
	u, ok := href(n.Destination)
	switch {
	case entering && ok:
		openLink(w, u)
		w.WriteString("[image: ")
	case entering:
		w.WriteString("[image: ")
	case ok:
		w.WriteString("]</a>")
	default:
		w.WriteString("]")
	}
	return ast.WalkContinue, nil
}

func renderAutoLink(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	n := node.(*ast.AutoLink)
	u, label := n.URL(source), n.Label(source)
	if n.AutoLinkType == ast.AutoLinkEmail && !bytes.HasPrefix(bytes.ToLower(u), []byte("mailto:")) {
		u = append([]byte("mailto:"), u...)
	}
	if u, ok := href(u); ok {
		openLink(w, u)
		w.WriteString(html.EscapeString(string(label)))
		w.WriteString("</a>")
	} else {
		w.WriteString(html.EscapeString(string(label)))
	}
	return ast.WalkSkipChildren, nil
}

func renderCode(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	var code strings.Builder
	lines := node.Lines()
	for i := 0; i < lines.Len(); i++ {
		seg := lines.At(i)
		code.Write(seg.Value(source))
	}
	lang := ""
	if f, ok := node.(*ast.FencedCodeBlock); ok && f.Info != nil {
		lang = string(f.Language(source))
	}
	// A figure, captioned with the language as the fence names it (cut
	// short: it is the model's text), for the page to add its copy
	// button to.
	w.WriteString(`<figure class="code">`)
	if lang != "" {
		label := lang
		if r := []rune(label); len(r) > maxLangLabel {
			label = string(r[:maxLangLabel]) + "…"
		}
		w.WriteString(`<figcaption class="lang">`)
		w.WriteString(html.EscapeString(label))
		w.WriteString("</figcaption>")
	}
	w.WriteString(Highlight(code.String(), lang))
	w.WriteString("</figure>\n")
	return ast.WalkSkipChildren, nil
}

// maxLangLabel is the most characters of a code fence's language shown.
const maxLangLabel = 24

// maxHighlight bounds the text chroma tokenizes; beyond it, code is
// shown plain (escaped).
const maxHighlight = 512 << 10

// Highlight is code as highlighted HTML (<pre class="ch-chroma">…),
// escaped; lang is a chroma lexer name or alias ("go", "diff"), or a
// file name; unknown or empty: plain.
func Highlight(code, lang string) string {
	var lx chroma.Lexer
	if lang != "" && len(code) <= maxHighlight {
		lx = lexers.Get(lang)
		if lx == nil {
			lx = lexers.Match(lang)
		}
	}
	if lx == nil {
		return `<pre tabindex="0" class="ch-chroma"><code>` + html.EscapeString(code) + "</code></pre>"
	}
	it, err := chroma.Coalesce(lx).Tokenise(nil, code)
	if err != nil {
		return `<pre class="ch-chroma"><code>` + html.EscapeString(code) + "</code></pre>"
	}
	var b strings.Builder
	if err := formatter.Format(&b, styles.Get("github"), it); err != nil {
		return `<pre class="ch-chroma"><code>` + html.EscapeString(code) + "</code></pre>"
	}
	// Focusable, so that a keyboard can scroll a wide block.
	return strings.Replace(b.String(), `<pre class="ch-chroma"`, `<pre tabindex="0" class="ch-chroma"`, 1)
}

// chromaCSS is the highlighting's classes, appended to the one
// stylesheet: light, and dark under prefers-color-scheme. Each theme
// under its own media query: the two styles do not set the same token
// classes, and a light colour left standing in dark mode (.ch-nx's
// near-black on the dark background) would be unreadable.
func chromaCSS() []byte {
	var b bytes.Buffer
	b.WriteString("@media not all and (prefers-color-scheme: dark) {\n")
	formatter.WriteCSS(&b, styles.Get("github"))
	b.WriteString("}\n@media (prefers-color-scheme: dark) {\n")
	formatter.WriteCSS(&b, styles.Get("github-dark"))
	b.WriteString("}\n")
	return b.Bytes()
}
