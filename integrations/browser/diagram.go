package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
// interceptor answers its two URLs from memory and refuses everything
// else, so the page makes no network request at all.
const (
	renderURL    = "http://codumentor-render.invalid/"
	renderScript = "http://codumentor-render.invalid/mermaid.js"
	// renderHTML's CSP is a second wall: scripts only from the page's own
	// origin, no connections, images only from data: URLs.
	renderHTML = `<!doctype html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'self' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:; font-src data:">
<script src="/mermaid.js"></script></head><body style="margin:0;background:#fff"></body></html>`
)

// renderJS renders the source (a JSON string) with mermaid's strict
// security level (labels sanitized, no click handlers, directives cannot
// change it) and returns the SVG text; for PNG it shows the SVG as an
// image (an SVG image runs no script) and returns its size.
const renderJS = `(async (src, png) => {
	mermaid.initialize({startOnLoad: false, securityLevel: 'strict', htmlLabels: false, flowchart: {htmlLabels: false}});
	let svg;
	try {
		svg = (await mermaid.render('codumentor-diagram', src)).svg;
	} catch (e) {
		return {error: String(e && e.message || e).slice(0, 500)};
	}
	if (!png) return {svg};
	const doc = new DOMParser().parseFromString(svg, 'image/svg+xml');
	const vb = (doc.documentElement.getAttribute('viewBox') || '').split(/[\s,]+/).map(Number);
	const w = Math.ceil(vb[2] || 800), h = Math.ceil(vb[3] || 600);
	const img = new Image(w, h);
	img.src = 'data:image/svg+xml;base64,' + btoa(unescape(encodeURIComponent(svg)));
	await img.decode();
	document.body.replaceChildren(img);
	return {width: w, height: h};
})(%s, %t)`

type rendered struct {
	SVG    string  `json:"svg"`
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
	if _, err := b.mermaidScript(); err != nil {
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
	r, err := chromedp.Run(tctx, chromedp.Evaluate[rendered](fmt.Sprintf(renderJS, src, format == PNG), chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, fmt.Errorf("browser: render: %w", err)
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
	shot, err := chromedp.Call(tctx, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format:                page.CaptureScreenshotFormatPng,
		Clip:                  &page.Viewport{Width: r.Width, Height: r.Height, Scale: 1},
		CaptureBeyondViewport: new(true),
	})
	if err != nil {
		return nil, fmt.Errorf("browser: screenshot: %w", err)
	}
	return shot.Data, nil
}

// mermaidScript reads mermaid once; the file is the operator's.
func (b *Browser) mermaidScript() ([]byte, error) {
	b.mermaidOnce.Do(func() {
		b.mermaid, b.mermaidErr = os.ReadFile(b.o.Mermaid)
		if b.mermaidErr != nil {
			b.mermaidErr = fmt.Errorf("%w (%v)", ErrNoMermaid, b.mermaidErr)
		}
	})
	return b.mermaid, b.mermaidErr
}
