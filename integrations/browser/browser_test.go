package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hashicorp/go-hclog"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// chrome is Debian's chromium (scripts/install-prereqs installs it).
func chrome(t testing.TB) Binary {
	t.Helper()
	bin, err := FindChrome("")
	if err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
	return bin
}

func newBrowser(t testing.TB, o Options) (*Browser, *sandboxtest.Buffer) {
	t.Helper()
	if o.Binary.Path == "" {
		o.Binary = chrome(t)
	}
	if o.Cgroup == "" && o.CgroupParent == "" {
		o.CgroupParent = sandboxtest.CgroupParent(t)
	}
	logs := &sandboxtest.Buffer{}
	o.Log = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	b := New(o)
	t.Cleanup(b.Close)
	return b, logs
}

// counter is a listener standing in for the server: it counts the
// requests that reach it.
type counter struct {
	srv  *httptest.Server
	hits atomic.Int64
}

func newCounter(t testing.TB) *counter {
	c := &counter{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.hits.Add(1)
		w.Header().Set("Access-Control-Allow-Origin", "*")
		fmt.Fprint(w, "secret from the server")
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *counter) port() uint16 {
	return netip.MustParseAddrPort(c.srv.Listener.Addr().String()).Port()
}

// site serves the test pages on 127.0.0.1; target is the stand-in
// server the script page calls.
func site(t testing.TB, target string) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><title>Local page</title></head><body>
<nav>menu</nav><main><h1>Hello from the test page</h1><p>The quick brown fox.</p>
<a href="/next">next page</a></main></body></html>`)
	})
	// /slow holds the load event back, so that the script's fetch has
	// been answered when the page is read.
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(500 * time.Millisecond) })
	mux.HandleFunc("/flood", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><body>flood<script>for (let i = 0; i < 300; i++) { const m = new Image(); m.src = '/px?' + i; document.body.append(m); }</script></body></html>`)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/script", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html><head><title>Script page</title></head><body><p id="out">waiting</p>
<script>
fetch(%q).then(r => r.text()).then(t => { document.getElementById('out').textContent = 'LEAKED ' + t; },
	e => { document.getElementById('out').textContent = 'fetch blocked'; });
</script><img src="/slow"></body></html>`, target)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestFetchLocalPage(t *testing.T) {
	b, _ := newBrowser(t, Options{Policy: Policy{AllowPrivate: true}})
	srv := site(t, "")
	pages, err := b.FetchURLs(context.Background(), []string{srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	p := pages[0]
	if p.Error != "" {
		t.Fatalf("page error: %s (refused %v)", p.Error, p.Refused)
	}
	if p.Title != "Local page" || !strings.Contains(p.Text, "Hello from the test page") || !strings.Contains(p.Text, "quick brown fox") {
		t.Errorf("page = %+v, want its title and main text", p)
	}
	if strings.Contains(p.Text, "menu") {
		t.Errorf("text %q has the navigation outside <main>", p.Text)
	}
	if len(p.Links) != 1 || p.Links[0].URL != srv.URL+"/next" || p.Links[0].Text != "next page" {
		t.Errorf("links = %+v, want the absolute /next link", p.Links)
	}
}

// TestFetchRefusals: without allow_private a loopback page is refused;
// with it, a redirect to the metadata address and a script's fetch of the
// server's own port are still refused, and nothing reaches them.
func TestFetchRefusals(t *testing.T) {
	server := newCounter(t)
	srv := site(t, server.srv.URL+"/api/v1/me")
	var pageHits atomic.Int64
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pageHits.Add(1)
		fmt.Fprint(w, "<title>should not load</title>")
	}))
	t.Cleanup(counted.Close)

	closed, _ := newBrowser(t, Options{})
	open, _ := newBrowser(t, Options{Policy: Policy{AllowPrivate: true, ServerPorts: func() []uint16 { return []uint16{server.port()} }}})

	tests := []struct {
		name      string
		b         *Browser
		url       string
		wantError string // in Page.Error; "" means the page loads
		wantRef   string // in Page.Refused
		wantText  string
	}{
		{"loopback without allow_private", closed, counted.URL + "/", "loopback or private address", "loopback or private", ""},
		{"redirect to metadata", open, srv.URL + "/redirect", "169.254.169.254 is a link-local or cloud metadata address", "169.254.169.254", ""},
		{"script fetches the server's port", open, srv.URL + "/script", "", "is the server's own port", "fetch blocked"},
		{"a flood of requests", open, srv.URL + "/flood", "", "more than 256 requests", "flood"},
		{"metadata literal", open, "http://169.254.169.254/latest/meta-data/", "link-local or cloud metadata", "169.254.169.254", ""},
		{"not http", open, "file:///etc/passwd", "not an http or https URL", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pages, err := tc.b.FetchURLs(context.Background(), []string{tc.url})
			if err != nil {
				t.Fatal(err)
			}
			p := pages[0]
			if tc.wantError == "" && p.Error != "" || !strings.Contains(p.Error, tc.wantError) {
				t.Errorf("error = %q, want %q", p.Error, tc.wantError)
			}
			if tc.wantRef != "" && !strings.Contains(strings.Join(p.Refused, "\n"), tc.wantRef) {
				t.Errorf("refused = %q, want one with %q (page %+v)", p.Refused, tc.wantRef, p)
			}
			if !strings.Contains(p.Text, tc.wantText) || strings.Contains(p.Text, "LEAKED") {
				t.Errorf("text = %q, want %q", p.Text, tc.wantText)
			}
		})
	}
	if n := pageHits.Load(); n != 0 {
		t.Errorf("the loopback page was requested %d times without allow_private", n)
	}
	if n := server.hits.Load(); n != 0 {
		t.Errorf("the server's port got %d requests from a page", n)
	}
}

func TestPolicyCheck(t *testing.T) {
	p := Policy{}
	open := Policy{AllowPrivate: true, ServerPorts: func() []uint16 { return []uint16{8080} }}
	serverOnly := Policy{ServerPorts: open.ServerPorts}
	tests := []struct {
		policy Policy
		addr   string
		want   string // "" allowed
	}{
		{p, "93.184.215.14:443", ""},
		{p, "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:443", ""},
		{p, "127.0.0.1:80", "loopback or private"},
		{p, "[::1]:80", "loopback or private"},
		{p, "10.1.2.3:80", "loopback or private"},
		{p, "192.168.1.1:80", "loopback or private"},
		{p, "[fd12::1]:80", "loopback or private"},
		{p, "[::ffff:127.0.0.1]:80", "loopback or private"},
		{p, "[64:ff9b::a9fe:a9fe]:80", "metadata"},
		{p, "0.0.0.0:80", "not a unicast"},
		{p, "[::]:80", "not a unicast"},
		{p, "224.0.0.1:80", "not a unicast"},
		{open, "127.0.0.1:3000", ""},
		{open, "10.0.0.5:3000", ""},
		{open, "127.0.0.1:8080", "server's own port"},
		{open, "169.254.169.254:80", "metadata"},
		{open, "[::ffff:169.254.169.254]:80", "metadata"},
		{open, "[fe80::1]:80", "metadata"},
		{open, "100.100.100.200:80", "metadata"},
		{open, "168.63.129.16:80", "metadata"},
		{open, "[fd00:ec2::254]:80", "metadata"},
		{open, "0.0.0.0:3000", "not a unicast"},
		// The server's port on any address: a public address may be
		// routed back to this host.
		{serverOnly, "93.184.215.14:8080", "server's own port"},
		{serverOnly, "[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:8080", "server's own port"},
		{serverOnly, "93.184.215.14:443", ""},
		// IPv6 addresses judged by the IPv4 address they carry.
		{p, "[::127.0.0.1]:80", "loopback or private"},
		{p, "[::10.0.0.1]:80", "loopback or private"},
		{p, "[::a9fe:a9fe]:80", "metadata"},
		{open, "[::a9fe:a9fe]:80", "metadata"},
		{open, "[::127.0.0.1]:3000", ""},
		{open, "[::127.0.0.1]:8080", "server's own port"},
		{p, "[::ffff:0:7f00:1]:80", "loopback or private"},
		{p, "[2002:7f00:1::1]:80", "loopback or private"},
		{p, "[2001:0:5db8:d7ce::f5ff:fffe]:80", "loopback or private"}, // Teredo client 10.0.0.1
		{p, "[64:ff9b:1:ffff::7f00:1]:80", "cannot be told"},
		{p, "[::5db8:d70e]:443", ""},
	}
	for _, tc := range tests {
		err := tc.policy.Check(netip.MustParseAddrPort(tc.addr))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s (allow_private %v): %v, want allowed", tc.addr, tc.policy.AllowPrivate, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s (allow_private %v): %v, want refused: %s", tc.addr, tc.policy.AllowPrivate, err, tc.want)
		}
	}
}

// TestPolicyAfterResolution: a name is checked by the address it resolves
// to, at connect time.
func TestPolicyAfterResolution(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	c := newClient(Policy{}, nil)
	_, err = c.Get(fmt.Sprintf("http://localhost:%d/", port))
	if err == nil || !strings.Contains(refusal(err), "loopback") {
		t.Fatalf("GET localhost = %v, want refused as loopback", err)
	}
}

// verdictLines are the log lines that state the sandbox verdict.
func verdictLines(logs string) int { return strings.Count(logs, "Chrome sandbox") }

// TestSandboxVerdict: as the unprivileged user Chrome starts in its own
// sandbox; the verdict is logged once, also across an idle stop and a
// relaunch.
func TestSandboxVerdict(t *testing.T) {
	sandboxtest.RequireUnprivileged(t)
	b, logs := newBrowser(t, Options{IdleTimeout: 50 * time.Millisecond, Policy: Policy{AllowPrivate: true}})
	srv := site(t, "")
	for i := range 2 {
		if pages, err := b.FetchURLs(context.Background(), []string{srv.URL}); err != nil || pages[0].Error != "" {
			t.Fatalf("fetch %d: %v %+v", i, err, pages)
		}
		waitStopped(t, b)
	}
	if v := b.Verdict(); !v.Decided || !v.Sandboxed {
		t.Errorf("verdict = %v, want the sandbox on", v)
	}
	if n := verdictLines(logs.String()); n != 1 || !strings.Contains(logs.String(), "Chrome sandbox on") {
		t.Errorf("log has %d verdict lines, want one 'Chrome sandbox on':\n%s", n, logs)
	}
}

func waitStopped(t *testing.T, b *Browser) {
	t.Helper()
	sandboxtest.Eventually(t, 10*time.Second, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.ctx != nil {
			return errors.New("the browser did not stop when idle")
		}
		return nil
	})
}

// failingSandbox is a Chrome whose sandbox cannot start, for real: as
// root, Debian's chromium itself (Chrome refuses its sandbox as root); as
// an unprivileged user, chromium inside a bwrap that forbids new user
// namespaces (--disable-userns), which its namespace sandbox needs, the
// case of a host that restricts unprivileged user namespaces. The second
// is how CI (which runs the suite unprivileged) covers the fallback.
func failingSandbox(t *testing.T) (bin Binary, cause string) {
	bin = chrome(t)
	if os.Geteuid() == 0 {
		return bin, "running as root"
	}
	bwrap := "/usr/local/bin/bwrap"
	if _, err := os.Stat(bwrap); err != nil {
		sandboxtest.SkipOrFail(t, "bwrap 0.12 (scripts/install-prereqs): %v", err)
	}
	wrapper := filepath.Join(t.TempDir(), "chromium-no-userns")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --dev-bind / / --unshare-user --disable-userns --die-with-parent -- %s \"$@\"\n", bwrap, bin.Path)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return Binary{Path: wrapper, Source: "test"}, "user namespaces restricted"
}

// TestSandboxFallback: a launch that fails with the sandbox logs one
// warning naming the cause and runs with --no-sandbox; pages still load.
func TestSandboxFallback(t *testing.T) {
	bin, cause := failingSandbox(t)
	var launches []Launch // under b.mu
	record := func(_ context.Context, l Launch) error { launches = append(launches, l); return nil }
	b, logs := newBrowser(t, Options{Binary: bin, IdleTimeout: 50 * time.Millisecond, Policy: Policy{AllowPrivate: true}, Launching: record})
	srv := site(t, "")
	for i := range 2 {
		pages, err := b.FetchURLs(context.Background(), []string{srv.URL})
		if err != nil || pages[0].Title != "Local page" {
			t.Fatalf("fetch %d: %v %+v\n%s", i, err, pages, logs)
		}
		waitStopped(t, b)
	}
	// Every start was announced to Launching with its sandbox: the
	// first with it, then the fallback and the second launch without,
	// naming the cause.
	if len(launches) != 3 || !launches[0].Sandboxed || launches[1].Sandboxed || launches[2].Sandboxed ||
		!strings.Contains(launches[1].Detail, cause) || !strings.Contains(launches[2].Detail, cause) || launches[0].Binary != bin.Path {
		t.Errorf("launches = %+v, want sandboxed, then twice unsandboxed because %s", launches, cause)
	}
	v := b.Verdict()
	if !v.Decided || v.Sandboxed || !strings.Contains(v.Detail, cause) {
		t.Errorf("verdict = %+v, want no sandbox because %s", v, cause)
	}
	out := logs.String()
	if n := verdictLines(out); n != 1 || !strings.Contains(out, "[WARN]") || !strings.Contains(out, "Chrome sandbox unavailable") || !strings.Contains(out, cause) {
		t.Errorf("log has %d verdict lines, want one warning 'Chrome sandbox unavailable' naming %q:\n%s", n, cause, out)
	}

	t.Run("unrecorded", func(t *testing.T) {
		// A start that cannot be recorded does not happen.
		b, _ := newBrowser(t, Options{Binary: bin, Launching: func(context.Context, Launch) error { return errors.New("log full") }})
		_, err := b.FetchURLs(context.Background(), []string{srv.URL})
		if !errorsIs(err, errNotRecorded) || b.Verdict().Decided {
			t.Errorf("err = %v, verdict %v; want errNotRecorded and no start", err, b.Verdict())
		}
	})

	t.Run("required", func(t *testing.T) {
		b, logs := newBrowser(t, Options{Binary: bin, Sandbox: SandboxRequire})
		_, err := b.FetchURLs(context.Background(), []string{srv.URL})
		if !errorsIs(err, ErrSandbox) || !strings.Contains(err.Error(), cause) {
			t.Errorf("err = %v, want ErrSandbox naming %q", err, cause)
		}
		if b.Verdict().Decided || strings.Contains(logs.String(), "no-sandbox") {
			t.Errorf("a required sandbox fell back: %v\n%s", b.Verdict(), logs)
		}
	})
}

func TestRenderDiagram(t *testing.T) {
	b, _ := newBrowser(t, Options{})
	const src = "graph TD\n  A[Start] --> B{Ready?}\n  B -->|yes| C[Ship it]\n"
	svg, err := b.RenderDiagram(context.Background(), src, SVG)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("Ship")) {
		t.Errorf("svg = %.300s, want an <svg> with the labels", svg)
	}
	// Drawn on a canvas in the page, and as a screenshot (the way for a
	// canvas the image taints): the same picture, white with dark lines.
	var sizes []image.Point
	for _, shot := range []bool{false, true} {
		b.screenshotPNG = shot
		pngData, err := b.RenderDiagram(context.Background(), src, PNG)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(pngData))
		if err != nil {
			t.Fatalf("png (screenshot %v): %v", shot, err)
		}
		r := img.Bounds()
		if r.Dx() < 50 || r.Dy() < 50 {
			t.Errorf("png (screenshot %v) is %v, want the diagram's size", shot, r)
		}
		sizes = append(sizes, r.Size())
		dark := 0
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				if c := color.GrayModel.Convert(img.At(x, y)).(color.Gray); c.Y < 100 {
					dark++
				}
			}
		}
		if c := color.GrayModel.Convert(img.At(r.Min.X, r.Min.Y)).(color.Gray); c.Y != 255 || dark < 100 {
			t.Errorf("png (screenshot %v): corner %v, %d dark pixels; want white with the diagram's lines", shot, c, dark)
		}
	}
	b.screenshotPNG = false
	if sizes[0] != sizes[1] {
		t.Errorf("canvas %v, screenshot %v: want the same size", sizes[0], sizes[1])
	}
	// The next render takes the spare page, warmed up with a diagram of
	// its own: only the request's diagram is in the answer.
	waitSpare(t, b, renderPage)
	svg, err = b.RenderDiagram(context.Background(), "graph LR\n  X[Other] --> Y\n", SVG)
	if err != nil || !bytes.Contains(svg, []byte("Other")) || bytes.Contains(svg, []byte("warm")) {
		t.Errorf("render in the spare page: %v, %.300s", err, svg)
	}
	if _, err := b.RenderDiagram(context.Background(), "graph TD\n  A -->", SVG); !errorsIs(err, ErrDiagram) {
		t.Errorf("syntax error: %v, want ErrDiagram", err)
	}
}

// TestNoBrowserUI: the headless browser runs the pages it is given and
// no WebUI of its own (new headless preloads the omnibox popup's, in a
// renderer for each window: each request's context).
func TestNoBrowserUI(t *testing.T) {
	b, _ := newBrowser(t, Options{})
	_, release, err := b.take(context.Background(), renderPage)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	b.mu.Lock()
	bctx := b.ctx
	b.mu.Unlock()
	ts, err := chromedp.Targets(bctx)
	if err != nil {
		t.Fatal(err)
	}
	pages := 0
	for _, ti := range ts {
		if ti.Type == "browser_ui" || strings.HasPrefix(ti.URL, "chrome://") {
			t.Errorf("target %s %s", ti.Type, ti.URL)
		}
		if ti.Type == "page" {
			pages++
		}
	}
	if pages < 2 {
		t.Errorf("%d pages, want the first tab and the render page", pages)
	}
}

// TestRenderDiagramScript: a diagram whose labels hold a script and an
// event handler renders, and neither runs: the witness they would call
// gets no request, the render page made none, the SVG carries neither.
func TestRenderDiagramScript(t *testing.T) {
	witness := newCounter(t)
	// mermaid's ESM build (beside the npm install's mermaid.min.js) and
	// the bundle alone.
	bundle := filepath.Join(t.TempDir(), "mermaid.min.js")
	if err := os.WriteFile(bundle, readFile(t, DefaultMermaid), 0o644); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf("graph TD\n  A[\"<script>fetch('%[1]s/script')</script>\"] --> B[\"<img src=x onerror=fetch('%[1]s/onerror')>\"]\n  click A call alert(1)\n", witness.srv.URL)
	for _, mermaid := range []string{DefaultMermaid, bundle} {
		b, _ := newBrowser(t, Options{Mermaid: mermaid})
		for _, f := range []Format{SVG, PNG} {
			out, err := b.RenderDiagram(context.Background(), src, f)
			if err != nil {
				t.Fatalf("%s, %s: %v", mermaid, f, err)
			}
			if f == SVG {
				low := strings.ToLower(string(out))
				if strings.Contains(low, "<script") || strings.Contains(low, "onerror") {
					t.Errorf("%s: svg carries the script: %s", mermaid, out)
				}
			}
		}
	}
	if n := witness.hits.Load(); n != 0 {
		t.Errorf("the diagram's script ran: %d requests", n)
	}
}

// TestLoadMermaid: beside an npm install's mermaid.min.js the render
// page loads the ESM build (entry and chunks); a bundle alone is loaded
// whole; no script at all is ErrNoMermaid.
func TestLoadMermaid(t *testing.T) {
	files, err := loadMermaid(DefaultMermaid)
	if err != nil {
		sandboxtest.SkipOrFail(t, "mermaid: %v", err)
	}
	page := string(files[renderURL].body)
	if !strings.Contains(page, `type="module" src="/boot.mjs"`) || files[renderOrigin+esmEntry].body == nil || len(files) < 20 || files[renderOrigin+"mermaid.js"].body != nil {
		t.Errorf("npm install: %d files, page %q; want the ESM build", len(files), page)
	}
	for u, f := range files {
		if u != renderURL && !strings.HasPrefix(f.ctype, "text/javascript") {
			t.Errorf("%s: %s", u, f.ctype)
		}
	}
	bundle := filepath.Join(t.TempDir(), "mermaid.min.js")
	os.WriteFile(bundle, []byte("var mermaid = {};"), 0o644)
	files, err = loadMermaid(bundle)
	if err != nil || len(files) != 2 || string(files[renderOrigin+"mermaid.js"].body) != "var mermaid = {};" || !strings.Contains(string(files[renderURL].body), `<script src="/mermaid.js">`) {
		t.Errorf("bundle alone: %v, %v", files, err)
	}
	b := New(Options{Binary: Binary{Path: "/nonexistent/chromium"}, Mermaid: filepath.Join(t.TempDir(), "mermaid.min.js")})
	if _, err := b.RenderDiagram(context.Background(), "graph TD\n  a --> b", SVG); !errors.Is(err, ErrNoMermaid) {
		t.Errorf("no mermaid: %v, want ErrNoMermaid", err)
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
	return data
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// TestToolErrors: the model sees its own mistakes, and of the server's
// only that the browser is unavailable, never a host path.
func TestToolErrors(t *testing.T) {
	logs := &sandboxtest.Buffer{}
	b := New(Options{Binary: Binary{Path: "/nonexistent/chromium"}, Log: hclog.New(&hclog.LoggerOptions{Output: logs})})
	defer b.Close()
	call := func(args string) *agentcore.Call {
		return &agentcore.Call{Name: "fetch_urls", Arguments: json.RawMessage(args)}
	}
	_, err := FetchTool{B: b}.Run(context.Background(), call(`{"urls":["http://example.com/"]}`))
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "/nonexistent") || !strings.Contains(logs.String(), "/nonexistent/chromium") {
		t.Errorf("fetch with no browser: %v, want ErrUnavailable (the path only in the log:\n%s)", err, logs)
	}
	if _, err := (FetchTool{B: b}).Run(context.Background(), call(`{"urls":[]}`)); err == nil || !strings.Contains(err.Error(), "no URLs given") {
		t.Errorf("fetch of no URLs: %v", err)
	}
	if _, err := (DiagramTool{B: b}).Run(context.Background(), call(`{"source":"graph TD","format":"gif"}`)); !errors.Is(err, ErrDiagram) {
		t.Errorf("render as gif: %v, want ErrDiagram", err)
	}
}

// TestMaxTabs: requests beyond MaxTabs wait for a free page; one whose
// context ends while it waits gives up without a page.
func TestMaxTabs(t *testing.T) {
	b, _ := newBrowser(t, Options{MaxTabs: 1, Policy: Policy{AllowPrivate: true}})
	_, release, err := b.take(context.Background(), fetchPage)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, _, err := b.take(ctx, fetchPage); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second page with one slot taken: %v, want to wait until the deadline", err)
	}
	release()
	_, release2, err := b.take(context.Background(), fetchPage)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	release2()
}

// TestRenderDiagramPinned: no directive or front matter turns back on
// what the render pins: HTML labels (a foreignObject holding the
// author's <img>), a looser security level, DOMPurify allowances, CSS
// that loads. Each renders, as SVG and as PNG, with none of it, and
// nothing reaches the witness.
func TestRenderDiagramPinned(t *testing.T) {
	witness := newCounter(t)
	w := witness.srv.URL
	img := fmt.Sprintf(`A["<img src='%s/img'> label"] --> B["<b>bold</b>"]`, w)
	cases := map[string]string{
		"init htmlLabels":            `%%{init: {"htmlLabels": true}}%%` + "\ngraph TD\n  " + img,
		"init flowchart htmlLabels":  `%%{init: {"flowchart": {"htmlLabels": true}}}%%` + "\ngraph TD\n  " + img,
		"initialize both":            `%%{initialize: {"htmlLabels": true, "flowchart": {"htmlLabels": true}, "securityLevel": "loose"}}%%` + "\nflowchart LR\n  " + img,
		"front matter":               "---\nconfig:\n  htmlLabels: true\n  securityLevel: loose\n  flowchart:\n    htmlLabels: true\n---\nflowchart TD\n  " + img,
		"front matter secure":        "---\nconfig:\n  secure: []\n  htmlLabels: true\n---\nflowchart TD\n  " + img,
		"dompurify":                  `%%{init: {"htmlLabels": true, "dompurifyConfig": {"ADD_TAGS": ["foreignObject", "img"], "ADD_ATTR": ["src"]}}}%%` + "\ngraph TD\n  " + img,
		"themeCSS":                   fmt.Sprintf(`%%%%{init: {"themeCSS": "@import url(%[1]s/css); .node rect { fill: url(%[1]s/fill); }"}}%%%%`, w) + "\ngraph TD\n  a --> b",
		"fontFamily":                 fmt.Sprintf(`%%%%{init: {"fontFamily": "x; background-image: url(%s/font)"}}%%%%`, w) + "\ngraph TD\n  a --> b",
		"class htmlLabels":           `%%{init: {"class": {"htmlLabels": true}, "htmlLabels": true}}%%` + "\nclassDiagram\n  class Animal[\"<img src='" + w + "/class'>\"]\n  Animal <|-- Duck",
		"state htmlLabels":           "---\nconfig:\n  htmlLabels: true\n  state:\n    htmlLabels: true\n---\nstateDiagram-v2\n  [*] --> S1: <img src='" + w + "/state'>",
		"front matter and directive": "---\nconfig:\n  htmlLabels: true\n---\n" + `%%{init: {"flowchart": {"htmlLabels": true}}}%%` + "\ngraph TD\n  " + img,
	}
	b, _ := newBrowser(t, Options{})
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			svg, err := b.RenderDiagram(context.Background(), src, SVG)
			if err != nil {
				t.Fatalf("svg: %v", err)
			}
			low := strings.ToLower(string(svg))
			for _, bad := range []string{"<foreignobject", "<img", "@import", "url(" + strings.ToLower(w)} {
				if strings.Contains(low, bad) {
					t.Errorf("svg has %q: %s", bad, svg)
				}
			}
			if _, err := b.RenderDiagram(context.Background(), src, PNG); err != nil {
				t.Errorf("png: %v", err)
			}
		})
	}
	if n := witness.hits.Load(); n != 0 {
		t.Errorf("the witness got %d requests", n)
	}
}

// TestRenderOutside: what the render's last check refuses in an SVG,
// should a setting of mermaid's not hold.
func TestRenderOutside(t *testing.T) {
	b, _ := newBrowser(t, Options{})
	pg, release, err := b.take(context.Background(), renderPage)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	const ns = `xmlns="http://www.w3.org/2000/svg"`
	for svg, want := range map[string]string{
		`<svg ` + ns + `><g><rect fill="url(#grad)"/><text>label</text></g><a href="https://example.com/"><text>link</text></a></svg>`: "",
		`<svg ` + ns + `><foreignObject><div xmlns="http://www.w3.org/1999/xhtml"><img src="http://x/"/></div></foreignObject></svg>`:  "foreignObject",
		`<svg ` + ns + `><image href="http://x/i.png"/></svg>`:                                                                         "a reference to http://x/i.png",
		`<svg ` + ns + `><style>@import url(http://x/c.css);</style></svg>`:                                                            "a stylesheet",
		`<svg ` + ns + `><rect style="fill: url('http://x/f')"/></svg>`:                                                                "a style",
		`<svg ` + ns + `><image href="data:image/png;base64,AAAA"/></svg>`:                                                             "",
	} {
		src, _ := json.Marshal(svg)
		got, err := chromedp.Run(pg.ctx, chromedp.Evaluate[string](outsideJS+"("+string(src)+")"))
		if err != nil || (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: %q, %v; want %q", svg, got, err, want)
		}
	}
}
