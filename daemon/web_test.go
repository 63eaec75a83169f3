package daemon_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/integrations/browser"
	"github.com/codumentor/codumentor/integrations/office/officetest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// The web UI, driven in headless Chromium against the real server and
// the scripted model. One browser and one tab serve the whole test; the
// browser reaches the server through dropProxy, which can cut every
// connection (the event stream's too) mid-turn.

// axeSource is axe-core's script (scripts/install-prereqs installs it).
func axeSource(t testing.TB) string {
	t.Helper()
	p := os.Getenv("CODUMENTOR_AXE_JS")
	if p == "" {
		p = "/var/cache/codumentor-prereqs/npm/node_modules/axe-core/axe.min.js"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		sandboxtest.SkipOrFail(t, "axe-core: %v (scripts/install-prereqs installs it)", err)
	}
	return string(b)
}

// dropProxy forwards TCP connections to a server; drop closes every
// open one.
type dropProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newDropProxy(t testing.TB, target string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, conns: map[net.Conn]bool{}}
	addr := strings.TrimPrefix(target, "http://")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				s, err := net.Dial("tcp", addr)
				if err != nil {
					c.Close()
					return
				}
				p.track(c, s, true)
				go func() { io.Copy(s, c); s.Close() }()
				io.Copy(c, s)
				c.Close()
				p.track(c, s, false)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.drop() })
	return p
}

func (p *dropProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *dropProxy) track(a, b net.Conn, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if open {
		p.conns[a], p.conns[b] = true, true
	} else {
		delete(p.conns, a)
		delete(p.conns, b)
	}
}

func (p *dropProxy) drop() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for c := range p.conns {
		c.Close()
	}
	return n
}

// webUI is the browser tab and what it saw.
type webUI struct {
	t    testing.TB
	ctx  context.Context
	base string
	axe  string

	mu       sync.Mutex
	dialogs  []string
	outside  []string
	problems []string // console errors and exceptions
	// loading are our tab's requests in flight, its event stream aside,
	// with the document loader that made them; page is the loader of the
	// newest document. A request of a document navigated away from may
	// end with no event: it is forgotten.
	loading map[network.RequestID]pending
	page    cdp.LoaderID
	// failed are the newest loads that failed (not cancelled), for the
	// message of a wait that timed out.
	failed []string
}

// pending is a request in flight.
type pending struct {
	loader cdp.LoaderID
	url    string
}

// newWebUI starts one headless Chromium with one tab on base; extra
// options replace the defaults' of the same flag.
func newWebUI(t testing.TB, base string, extra ...chromedp.ExecAllocatorOption) *webUI {
	t.Helper()
	bin, err := browser.FindChrome("")
	if err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
	w := &webUI{t: t, base: base, axe: axeSource(t), loading: map[network.RequestID]pending{}}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin.Path),
		// The test's own pages only; Chrome refuses its sandbox as root
		// and in many CI containers.
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		// No name resolves: a request for an outside host fails here
		// (and is seen in the network events).
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
	)
	opts = append(opts, extra...)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	w.ctx = ctx
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", bin.Path, err)
	}
	w.watch(ctx, true)
	return w
}

// watch records a tab's dialogs (and dismisses them), its requests for
// hosts other than 127.0.0.1 and, for our own tab, its console errors.
func (w *webUI) watch(ctx context.Context, console bool) {
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		w.t.Fatal(err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	requests := chromedp.Events(ctx, network.RequestWillBeSent)
	responses := chromedp.Events(ctx, network.ResponseReceived)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			w.note(&w.dialogs, ev.Type.String()+": "+ev.Message)
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	go func() {
		for ev, err := range requests {
			if err != nil {
				return
			}
			u := ev.Request.URL
			if !strings.HasPrefix(u, "http://127.0.0.1:") && !strings.HasPrefix(u, "data:") {
				w.note(&w.outside, u)
			}
		}
	}()
	if console {
		// In the order the browser sends them: a request's end never
		// comes before its start.
		err := chromedp.Listen(ctx, func(ev any) {
			w.mu.Lock()
			defer w.mu.Unlock()
			switch ev := ev.(type) {
			case *network.EventRequestWillBeSent:
				if ev.Type == network.ResourceTypeDocument && ev.LoaderID != w.page {
					w.page = ev.LoaderID
					maps.DeleteFunc(w.loading, func(_ network.RequestID, r pending) bool { return r.loader != w.page })
				}
				if ev.Type != network.ResourceTypeEventSource {
					w.loading[ev.RequestID] = pending{ev.LoaderID, ev.Request.URL}
				}
			case *network.EventLoadingFinished:
				delete(w.loading, ev.RequestID)
			case *network.EventLoadingFailed:
				if r, ok := w.loading[ev.RequestID]; ok && !ev.Canceled {
					w.failed = append(w.failed[max(0, len(w.failed)-9):], r.url+": "+ev.ErrorText)
				}
				delete(w.loading, ev.RequestID)
			}
		})
		if err != nil {
			w.t.Fatal(err)
		}
		// The console's "Failed to load resource" errors for a 4xx are
		// let through below (the page's refused API calls, the pages a
		// test opens to see a 404); an asset or the favicon answering
		// 404 is a broken page all the same.
		go func() {
			for ev, err := range responses {
				if err != nil {
					return
				}
				u := ev.Response.URL
				if ev.Response.Status == http.StatusNotFound && (strings.Contains(u, "/static/") || strings.HasSuffix(u, "/favicon.ico")) {
					w.note(&w.problems, fmt.Sprintf("404 for %s", u))
				}
			}
		}()
		msgs := chromedp.Console(ctx)
		go func() {
			for m, err := range msgs {
				if err != nil {
					return
				}
				// A refused API call (a route that is not enabled, a
				// 409) is an answer the page handles, not an error.
				if m.Type == chromedp.ConsoleException || (m.Type == chromedp.ConsoleError && !strings.HasPrefix(m.Text, "Failed to load resource: the server responded with a status of 4")) {
					w.note(&w.problems, fmt.Sprintf("%s %s: %s", m.Type, m.URL, m.Text))
				}
			}
		}()
	}
}

func (w *webUI) note(to *[]string, s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	*to = append(*to, s)
}

func (w *webUI) seen(from *[]string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(*from)
}

// as makes t the test that w's failures fail, until the returned func
// restores the previous one.
func (w *webUI) as(t testing.TB) func() {
	prev := w.t
	w.t = t
	return func() { w.t = prev }
}

func (w *webUI) do(actions ...chromedp.Action[chromedp.Void]) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		w.t.Fatalf("browser: %v (at %s)", err, w.location())
	}
}

func (w *webUI) location() string {
	ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
	defer cancel()
	u, _ := chromedp.Run(ctx, chromedp.Location())
	return u
}

func eval[T any](w *webUI, expr string) T {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		w.t.Fatalf("evaluating %s: %v (at %s)", expr, err, w.location())
	}
	return v
}

// until waits for a JavaScript condition (evaluated by DevTools, which
// the page's CSP does not restrict).
func (w *webUI) until(expr string, timeout time.Duration) {
	w.t.Helper()
	sandboxtest.Eventually(w.t, timeout, func() error {
		ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err != nil || !ok {
			body := eval[string](w, "document.body ? document.body.innerText.slice(0, 3000) : ''")
			status := eval[string](w, "document.getElementById('status')?.textContent ?? ''")
			w.mu.Lock()
			failed, problems := slices.Clone(w.failed), slices.Clone(w.problems)
			w.mu.Unlock()
			return fmt.Errorf("waiting for %s at %s: %v; its status says %q; failed loads %q; console errors %q; the page says:\n%s", expr, w.location(), err, status, failed, problems, body)
		}
		return nil
	})
}

// quiet waits until the tab loads nothing (its event stream aside) and
// has run a frame and a task after the last load ended, so that what a
// load queued (an image's error handler) has run.
func (w *webUI) quiet() {
	w.t.Helper()
	inflight := func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		var urls []string
		for _, r := range w.loading {
			if r.loader == w.page {
				urls = append(urls, r.url)
			}
		}
		if len(urls) > 0 {
			return fmt.Errorf("%d requests in flight at %s: %q", len(urls), w.location(), urls)
		}
		return nil
	}
	sandboxtest.Eventually(w.t, 20*time.Second, func() error {
		if err := inflight(); err != nil {
			return err
		}
		eval[chromedp.Void](w, "new Promise(r => requestAnimationFrame(() => setTimeout(r)))")
		return inflight()
	})
}

func (w *webUI) open(path, ready string) {
	w.t.Helper()
	w.do(chromedp.Navigate(w.base + path))
	w.until("document.readyState === 'complete' && document.body.dataset.ready === '1' && ("+ready+")", 20*time.Second)
}

// click clicks the element by CSS selector from script: the tab may
// be small (phone size) and the element below the fold.
func (w *webUI) click(sel string) {
	w.t.Helper()
	w.until(fmt.Sprintf("document.querySelector(%q)", sel), 20*time.Second)
	eval[chromedp.Void](w, fmt.Sprintf("document.querySelector(%q).click()", sel))
}

func (w *webUI) fill(sel, value string) {
	w.t.Helper()
	w.until(fmt.Sprintf("document.querySelector(%q)", sel), 20*time.Second)
	eval[chromedp.Void](w, fmt.Sprintf("(e => { e.value = %q; e.dispatchEvent(new Event('input', {bubbles: true})) })(document.querySelector(%q))", value, sel))
}

type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any `json:"target"`
	} `json:"nodes"`
}

func (w *webUI) signIn(name, password string) {
	w.t.Helper()
	w.open("/login", "document.getElementById('username')")
	w.fill("#username", name)
	w.fill("#password", password)
	w.click("#signin")
	w.until("location.pathname === '/' && document.body.dataset.ready === '1' && document.querySelector('#conversations')", 20*time.Second)
}

// transcriptText is what the page shows of the conversation.
const transcriptText = "document.getElementById('transcript').innerText"

func TestWebUI(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("hello\n"), 0o644)
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "initial")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)

	const xss = `<script>window.__xss = 1</script>
<img src=x onerror="window.__xss = 2; alert(2)">

[click me](javascript:window.__xss=3)
[click me 2](JaVaScRiPt:alert(4))
[click me 3](java&#09;script:alert(5))

![pic](https://evil.example/p.png)

<iframe src="javascript:alert(6)"></iframe>`
	hostileName := `<img src=x onerror=alert(7)>.md`
	var long strings.Builder
	for i := range 150 {
		fmt.Fprintf(&long, "w%03d ", i)
	}
	longText := strings.TrimSpace(long.String())

	script := &llmtest.Script{
		Steps: []llmtest.Step{
			{Text: "Hello, **streaming** world. " + strings.Repeat("This reply arrives in small pieces, as a model streams it. ", 4) + "\n\n```go\nfunc main() {}\n```\n", ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: `{"command":"echo out-$((6*7))"}`}}},
			{Text: "Editing.", ToolCalls: []agentcore.ToolCall{{Name: "edit_file", Arguments: `{"path":"README.md","old_string":"hello","new_string":"hello world"}`}}},
			{Text: "Done."},
		},
		Branches: []llmtest.Branch{
			{Match: "hostile please", Steps: []llmtest.Step{
				{Text: xss, ToolCalls: []agentcore.ToolCall{{Name: "write_file", Arguments: fmt.Sprintf(`{"path":%q,"content":"<script>window.__xss = 8</script>\n"}`, hostileName)}}},
				{Text: "Written."},
			}},
			{Match: "long story", Steps: []llmtest.Step{{Text: longText}}},
			{Match: "investigate please", Steps: []llmtest.Step{
				{Text: "Looking.", ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: `{"command":"echo inv-$((6*7))"}`}}},
				{Text: "Seen."},
			}},
		},
	}
	// 20 ms between 4-byte pieces: 50 deltas a second, as a model
	// streams.
	llm, err := llmtest.StartServer(script, llmtest.Options{ChunkDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(llm.Close)
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n  allowed_endpoints: [\"http://127.0.0.1:9/v1\"]\nplugins:\n  - workspace_isolation\n  - office\ninvestigation:\n  enabled: true\n", llm.URL()))
	in.addUser("alice", pw, false)
	in.addUser("root", pw, true)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)
	var repo struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "demo", "url": "file://" + bare, "branch": "main"}, &repo)
	var sync struct{ Job struct{ ID string } }
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	waitJobDone(t, admin, sync.Job.ID)

	proxy := newDropProxy(t, p.URL)
	w := newWebUI(t, proxy.URL())

	// Signed out, every page leads to the sign-in form.
	w.open("/", "document.getElementById('username')")
	if loc := w.location(); !strings.HasPrefix(loc, w.base+"/login") {
		t.Fatalf("signed out, / shows %s", loc)
	}
	w.checkPage("login", "document.getElementById('signin')", "")
	// Keyboard only: the form's fields in order, Enter submits.
	w.open("/login", "document.activeElement && document.activeElement.id === 'username'")
	var order []string
	for range 3 {
		order = append(order, eval[string](w, "document.activeElement.id || document.activeElement.className"))
		w.do(chromedp.KeyEvent("\t"))
	}
	if strings.Join(order, " ") != "username password signin" {
		t.Errorf("focus order on the sign-in page: %q", order)
	}
	if eval[string](w, "getComputedStyle(document.activeElement, ':focus-visible').outlineStyle") == "none" {
		t.Error("the focused element has no visible outline")
	}
	w.do(chromedp.Focus(chromedp.ID("username")), chromedp.KeyEvent("alice\t"+pw+"\r"))
	w.until("location.pathname === '/' && document.body.dataset.ready === '1' && document.querySelector('#conversations')", 20*time.Second)
	if eval[bool](w, "!!document.getElementById('new-mode')") {
		t.Error("alice is offered host read-only investigations")
	}
	listed := "document.querySelector('#new-repo option[value=\"" + repo.ID + "\"]') && (document.querySelectorAll('#conversations li').length > 0 || !document.getElementById('empty').hidden)"
	w.until(listed, 20*time.Second)
	w.checkPage("conversations", listed, "")

	// A conversation on the repository: stream, approve, output.
	w.fill("#new-title", "Fix the README")
	eval[chromedp.Void](w, fmt.Sprintf("document.getElementById('new-repo').value = %q", repo.ID))
	w.click("#new-conv button[type=submit]")
	w.until("location.pathname.startsWith('/c/') && window.codumentor && codumentor.opens > 0", 20*time.Second)
	conv := strings.TrimPrefix(eval[string](w, "location.pathname"), "/c/")
	if n := firstLoadBytes(w, "/c/"+conv); n > maxFirstLoad {
		t.Errorf("the conversation page ships %d bytes of HTML, CSS and JavaScript on first load, over the budget of %d", n, maxFirstLoad)
	}
	w.fill("#message", "please fix the readme")
	w.click("#send")
	w.until(transcriptText+".includes('please fix the readme')", 20*time.Second)
	// The reply arrives in pieces: seen part-way before it is whole.
	w.until("document.querySelector('.msg.assistant .md') && document.querySelector('.msg.assistant .md').innerText.length > 0 && !document.querySelector('.msg.assistant .md').innerText.includes('func main')", 20*time.Second)
	w.until("document.querySelector('.approval .command')", 30*time.Second)
	if got := eval[string](w, "document.querySelector('.approval .command').textContent"); got != "echo out-$((6*7))" {
		t.Fatalf("the approval shows %q", got)
	}
	approval := eval[string](w, "document.querySelector('.approval').innerText")
	for _, want := range []string{"Working directory", "Expires", "Always allow shell"} {
		if !strings.Contains(approval, want) {
			t.Errorf("the approval card does not say %q:\n%s", want, approval)
		}
	}
	// Rendered as Markdown (bold, highlighted code) once whole.
	w.until("document.querySelector('.msg.assistant strong') && document.querySelector('.msg.assistant pre.ch-chroma .ch-kd')", 20*time.Second)
	w.checkPage("conversation", "document.querySelector('.approval .approve')", "")
	// The list shows the pending approval, and finds by title.
	w.open("/", "document.querySelector('#conversations .badge:not([hidden])')")
	if b := eval[string](w, "document.querySelector('#conversations .badge:not([hidden])').textContent"); b != "1 approval pending" {
		t.Errorf("the list's badge says %q", b)
	}
	w.fill("#search", "readme")
	w.until("[...document.querySelectorAll('#conversations li')].filter(li => !li.hidden).length === 1", 5*time.Second)
	w.fill("#search", "no such title")
	w.until("[...document.querySelectorAll('#conversations li')].every(li => li.hidden)", 5*time.Second)
	w.open("/c/"+conv, "document.querySelector('.approval .approve')")
	if d := eval[int](w, "codumentor.dups + codumentor.gaps"); d != 0 {
		t.Errorf("the replayed transcript repeated or skipped %d events", d)
	}
	w.click(".approval .approve")
	w.until("document.querySelector('details.tool .output') && document.querySelector('details.tool .output').textContent.includes('out-42')", 60*time.Second)
	w.until(transcriptText+".includes('Done.') && document.getElementById('turn-state').textContent === ''", 60*time.Second)
	if n := eval[int](w, "document.querySelectorAll('details.tool').length"); n != 2 {
		t.Errorf("%d tool cards, want 2 (shell, edit_file)", n)
	}
	// The turn's tokens, from its turn_usage event.
	if u := eval[string](w, "[...document.querySelectorAll('#transcript .usage')].map(p => p.textContent).join('|')"); !strings.HasSuffix(u, " tokens, 3 model calls") || strings.Contains(u, "|") || u[0] < '1' || u[0] > '9' {
		t.Errorf("the turn's usage line says %q; want its tokens and 3 model calls", u)
	}

	// An attachment, uploaded with progress.
	doc := filepath.Join(t.TempDir(), "report.docx")
	if err := os.WriteFile(doc, officetest.GoodDOCX(), 0o644); err != nil {
		t.Fatal(err)
	}
	w.do(chromedp.SetUploadFiles(chromedp.ID("attach"), []string{doc}))
	w.until("document.getElementById('attachments').innerText.includes('report.docx (docx')", 60*time.Second)

	// The workspace: the file, the diff, the push of what is shown.
	w.click("#to-workspace")
	w.until("document.querySelector('#tree [data-path=\"README.md\"]')", 20*time.Second)
	w.click("#tree [data-path=\"README.md\"]")
	w.until("document.getElementById('file').innerText.includes('hello world')", 20*time.Second)
	w.click("#load-diff")
	w.until("document.getElementById('diff').innerText.includes('+hello world') && !document.getElementById('push').hidden", 20*time.Second)
	w.checkPage("workspace", "document.querySelector('#diff pre')", "")
	w.click("#diff-mode")
	w.until("document.querySelector('#diff table.sbs td.del') && document.querySelector('#diff td.del').textContent === 'hello' && document.querySelector('#diff td.add').textContent === 'hello world'", 10*time.Second)
	w.checkPage("workspace-side-by-side", "document.querySelector('#diff table.sbs')", "")
	w.fill("#commit-msg", "Say hello world")
	w.fill("#branch", "codumentor/web")
	w.click("#push-btn")
	w.until("document.getElementById('push-result').textContent.includes('Pushed')", 60*time.Second)
	if got := gitCmd(t, bare, "show", "codumentor/web:README.md"); got != "hello world" {
		t.Fatalf("pushed README.md = %q", got)
	}
	if msg := gitCmd(t, bare, "log", "-1", "--format=%s", "codumentor/web"); msg != "Say hello world" {
		t.Fatalf("pushed commit message %q", msg)
	}

	// Secrets: written, listed by name, the value never sent back.
	w.open("/secrets", "document.querySelector('#secrets li')")
	w.fill("#secret-name", "TOKEN")
	w.fill("#secret-value", "s3cret-value-xyz")
	w.click("#secret-form button[type=submit]")
	w.until("document.getElementById('secrets').innerText.includes('TOKEN')", 20*time.Second)
	w.open("/secrets", "document.getElementById('secrets').innerText.includes('TOKEN')")
	if strings.Contains(eval[string](w, "document.documentElement.outerHTML"), "s3cret-value-xyz") {
		t.Fatal("the secrets page shows a value")
	}
	w.checkPage("secrets", "document.querySelector('#secrets li')", "")
	// Model profiles: saved against the endpoint the operator listed, the
	// key never sent back, the profile offered for new conversations.
	w.open("/profiles", "document.querySelector('#profile-endpoint option')")
	w.fill("#profile-name", "work")
	w.fill("#profile-model", "m1")
	w.fill("#profile-key", "sk-web-key-123")
	w.click("#profile-form button[type=submit]")
	w.until("document.getElementById('profiles').innerText.includes('m1 at http://127.0.0.1:9/v1') && document.getElementById('profiles').innerText.includes('key stored')", 20*time.Second)
	if strings.Contains(eval[string](w, "document.documentElement.outerHTML"), "sk-web-key-123") {
		t.Fatal("the profiles page shows a key")
	}
	w.checkPage("profiles", "document.querySelector('#profiles li')", "")
	w.open("/", "document.querySelector('#new-profile option[value=work]')")

	t.Run("reconnect", func(t *testing.T) {
		defer w.as(t)()
		var c conversation
		a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "long"}, &c)
		w.open("/c/"+c.ID, "window.codumentor && codumentor.opens > 0")
		w.fill("#message", "long story")
		w.click("#send")
		w.until("document.querySelector('.msg.assistant .md') && document.querySelector('.msg.assistant .md').innerText.length > 40", 30*time.Second)
		if n := proxy.drop(); n == 0 {
			t.Fatal("no connection to drop")
		}
		if len(eval[string](w, "document.querySelector('.msg.assistant .md').innerText")) >= len(longText) {
			t.Fatal("the reply was whole before the stream was dropped: nothing tested")
		}
		w.until("codumentor.opens >= 2", 20*time.Second)
		w.until("document.getElementById('turn-state').textContent === '' && document.querySelector('.msg.assistant p')", 60*time.Second)
		got := strings.TrimSpace(eval[string](w, "document.querySelector('.msg.assistant .md').innerText"))
		if got != longText {
			t.Fatalf("after the reconnect the reply reads\n%q\nwant\n%q", got, longText)
		}
		if d := eval[int](w, "codumentor.dups + codumentor.gaps"); d != 0 {
			t.Fatalf("the stream repeated or skipped %d events across the reconnect", d)
		}
	})

	t.Run("xss", func(t *testing.T) {
		defer w.as(t)()
		var c conversation
		a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": `<img src=x onerror=alert(9)>`}, &c)
		w.open("/c/"+c.ID, "window.codumentor && codumentor.opens > 0")
		w.fill("#message", "hostile please")
		w.click("#send")
		w.until(transcriptText+".includes('Written.') && document.querySelector('.msg.assistant a')", 60*time.Second)
		// inert checks the page: no payload ran, none became an element.
		inert := func(where string) {
			t.Helper()
			w.quiet()
			if v := eval[string](w, "String(window.__xss)"); v != "undefined" {
				t.Errorf("%s: a payload ran: window.__xss = %s", where, v)
			}
			if n := eval[int](w, "document.querySelectorAll('img, iframe, script:not([src]), [onerror], [onclick], a[href^=javascript i]').length"); n != 0 {
				t.Errorf("%s: the page holds %d elements from a payload:\n%s", where, n, eval[string](w, "document.getElementById('main').innerHTML"))
			}
		}
		// The control: a handler a failed image load queues has run
		// by the time inert looks.
		eval[chromedp.Void](w, "(() => { const i = new Image(); i.addEventListener('error', () => { window.__control = 1 }); i.src = '/no-such-image' })()")
		w.quiet()
		if !eval[bool](w, "window.__control === 1") {
			t.Error("the control's error handler had not run when the page was quiet")
		}
		inert("the conversation")
		eval[chromedp.Void](w, "document.querySelectorAll('.msg a').forEach(a => { if (a.textContent.startsWith('click me')) a.click() })")
		inert("the conversation, its links clicked")
		w.open("/c/"+c.ID+"/workspace", "document.querySelector('#tree li')")
		w.until(fmt.Sprintf("[...document.querySelectorAll('#tree button')].some(b => b.textContent === %q)", hostileName), 20*time.Second)
		eval[chromedp.Void](w, fmt.Sprintf("[...document.querySelectorAll('#tree button')].find(b => b.textContent === %q).click()", hostileName))
		w.until("document.getElementById('file').innerText.includes('window.__xss = 8')", 20*time.Second)
		w.click("#load-diff")
		w.until("document.getElementById('diff').innerText.includes('onerror=alert(7)')", 20*time.Second)
		inert("the workspace")
		w.open("/", "document.querySelectorAll('#conversations li').length > 2")
		inert("the conversations")
		// Deleted from the list: the button asks once more, in place.
		sel := fmt.Sprintf("#conversations li:has(a[href=\"/c/%s\"]) button.danger", c.ID)
		w.click(sel)
		w.click(sel)
		w.until(fmt.Sprintf("!document.querySelector('#conversations a[href=\"/c/%s\"]')", c.ID), 10*time.Second)
		a.must(http.StatusNotFound, "GET", "/api/v1/conversations/"+c.ID, nil, nil)
		if d := w.seen(&w.dialogs); len(d) > 0 {
			t.Errorf("a payload opened dialogs: %q", d)
		}
		if o := w.seen(&w.outside); len(o) > 0 {
			t.Errorf("requests left for outside hosts: %q", o)
		}
	})

	t.Run("csrf", func(t *testing.T) {
		defer w.as(t)()
		target := w.base
		// The attacker's page, on another origin of the same site (a
		// SameSite=Strict cookie goes along): its script posts a form
		// and fetches with the cookie.
		attacker := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Content-Type", "text/html")
			fmt.Fprint(rw, "<title>attacker</title><p>attacker</p>")
		}))
		defer attacker.Close()
		tab, cancel := chromedp.NewContext(w.ctx)
		defer cancel()
		ctx, cancel2 := context.WithTimeout(tab, 60*time.Second)
		defer cancel2()
		run := func(js string) string {
			t.Helper()
			v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
			if err != nil {
				t.Fatalf("%s: %v", js, err)
			}
			return v
		}
		for _, form := range []string{
			fmt.Sprintf(`<form method=post action="%s/api/v1/auth/logout"></form>`, target),
			fmt.Sprintf(`<form method=post action="%s/logout"><input name=csrf_token value=guess></form>`, target),
			fmt.Sprintf(`<form method=post action="%s/api/v1/conversations" enctype=text/plain><input name='{"title":"pwned","x":"' value='"}'></form>`, target),
		} {
			if err := chromedp.Do(ctx, chromedp.Navigate(attacker.URL)); err != nil {
				t.Fatal(err)
			}
			run(fmt.Sprintf("document.body.innerHTML = %q; document.forms[0].submit(); ''", form))
			// The refusal is a page of this server (a 204 would leave
			// the tab where it is).
			sandboxtest.Eventually(t, 10*time.Second, func() error {
				body, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("location.href + ' ' + (document.body ? document.body.innerText : '')"))
				if !strings.HasPrefix(body, target) || !strings.Contains(body, "own pages") {
					return fmt.Errorf("the cross-origin form post (%s) was not refused: %s", form, body)
				}
				return nil
			})
			if st, _, _ := a.do("GET", "/api/v1/me", nil); st != http.StatusOK {
				t.Fatalf("after the cross-origin form post (%s), alice's token answers %d", form, st)
			}
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(attacker.URL)); err != nil {
			t.Fatal(err)
		}
		run(fmt.Sprintf(`Promise.allSettled([
 fetch(%[1]q + '/api/v1/auth/logout', {method: 'POST', mode: 'no-cors', credentials: 'include'}),
 fetch(%[1]q + '/api/v1/conversations', {method: 'POST', mode: 'no-cors', credentials: 'include', headers: {'Content-Type': 'text/plain'}, body: '{"title":"pwned"}'}),
 fetch(%[1]q + '/api/v1/conversations', {method: 'POST', credentials: 'include', headers: {'Content-Type': 'application/json', 'X-CSRF-Token': 'guess'}, body: '{"title":"pwned"}'}),
]).then(r => r.map(x => x.status).join())`, target))
		// alice is still signed in (logout revokes every token of hers),
		// and no conversation was made.
		a.must(http.StatusOK, "GET", "/api/v1/me", nil, nil)
		var list struct {
			Conversations []struct{ Title string }
		}
		a.must(http.StatusOK, "GET", "/api/v1/conversations", nil, &list)
		for _, c := range list.Conversations {
			if c.Title == "pwned" {
				t.Fatal("a cross-origin fetch made a conversation")
			}
		}
		w.open("/", "document.querySelector('#conversations li')")

		// With the cookie: another origin, no token, a wrong token are
		// refused; this origin with the page's token is not.
		cookies, err := chromedp.Call(w.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{w.base}})
		if err != nil || len(cookies.Cookies) != 1 || !cookies.Cookies[0].HTTPOnly || cookies.Cookies[0].SameSite != network.CookieSameSiteStrict {
			t.Fatalf("cookies %+v, %v", cookies, err)
		}
		cookie := cookies.Cookies[0].Name + "=" + cookies.Cookies[0].Value
		csrf := eval[string](w, "document.querySelector('meta[name=csrf-token]').content")
		for _, tc := range []struct {
			origin, token string
			want          int
		}{
			{"http://127.0.0.1:1", csrf, http.StatusForbidden},
			{w.base, "", http.StatusForbidden},
			{w.base, strings.Repeat("0", 64), http.StatusForbidden},
			{"", csrf, http.StatusForbidden},
			{w.base, csrf, http.StatusOK},
		} {
			req, _ := http.NewRequest("POST", w.base+"/api/v1/render/markdown", strings.NewReader(`{"texts":["*x*"]}`))
			req.Header.Set("Cookie", cookie)
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.token != "" {
				req.Header.Set("X-CSRF-Token", tc.token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Errorf("origin %q token %.8q: %d, want %d", tc.origin, tc.token, res.StatusCode, tc.want)
			}
		}
	})

	// Sign out: the session is revoked server-side, pages are closed.
	cookies, err := chromedp.Call(w.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{w.base}})
	if err != nil || len(cookies.Cookies) != 1 {
		t.Fatalf("cookies %+v, %v", cookies, err)
	}
	old := cookies.Cookies[0].Name + "=" + cookies.Cookies[0].Value
	w.open("/", "document.getElementById('signout')")
	w.click("#signout")
	w.until("location.pathname === '/login'", 20*time.Second)
	w.open("/c/"+conv, "document.getElementById('username')")
	if loc := w.location(); !strings.HasPrefix(loc, w.base+"/login") {
		t.Fatalf("signed out, the conversation shows %s", loc)
	}
	if st := eval[int](w, "fetch('/api/v1/conversations').then(r => r.status)"); st != http.StatusUnauthorized {
		t.Fatalf("signed out, the API answers %d", st)
	}
	req, _ := http.NewRequest("GET", w.base+"/api/v1/me", nil)
	req.Header.Set("Cookie", old)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the signed-out session's cookie still works: %v %v", res.StatusCode, err)
	}

	// The admin pages. Another user's conversation is not found, as an
	// unknown one.
	w.signIn("root", pw)
	for _, id := range []string{conv, "conv_000000000000000000000000"} {
		w.open("/c/"+id, "document.querySelector('h1')")
		if got := eval[string](w, "document.querySelector('main').innerText"); !strings.Contains(got, "No such conversation.") {
			t.Errorf("root opening /c/%s sees:\n%s", id, got)
		}
	}
	// An investigation: the command, then the host-network question.
	w.open("/", "document.getElementById('conversations')")
	if !eval[bool](w, "!!document.querySelector('#new-mode option[value=host_readonly]')") {
		t.Fatal("an admin is not offered host read-only investigations")
	}
	w.fill("#new-title", "Investigate")
	eval[chromedp.Void](w, "document.getElementById('new-mode').value = 'host_readonly'")
	w.click("#new-conv button[type=submit]")
	w.until("location.pathname.startsWith('/c/') && window.codumentor && codumentor.opens > 0", 20*time.Second)
	w.fill("#message", "investigate please")
	w.click("#send")
	w.until("document.querySelector('.approval .command') && document.querySelector('.approval .command').textContent === 'echo inv-$((6*7))'", 30*time.Second)
	w.click(".approval .approve")
	w.until("document.querySelector('.approval h2') && document.querySelector('.approval h2').textContent.includes('host network')", 30*time.Second)
	if eval[bool](w, "!!document.querySelector('.approval .always')") {
		t.Error("the host-network question offers always")
	}
	w.click(".approval .deny")
	w.until("document.querySelector('details.tool .output') && document.querySelector('details.tool .output').textContent.includes('inv-42')", 60*time.Second)
	w.open("/admin/users", "document.querySelectorAll('#users tbody tr').length >= 2")
	w.fill("#user-name", "carol")
	w.fill("#user-password", pw)
	w.click("#user-form button[type=submit]")
	w.until("document.querySelector('#users tbody').innerText.includes('carol')", 20*time.Second)
	w.checkPage("users", "document.querySelectorAll('#users tbody tr').length >= 3", "")
	// carol disabled from the page: the server says so too.
	eval[chromedp.Void](w, "[...document.querySelectorAll('#users tbody tr')].find((r) => r.cells[0].textContent === 'carol').querySelector('button').click()")
	w.until("[...document.querySelectorAll('#users tbody tr')].some((r) => r.cells[0].textContent === 'carol' && r.cells[2].textContent === 'disabled')", 20*time.Second)
	var users struct {
		Users []struct {
			Name     string
			Disabled bool
		}
	}
	admin.must(http.StatusOK, "GET", "/api/v1/admin/users", nil, &users)
	if i := slices.IndexFunc(users.Users, func(u struct {
		Name     string
		Disabled bool
	}) bool {
		return u.Name == "carol"
	}); i < 0 || !users.Users[i].Disabled {
		t.Fatalf("carol after Disable: %+v", users.Users)
	}
	w.open("/admin/repositories", "document.querySelector('#repos tbody tr')")
	w.click("#repos tbody button")
	w.until("document.querySelector('#repos tbody').innerText.includes('synced')", 60*time.Second)
	w.checkPage("repositories", "document.querySelector('#repos tbody tr')", "")
	w.open("/admin/mcp", "!document.getElementById('mcp-off').hidden || document.querySelector('#mcp tbody tr')")
	w.checkPage("mcp", "true", "")
	w.open("/admin/doctor", "document.querySelector('#checks tbody tr')")
	if v := eval[string](w, "document.getElementById('verdict').textContent"); !strings.HasPrefix(v, "Ready") && !strings.HasPrefix(v, "Not ready") {
		t.Errorf("the doctor page says %q", v)
	}
	w.checkPage("doctor", "document.querySelector('#checks tbody tr')", "")

	if pr := w.seen(&w.problems); len(pr) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(pr, "\n"))
	}
	if d := w.seen(&w.dialogs); len(d) > 0 {
		t.Errorf("dialogs opened: %q", d)
	}
	if o := w.seen(&w.outside); len(o) > 0 {
		t.Errorf("requests left for outside hosts: %q", o)
	}

}

// maxFirstLoad is the budget of the conversation page's first load:
// HTML, CSS and JavaScript, uncompressed.
const maxFirstLoad = 150 << 10

// firstLoadBytes loads path with the cache off and sums the uncompressed
// sizes of the document and of what it loaded from /static/ (the
// stylesheet and the script modules), as Resource Timing reports them.
func firstLoadBytes(w *webUI, path string) int {
	w.t.Helper()
	if _, err := chromedp.Call(w.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		w.t.Fatal(err)
	}
	defer chromedp.Call(w.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: false})
	w.open(path, "window.codumentor && codumentor.opens > 0")
	return eval[int](w, `performance.getEntriesByType('navigation')[0].decodedBodySize +
 performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname.startsWith('/static/')).reduce((n, e) => n + e.decodedBodySize, 0)`)
}

// BenchmarkWebUIStream measures the conversation page: the bytes of its
// first load (HTML, CSS, JavaScript, uncompressed; target ≤ 150 KB) and
// the time from a text_delta leaving the server (its time field) to its
// text in the page's DOM, over a reply streamed at 50 deltas a second
// (target p95 ≤ 50 ms).
func BenchmarkWebUIStream(b *testing.B) {
	var text strings.Builder
	for i := range 200 {
		fmt.Fprintf(&text, "%03d ", i) // 4-byte pieces: 200 deltas
	}
	llm, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: text.String()}}}, llmtest.Options{ChunkDelay: 20 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(llm.Close)
	in := newInstance(b, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n", llm.URL()))
	in.addUser("alice", pw, false)
	p := in.start()
	defer p.stop()
	a := p.login("alice", pw)
	w := newWebUI(b, p.URL)
	w.signIn("alice", pw)
	var lat []float64
	bytes := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var c conversation
		a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "bench"}, &c)
		bytes = firstLoadBytes(w, "/c/"+c.ID)
		w.fill("#message", "go")
		w.click("#send")
		w.until("document.getElementById('turn-state').textContent === '' && document.querySelector('.msg.assistant p')", 60*time.Second)
		lat = append(lat, eval[[]float64](w, "codumentor.latencies")...)
	}
	b.StopTimer()
	if len(lat) == 0 {
		b.Fatal("no text_delta latencies measured")
	}
	slices.Sort(lat)
	p95 := lat[(len(lat)*95+99)/100-1]
	b.ReportMetric(float64(bytes), "first-load-bytes")
	b.ReportMetric(lat[len(lat)/2], "p50-ms")
	b.ReportMetric(p95, "p95-ms")
	b.ReportMetric(float64(len(lat))/float64(b.N), "deltas/op")
}

// TestWebSignIn: the sign-in form is the API's login path (its limiter
// too), refuses another origin, sends only to this server's paths
// afterwards, and every page carries the security headers.
func TestWebSignIn(t *testing.T) {
	// The test is its own TLS-terminating proxy when it says so.
	in := newInstance(t, "trusted_proxies: [\"127.0.0.0/8\"]\n")
	in.addUser("alice", pw, false)
	p := in.start()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(origin, user, password, next string, header ...string) *http.Response {
		t.Helper()
		form := url.Values{"username": {user}, "password": {password}, "next": {next}}
		req, _ := http.NewRequest("POST", p.URL+"/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}

	res, err := noFollow.Get(p.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?next=%2F" {
		t.Fatalf("GET / signed out: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	for _, path := range []string{"/", "/login", "/static/app.js", "/static/app.css"} {
		res, err := noFollow.Get(p.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		for h, want := range map[string]string{
			"Content-Security-Policy": "default-src 'self'; script-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
			"X-Content-Type-Options":  "nosniff",
			"Referrer-Policy":         "same-origin",
		} {
			if got := res.Header.Get(h); got != want {
				t.Errorf("GET %s: %s = %q, want %q", path, h, got, want)
			}
		}
	}

	if res := post("http://evil.example", "alice", pw, "/"); res.StatusCode != http.StatusForbidden || res.Header.Get("Set-Cookie") != "" {
		t.Fatalf("sign-in from another origin: %d, cookie %q", res.StatusCode, res.Header.Get("Set-Cookie"))
	}
	for next, want := range map[string]string{"/secrets": "/secrets", "//evil.example/x": "/", "https://evil.example/": "/", "/\\evil.example": "/"} {
		res := post(p.URL, "alice", pw, next)
		cookie := res.Header.Get("Set-Cookie")
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != want ||
			!strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") || strings.Contains(strings.ToLower(cookie), "; secure") {
			t.Errorf("sign-in, next %q: %d to %q, cookie %q", next, res.StatusCode, res.Header.Get("Location"), cookie)
		}
	}
	// Behind a TLS proxy: the origin is https, the cookie Secure.
	https := "https://" + strings.TrimPrefix(p.URL, "http://")
	if res := post(https, "alice", pw, "/", "X-Forwarded-Proto", "https"); res.StatusCode != http.StatusSeeOther || !strings.Contains(strings.ToLower(res.Header.Get("Set-Cookie")), "; secure") {
		t.Errorf("sign-in through a TLS proxy: %d, cookie %q", res.StatusCode, res.Header.Get("Set-Cookie"))
	}
	if res := post(p.URL, "alice", pw, "/", "X-Forwarded-Proto", "https"); res.StatusCode != http.StatusForbidden {
		t.Errorf("an http origin through a TLS proxy: %d, want 403", res.StatusCode)
	}
	// Under TLS the cookie is __Host- prefixed, so that a sibling
	// subdomain cannot toss its own session to the browser (a login
	// CSRF: the victim would work in the attacker's account); the plain
	// name is then not a session.
	res = post(https, "alice", pw, "/", "X-Forwarded-Proto", "https")
	tlsCookie, _, _ := strings.Cut(res.Header.Get("Set-Cookie"), ";")
	name, tok, _ := strings.Cut(tlsCookie, "=")
	if name != "__Host-codumentor_session" || !strings.Contains(res.Header.Get("Set-Cookie"), "path=/") || strings.Contains(strings.ToLower(res.Header.Get("Set-Cookie")), "domain=") {
		t.Errorf("sign-in through a TLS proxy sets %q", res.Header.Get("Set-Cookie"))
	}
	for cookie, want := range map[string]int{tlsCookie: http.StatusOK, "codumentor_session=" + tok: http.StatusSeeOther} {
		req, _ := http.NewRequest("GET", p.URL+"/secrets", nil)
		req.Header.Set("Cookie", cookie)
		req.Header.Set("X-Forwarded-Proto", "https")
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET /secrets through a TLS proxy with %.30q…: %d, want %d", cookie, res.StatusCode, want)
		}
	}
	// What the API answers a browser session is not kept in the
	// browser's cache (a shared machine, after sign-out).
	req, _ := http.NewRequest("GET", p.URL+"/api/v1/secrets", nil)
	req.Header.Set("Cookie", tlsCookie)
	req.Header.Set("X-Forwarded-Proto", "https")
	res, err = noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	observe("GET", "/api/v1/secrets", res.StatusCode)
	if res.StatusCode != http.StatusOK || res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("GET /api/v1/secrets with the cookie: %d, Cache-Control %q", res.StatusCode, res.Header.Get("Cache-Control"))
	}
	// Sign-out needs the page's CSRF token, from this origin: a wrong or
	// missing one leaves the session; the right one ends it.
	plainCookie, _, _ := strings.Cut(post(p.URL, "alice", pw, "/").Header.Get("Set-Cookie"), ";")
	signOut := func(csrf string) int {
		t.Helper()
		form := url.Values{}
		if csrf != "" {
			form.Set("csrf_token", csrf)
		}
		req, _ := http.NewRequest("POST", p.URL+"/logout", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", p.URL)
		req.Header.Set("Cookie", plainCookie)
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	pageCSRF := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", p.URL+"/secrets", nil)
		req.Header.Set("Cookie", plainCookie)
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		_, rest, _ := strings.Cut(string(body), `name="csrf-token" content="`)
		tok, _, _ := strings.Cut(rest, `"`)
		return res.StatusCode, tok
	}
	st, csrf := pageCSRF()
	if st != http.StatusOK || len(csrf) != 64 {
		t.Fatalf("GET /secrets signed in: %d, CSRF token %q", st, csrf)
	}
	for _, bad := range []string{"", "guess", strings.Repeat("0", 64)} {
		if st := signOut(bad); st != http.StatusForbidden {
			t.Errorf("sign-out with CSRF token %q: %d, want 403", bad, st)
		}
		if st, _ := pageCSRF(); st != http.StatusOK {
			t.Fatalf("a refused sign-out ended the session: GET /secrets %d", st)
		}
	}
	if st := signOut(csrf); st != http.StatusSeeOther {
		t.Errorf("sign-out with the page's CSRF token: %d, want 303", st)
	}
	if st, _ := pageCSRF(); st != http.StatusSeeOther {
		t.Errorf("after sign-out GET /secrets: %d, want 303 to the sign-in page", st)
	}

	// The same limiter as POST /api/v1/auth/login.
	last := 0
	for i := 0; i < 40 && last != http.StatusTooManyRequests; i++ {
		last = post(p.URL, "alice", "wrong password", "/").StatusCode
	}
	if last != http.StatusTooManyRequests {
		t.Fatalf("failed sign-ins are not limited: %d", last)
	}
	if st, _, _ := p.loginStatus("alice", pw); st != http.StatusTooManyRequests {
		t.Fatalf("after the form's failures, POST /api/v1/auth/login answers %d, want 429", st)
	}
}
