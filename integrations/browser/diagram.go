package browser

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// DefaultMermaid is where scripts/install-prereqs installs mermaid (a
// pinned version, outside the checkout).
const DefaultMermaid = "/var/cache/codumentor-prereqs/mermaid-11.17.2/node_modules/mermaid/dist/mermaid.min.js"

// MaxDiagramBytes caps a diagram's source.
const MaxDiagramBytes = 64 << 10

// Format is a diagram's output format.
type Format string

const (
	SVG Format = "svg"
	PNG Format = "png"
)

// ErrDiagram is wrapped by the error of a diagram mermaid cannot render
// (a syntax error, a source too large): the caller's to fix.
var ErrDiagram = errors.New("diagram cannot be rendered")

// ErrNoMermaid is returned when mermaid's script cannot be read.
var ErrNoMermaid = errors.New("browser: mermaid is not installed: run scripts/install-prereqs or set mermaid_render.script")

// The render page lives at an origin that never resolves; the
// interceptor answers its URLs from memory (renderFiles) and refuses
// everything else, so the page makes no network request at all.
const (
	renderOrigin = "http://codumentor-render.invalid/"
	renderURL    = renderOrigin
	// renderHTML's CSP is a second wall: scripts only from the page's own
	// origin, no connections, images only from data: URLs. %s is the
	// script element that loads mermaid.
	renderHTML = `<!doctype html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'self' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:; font-src data:">
%s</head><body style="margin:0;background:#fff"></body></html>`
	// esmEntry and esmChunks are mermaid's ESM build beside
	// mermaid.min.js, as npm installs it.
	esmEntry  = "mermaid.esm.min.mjs"
	esmChunks = "chunks/mermaid.esm.min"
	// esmBoot loads the ESM build as the page's mermaid.
	esmBoot = "import mermaid from './" + esmEntry + "';\nwindow.mermaid = mermaid;\n"
)

// mermaidInit sets mermaid up with its strict security level (labels
// sanitized, no click handlers) and pins every setting that decides what
// a diagram may load or run: mermaid deletes the keys listed in secure,
// at any depth, from a diagram's directives (%%{init: …}%%) and front
// matter (config:), so the author of a diagram cannot turn HTML labels
// (a foreignObject, where an <img> loads), DOMPurify's allowances, CSS of
// their own (an @import, a url()) or the level itself back on. The first
// six are mermaid's own defaults, kept.
const mermaidInit = `mermaid.initialize({startOnLoad: false, securityLevel: 'strict',
	secure: ['secure', 'securityLevel', 'startOnLoad', 'maxTextSize', 'suppressErrorRendering', 'maxEdges',
		'htmlLabels', 'dompurifyConfig', 'themeCSS', 'fontFamily', 'altFontFamily', 'icons',
		'arrowMarkerAbsolute', 'legacyMathML', 'forceLegacyMathML'],
	maxTextSize: ` + maxDiagramBytesJS + `, suppressErrorRendering: true, htmlLabels: false,
	flowchart: {htmlLabels: false}, class: {htmlLabels: false}, state: {htmlLabels: false},
	sequence: {htmlLabels: false}, mindmap: {htmlLabels: false}, kanban: {htmlLabels: false}});`

// maxDiagramBytesJS is MaxDiagramBytes for mermaid's maxTextSize (whose
// default, 50000, would refuse what the API accepts).
const maxDiagramBytesJS = "65536"

// The array's length is 0 only while the two agree.
var _ = [MaxDiagramBytes - 65536]struct{}{}

// outsideJS(svg) names the first reference of the SVG text to anything
// outside it (an element of another namespace than SVG's, an href or src
// that is not a fragment or a data: URL, a CSS url() or @import that
// loads), or returns "": what the pinned settings above keep out, checked
// again on the result.
const outsideJS = `((svg) => {
	const doc = new DOMParser().parseFromString(svg, 'image/svg+xml');
	if (doc.querySelector('parsererror')) return 'the SVG does not parse';
	const inert = (u) => /^\s*(#|data:image\/(png|gif|jpeg|webp);)/i.test(u);
	const css = (t) => /@import/i.test(t) || [...t.matchAll(/url\(\s*['"]?([^'")]*)/gi)].some((m) => !inert(m[1]));
	for (const el of doc.getElementsByTagName('*')) {
		if (el.namespaceURI !== 'http://www.w3.org/2000/svg') return 'an element <' + el.localName + '> outside SVG';
		if (el.localName === 'foreignObject') return 'an HTML label (foreignObject)';
		for (const a of el.attributes) {
			// A link (<a>) to a page loads nothing until followed.
			const link = el.localName === 'a' && /^\s*https?:/i.test(a.value);
			if (/^(href|src|xlink:href)$/i.test(a.name) && !inert(a.value) && !link) return 'a reference to ' + a.value.slice(0, 100);
			if (a.name === 'style' && css(a.value)) return 'a style that loads a resource';
		}
		if (el.localName === 'style' && css(el.textContent)) return 'a stylesheet that loads a resource';
	}
	return '';
})`

// warmJS renders a constant diagram in a spare render page, before any
// request: mermaid's first render in a page sets up much of what later
// ones reuse (its diagram registry, the flowchart code, text measuring),
// and then costs about twice a second one. The page is still the
// request's own: nothing of a user's is in it.
const warmJS = `(async () => {
	` + mermaidInit + `
	await mermaid.render('codumentor-warmup', 'graph TD\n  a[warm] --> b[up]');
	return true;
})()`

// renderJS renders the source (a JSON string) and returns the SVG text;
// for PNG it draws the SVG as an image (an SVG image runs no script and
// loads nothing) on a white canvas and returns the canvas's PNG data URL
// and its size, all in the page: no screenshot, which waits for a
// compositor frame. A canvas that the image taints (an SVG with a
// foreignObject) cannot be read: the image is then shown in the page
// for a screenshot instead. Beyond maxSide pixels on a side it draws
// nothing.
const renderJS = `(async (src, png, maxSide) => {
	try {
	` + mermaidInit + `
	let svg;
	try {
		svg = (await mermaid.render('codumentor-diagram', src)).svg;
	} catch (e) {
		return {error: String(e && e.message || e).slice(0, 500)};
	}
	const outside = ` + outsideJS + `(svg);
	if (outside) return {error: 'the diagram refers to something outside it: ' + outside};
	if (!png) return {svg};
	const doc = new DOMParser().parseFromString(svg, 'image/svg+xml');
	const vb = (doc.documentElement.getAttribute('viewBox') || '').split(/[\s,]+/).map(Number);
	const w = Math.ceil(vb[2] || 800), h = Math.ceil(vb[3] || 600);
	if (w > maxSide || h > maxSide) return {width: w, height: h};
	const img = new Image(w, h);
	img.src = 'data:image/svg+xml;base64,' + btoa(unescape(encodeURIComponent(svg)));
	await img.decode();
	const canvas = document.createElement('canvas');
	canvas.width = w;
	canvas.height = h;
	const g = canvas.getContext('2d');
	g.fillStyle = '#fff';
	g.fillRect(0, 0, w, h);
	g.drawImage(img, 0, 0, w, h);
	try {
		if (!%t) return {png: canvas.toDataURL('image/png'), width: w, height: h};
	} catch (e) {}
	document.body.replaceChildren(img);
	return {width: w, height: h};
	} catch (e) {
		return {error: 'the diagram cannot be drawn: ' + String(e && e.message || e).slice(0, 300)};
	}
})(%s, %t, %d)`

type rendered struct {
	SVG    string  `json:"svg"`
	PNG    string  `json:"png"` // a data URL
	Error  string  `json:"error"`
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
}

// maxPNGSide caps a PNG's width and height, in pixels.
const maxPNGSide = 8192

// RenderDiagram renders mermaid source to SVG or PNG in a fresh incognito
// context of a page that loads nothing from the network.
func (b *Browser) RenderDiagram(ctx context.Context, source string, format Format) ([]byte, error) {
	if format != SVG && format != PNG {
		return nil, fmt.Errorf("%w: format %q: want svg or png", ErrDiagram, format)
	}
	if strings.TrimSpace(source) == "" {
		return nil, fmt.Errorf("%w: the source is empty", ErrDiagram)
	}
	if len(source) > MaxDiagramBytes {
		return nil, fmt.Errorf("%w: the source is %d bytes; at most %d", ErrDiagram, len(source), MaxDiagramBytes)
	}
	if _, err := b.renderFiles(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, pageTimeout)
	defer cancel()
	pg, release, err := b.take(ctx, renderPage)
	if err != nil {
		return nil, err
	}
	defer release()
	tctx, in := pg.ctx, pg.in
	src, _ := json.Marshal(source)
	r, err := chromedp.Run(tctx, chromedp.Evaluate[rendered](fmt.Sprintf(renderJS, b.screenshotPNG, src, format == PNG, maxPNGSide), chromedp.EvalAwaitPromise))
	if err != nil {
		// The page catches what the diagram makes fail: this is the
		// page's end (its time is up, the renderer crashed), which the
		// diagram may well have caused.
		return nil, b.renderFailed(ctx, pg, err)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("%w: %s", ErrDiagram, r.Error)
	}
	if refused := in.refusals(); len(refused) > 0 {
		// Nothing in a diagram may load anything: a request means
		// something ran or loaded that should not have.
		return nil, fmt.Errorf("%w: the diagram made a request, refused: %s", ErrDiagram, refused[0])
	}
	if format == SVG {
		return []byte(r.SVG), nil
	}
	if r.Width > maxPNGSide || r.Height > maxPNGSide {
		return nil, fmt.Errorf("%w: %.0fx%.0f pixels; at most %d on a side", ErrDiagram, r.Width, r.Height, maxPNGSide)
	}
	if r.PNG != "" {
		data, ok := strings.CutPrefix(r.PNG, "data:image/png;base64,")
		out, err := base64.StdEncoding.DecodeString(data)
		if !ok || err != nil {
			return nil, fmt.Errorf("%w: the page drew no PNG", ErrDiagram)
		}
		if cfg, err := png.DecodeConfig(bytes.NewReader(out)); err != nil || cfg.Width != int(r.Width) || cfg.Height != int(r.Height) {
			return nil, fmt.Errorf("%w: the page drew no PNG of the diagram's size", ErrDiagram)
		}
		return out, nil
	}
	shot, err := chromedp.Call(tctx, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format:                page.CaptureScreenshotFormatPng,
		Clip:                  &page.Viewport{Width: r.Width, Height: r.Height, Scale: 1},
		CaptureBeyondViewport: new(true),
	})
	if err != nil {
		return nil, b.renderFailed(ctx, pg, err)
	}
	return shot.Data, nil
}

// renderFailed is the error of a render whose page failed (err): the
// diagram's, said without the browser's internals, once the cause is
// logged.
func (b *Browser) renderFailed(ctx context.Context, pg *tab, err error) error {
	b.o.Log.Debug("render page failed", "err", err)
	if merr := b.memoryHit(pg); merr != nil {
		return fmt.Errorf("%w: %w", ErrDiagram, merr)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: rendering took longer than %s", ErrDiagram, pageTimeout)
	}
	return fmt.Errorf("%w: the render page failed (%s)", ErrDiagram, firstLine(err.Error()))
}

// renderFiles returns the render page's files by URL: the page and
// mermaid, read once (the files are the operator's).
func (b *Browser) renderFiles() (map[string]localFile, error) {
	b.mermaidOnce.Do(func() {
		b.mermaid, b.mermaidErr = loadMermaid(b.o.Mermaid)
		if b.mermaidErr != nil {
			b.mermaidErr = fmt.Errorf("%w (%v)", ErrNoMermaid, b.mermaidErr)
		}
	})
	return b.mermaid, b.mermaidErr
}

// loadMermaid reads mermaid for the render page. Beside an npm install's
// mermaid.min.js, the ESM build of the same package is taken instead: a
// page then compiles and runs only the code its diagram needs (a fifth
// of the 3.5 MB bundle for a flowchart; the rest of the chunks are
// answered from memory when a diagram imports them), which is most of
// the time a page takes to open. Else the script itself, in one piece.
func loadMermaid(script string) (map[string]localFile, error) {
	const js = "text/javascript; charset=utf-8"
	page := func(tag string) localFile {
		return localFile{body: fmt.Appendf(nil, renderHTML, tag), ctype: "text/html; charset=utf-8"}
	}
	dir := filepath.Dir(script)
	if filepath.Base(script) == "mermaid.min.js" {
		if files, err := loadESM(dir); err == nil {
			files[renderURL] = page(`<script type="module" src="/boot.mjs"></script>`)
			files[renderOrigin+"boot.mjs"] = localFile{body: []byte(esmBoot), ctype: js}
			return files, nil
		}
	}
	data, err := os.ReadFile(script)
	if err != nil {
		return nil, err
	}
	return map[string]localFile{
		renderURL:                   page(`<script src="/mermaid.js"></script>`),
		renderOrigin + "mermaid.js": {body: data, ctype: js},
	}, nil
}

// loadESM reads mermaid's ESM build in dir: the entry module and every
// chunk, by their URLs under renderOrigin.
func loadESM(dir string) (map[string]localFile, error) {
	const js = "text/javascript; charset=utf-8"
	entry, err := os.ReadFile(filepath.Join(dir, esmEntry))
	if err != nil {
		return nil, err
	}
	files := map[string]localFile{renderOrigin + esmEntry: {body: entry, ctype: js}}
	ents, err := os.ReadDir(filepath.Join(dir, esmChunks))
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".mjs") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, esmChunks, e.Name()))
		if err != nil {
			return nil, err
		}
		files[renderOrigin+esmChunks+"/"+e.Name()] = localFile{body: data, ctype: js}
	}
	return files, nil
}
