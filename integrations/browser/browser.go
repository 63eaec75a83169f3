// Package browser runs headless Chromium (through chromedp) for the
// fetch_urls tool and for mermaid diagrams.
//
// A page is untrusted content, so the browser runs under Chrome's own
// sandbox whenever it can start with it. Browser tries it first; when the
// launch fails it logs one warning naming the likely cause ("Chrome
// sandbox …": running as root, unprivileged user namespaces restricted,
// no AppArmor profile for this binary) and retries once with
// --no-sandbox. The verdict holds for the Browser's life: the warning is
// logged once. EnvSandbox=1 makes a sandbox failure an error (no
// fallback); =0 skips the attempt.
//
// Chromium never reaches the network itself. Every request a page makes
// (the navigation, its redirects, subresources, fetches) is paused through
// the DevTools Fetch domain and made by this package's HTTP client, whose
// dialer checks the resolved address against a Policy at connect time
// (so DNS cannot answer differently afterwards); the reply is handed to
// the page. Requests the Fetch domain does not see (WebSockets, workers of
// other targets, DNS prefetch) go to a proxy that refuses every
// connection, and the browser's own resolver answers nothing.
//
// One browser process serves a Browser; it starts on first use and stops
// when idle. Each request gets a fresh incognito browser context.
//
// Pages are bounded in memory: the browser's processes run in a cgroup of
// their own (Options.Memory, with a cap on processes), moved there as soon
// as the browser is up, before any page loads; what they fork later
// starts inside it. A page that crosses the cap is killed by the kernel,
// its request fails with ErrMemory, and the browser restarts for the next
// one. The responses this process fetches for pages are bounded too:
// a request waits until its body fits in the bytes in flight for its call
// and for the Browser (Options.MaxInflight) before it is read.
package browser

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hashicorp/go-hclog"

	"github.com/codumentor/codumentor/sandboxkit/cgroup"
)

// EnvSandbox chooses the Chrome sandbox: "1" requires it (a launch
// failure is an error), "0" runs without it, unset or "" tries it first.
const EnvSandbox = "CODUMENTOR_CHROME_SANDBOX"

// ErrNoChrome is returned when no Chrome or Chromium binary is found.
var ErrNoChrome = errors.New("browser: no Chrome or Chromium found: install Debian's chromium (scripts/install-prereqs) or set browser.path")

// ErrSandbox is returned when EnvSandbox=1 requires Chrome's sandbox and
// the browser cannot start with it.
var ErrSandbox = errors.New("browser: Chrome sandbox required (browser.require_sandbox, or " + EnvSandbox + "=1) but Chrome cannot start with it")

// ErrMemory is wrapped by the error of a request whose page the kernel
// stopped for using more memory than the browser may (Options.Memory).
var ErrMemory = errors.New("the page used more memory than the browser may use")

// ErrLimits is returned when Options.RequireLimits is set and no
// delegated cgroup can hold the browser.
var ErrLimits = errors.New("browser: no cgroup can bound the browser's memory, and limits are required")

// maxProcesses caps the browser's processes and threads together
// (pids.max): Chromium runs some 20 threads in each of its processes.
const maxProcesses = 2048

// SandboxMode says whether Chrome's sandbox is tried, required or skipped.
type SandboxMode int

const (
	// SandboxAuto tries the sandbox and falls back to --no-sandbox with a
	// warning.
	SandboxAuto SandboxMode = iota
	// SandboxRequire makes a launch failure with the sandbox an error.
	SandboxRequire
	// SandboxOff starts Chrome with --no-sandbox.
	SandboxOff
)

// SandboxFromEnv reads EnvSandbox.
func SandboxFromEnv() (SandboxMode, error) {
	switch v := os.Getenv(EnvSandbox); v {
	case "":
		return SandboxAuto, nil
	case "1":
		return SandboxRequire, nil
	case "0":
		return SandboxOff, nil
	default:
		return 0, fmt.Errorf("%s=%q: want 1 (require Chrome's sandbox), 0 (no sandbox) or unset (try it)", EnvSandbox, v)
	}
}

// SandboxFor is the mode of a server whose configuration requires
// Chrome's sandbox (require) or leaves it to EnvSandbox. Requiring it
// while EnvSandbox=0 turns it off is an error: the two contradict.
func SandboxFor(require bool) (SandboxMode, error) {
	mode, err := SandboxFromEnv()
	switch {
	case err != nil || !require:
		return mode, err
	case mode == SandboxOff:
		return 0, fmt.Errorf("browser.require_sandbox is set and %s=0 turns Chrome's sandbox off: unset one", EnvSandbox)
	}
	return SandboxRequire, nil
}

// Binary is the Chrome or Chromium executable and where it was found.
type Binary struct {
	Path string
	// Source is "browser.path", "playwright" or "PATH".
	Source string
}

// FindChrome finds the browser: the configured path (config browser.path)
// when set, else a Playwright-managed Chromium under
// ~/.cache/ms-playwright/, else chromium, chromium-browser or
// google-chrome on PATH.
func FindChrome(configured string) (Binary, error) {
	if configured != "" {
		p, err := exec.LookPath(configured)
		if err != nil {
			return Binary{}, fmt.Errorf("browser.path %s: not an executable file: %w", configured, ErrNoChrome)
		}
		return Binary{Path: p, Source: "browser.path"}, nil
	}
	if home, err := os.UserHomeDir(); err == nil {
		var found []string
		for _, pat := range []string{"chromium-*/chrome-linux*/chrome", "chromium_headless_shell-*/chrome-linux*/headless_shell", "chromium_headless_shell-*/chrome-headless-shell-linux*/chrome-headless-shell"} {
			m, _ := filepath.Glob(filepath.Join(home, ".cache", "ms-playwright", pat))
			found = append(found, m...)
		}
		// The newest build: Playwright's directories end in a build number.
		slices.SortFunc(found, func(a, b string) int {
			return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
		})
		for i := len(found) - 1; i >= 0; i-- {
			if st, err := os.Stat(found[i]); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				return Binary{Path: found[i], Source: "playwright"}, nil
			}
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return Binary{Path: p, Source: "PATH"}, nil
		}
	}
	return Binary{}, ErrNoChrome
}

// Verdict is how the browser process runs, decided at its first launch.
type Verdict struct {
	// Decided is false until the browser first started.
	Decided bool
	// Sandboxed reports whether Chrome's sandbox is on.
	Sandboxed bool
	// Detail says why, e.g. the cause of a fallback.
	Detail string
}

func (v Verdict) String() string {
	switch {
	case !v.Decided:
		return "not started yet"
	case v.Sandboxed:
		return "Chrome sandbox on"
	default:
		return "Chrome sandbox off (--no-sandbox): " + v.Detail
	}
}

// Launch is one start of the browser process (Options.Launching).
type Launch struct {
	Binary string
	// Sandboxed reports whether it starts with Chrome's sandbox.
	Sandboxed bool
	// Detail says why not (EnvSandbox=0, or the cause of a fallback).
	Detail string
}

// Options configure a Browser. Binary is required.
type Options struct {
	Binary  Binary
	Sandbox SandboxMode
	// IdleTimeout stops the browser process after this long without a
	// request (default 2 minutes).
	IdleTimeout time.Duration
	// StartTimeout bounds one launch (default 30 s).
	StartTimeout time.Duration
	// Policy decides which addresses pages may reach.
	Policy Policy
	// MaxTabs caps the pages open for requests at once, over all
	// callers (default 4); more requests wait for a free one.
	MaxTabs int
	// Mermaid is mermaid.min.js (default: DefaultMermaid). When it is
	// an npm install's, pages load the ESM build beside it instead (see
	// loadMermaid).
	Mermaid string
	Log     hclog.Logger
	// Memory caps the memory of the browser's processes together, in
	// bytes, in a cgroup of their own; 0 puts them in none.
	Memory int64
	// Cgroup is the delegated cgroup subtree (cgroup.Options.Path);
	// empty finds it: the service's own cgroup on v2, CgroupParent/USER
	// on v1 (cgroup.Options.Parent).
	Cgroup, CgroupParent string
	// RequireLimits makes a browser that no cgroup can bound fail to
	// start (ErrLimits) instead of running unbounded with a warning.
	RequireLimits bool
	// MaxInflight caps the bytes of pages' responses held at once, over
	// all requests (default 64 MiB); a call's requests hold at most
	// maxCallBytes of it.
	MaxInflight int64
	// Launching, if set, is called before every start of the browser
	// process with the request's context and how it starts (to record
	// it in the audit log); its error refuses the start, so nothing
	// starts unrecorded. A start with the sandbox that fails and falls
	// back is two calls.
	Launching func(context.Context, Launch) error

	// extraFlags are added to Chrome's command line (tests).
	extraFlags map[string]any
	// hosts resolve names to addresses for the pages' requests (tests).
	hosts map[string]string
}

// Browser is one headless browser process, started on first use.
type Browser struct {
	o Options

	mu      sync.Mutex
	verdict Verdict
	ctx     context.Context // the browser's chromedp context; nil when stopped
	stop    func()
	users   int
	idle    *time.Timer
	closed  bool
	// gen counts launches, so that a spare prepared for one process is
	// not kept for the next.
	gen       int
	spares    [pageKinds]*tab
	refilling [pageKinds]bool

	clientOnce sync.Once
	httpc      *http.Client

	slots chan struct{} // a token per page open for a request (MaxTabs)

	// inflight holds the bytes of responses being handed to pages.
	inflight budget
	// group holds the running browser's processes (nil: none); tree is
	// where groups are made, unbounded why there is none.
	group     *cgroup.Group
	tree      *cgroup.Tree
	unbounded string
	// peak is the memory peak of the last group, read when it closed.
	peak int64

	mermaidOnce sync.Once
	mermaid     map[string]localFile // renderFiles
	mermaidErr  error

	// screenshotPNG makes PNGs by screenshot even when the canvas can
	// be read (tests of that path).
	screenshotPNG bool
}

// New returns a Browser; nothing starts until the first request.
func New(o Options) *Browser {
	o.IdleTimeout = cmp.Or(o.IdleTimeout, 2*time.Minute)
	o.StartTimeout = cmp.Or(o.StartTimeout, 30*time.Second)
	o.Mermaid = cmp.Or(o.Mermaid, DefaultMermaid)
	o.MaxTabs = cmp.Or(o.MaxTabs, 4)
	o.MaxInflight = cmp.Or(o.MaxInflight, 64<<20)
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	return &Browser{o: o, slots: make(chan struct{}, o.MaxTabs), inflight: newBudget(o.MaxInflight)}
}

// Verdict reports whether the browser runs in Chrome's sandbox.
func (b *Browser) Verdict() Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.verdict
}

// Unbounded says why the browser's memory is not bounded by a cgroup
// (Options.Memory is set, no delegated cgroup holds it); "" when it is,
// or when the browser has not started.
func (b *Browser) Unbounded() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unbounded
}

// Close stops the browser process; later requests fail.
func (b *Browser) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.stopLocked()
}

func (b *Browser) stopLocked() {
	if b.idle != nil {
		b.idle.Stop()
		b.idle = nil
	}
	for k, p := range b.spares {
		if p != nil {
			p.cancel()
			b.spares[k] = nil
		}
	}
	if b.stop != nil {
		b.stop()
		b.stop, b.ctx = nil, nil
	}
	if b.group != nil {
		b.peak = b.group.MemoryPeak()
		if err := b.group.Close(); err != nil {
			b.o.Log.Warn("the browser's cgroup", "err", err)
		}
		b.group = nil
	}
}

// memoryHit reports, once a request's page p is done, whether the kernel
// killed a process of the browser for its memory meanwhile: then the
// browser is stopped (it restarts for the next request) and the error
// wraps ErrMemory. The kernel's counter is the browser's, not a page's:
// requests in flight beside the one that crossed the limit end with it
// (the restart stops them anyway).
func (b *Browser) memoryHit(p *tab) error {
	if p.group == nil || p.group.Events().OOMKills <= p.oom {
		return nil
	}
	b.mu.Lock()
	if b.gen == p.gen && b.ctx != nil {
		b.stopLocked()
	}
	b.mu.Unlock()
	b.o.Log.Warn("a page crossed the browser's memory limit: the browser restarts", "limit", b.o.Memory)
	return fmt.Errorf("%w (%d MiB): it was stopped, and the browser restarts for the next request", ErrMemory, b.o.Memory>>20)
}

// A tab is a page in its own new incognito browser context, with its
// requests intercepted. A request uses one page and closes it: the
// context is disposed with everything the page stored.
type tab struct {
	ctx    context.Context
	cancel func()
	in     *interceptor
	// gen and group are the browser's launch the page is in.
	gen   int
	group *cgroup.Group
	oom   uint64 // the group's OOM kills when the request took the page
}

// pageKind says how a page is prepared before a request gets it.
type pageKind int

const (
	fetchPage  pageKind = iota // blank, requests through the policy
	renderPage                 // the render page with mermaid loaded
	pageKinds
)

// take returns a fresh page of kind k for one request, starting the
// browser when it is not running. A spare page, opened and prepared
// ahead of the request (never used by another), is taken when there is
// one, and a new spare is prepared for the next request: a request then
// does not wait for a tab to open or mermaid to load. release closes the
// page; it is called when ctx ends at the latest.
func (b *Browser) take(ctx context.Context, k pageKind) (p *tab, release func(), err error) {
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	p, release, err = b.takeSlot(ctx, k)
	if err != nil {
		<-b.slots
	}
	return p, release, err
}

// takeSlot is take once the request holds a slot; release frees it.
func (b *Browser) takeSlot(ctx context.Context, k pageKind) (p *tab, release func(), err error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, nil, errors.New("browser: closed")
	}
	if b.ctx != nil && b.ctx.Err() != nil { // the process died
		b.stopLocked()
	}
	if b.ctx == nil {
		if err := b.startLocked(ctx); err != nil {
			b.mu.Unlock()
			return nil, nil, err
		}
	}
	if b.idle != nil {
		b.idle.Stop()
		b.idle = nil
	}
	b.users++
	bctx, gen, group := b.ctx, b.gen, b.group
	p = b.spares[k]
	b.spares[k] = nil
	b.mu.Unlock()

	if p == nil || p.ctx.Err() != nil {
		p, err = b.openPage(bctx, k, false)
	}
	if err != nil {
		b.release()
		return nil, nil, err
	}
	p.gen, p.group = gen, group
	if group != nil {
		p.oom = group.Events().OOMKills
	}
	stopWatch := context.AfterFunc(ctx, p.cancel)
	var once sync.Once
	release = func() {
		once.Do(func() {
			stopWatch()
			// Closing the tab and disposing its context takes a few
			// round trips the caller need not wait for; the next spare
			// is prepared after, so as not to compete with this request
			// for the CPU.
			go func() {
				p.cancel()
				<-b.slots
				b.release()
				b.refill(bctx, gen, k)
			}()
		})
	}
	return p, release, nil
}

// openPage opens and prepares a page of kind k in the browser bctx; warm
// readies a render page for a later request with a first render (warmJS),
// which one waiting for the page would pay twice.
func (b *Browser) openPage(bctx context.Context, k pageKind, warm bool) (*tab, error) {
	tctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	p := &tab{ctx: tctx, cancel: cancel, in: &interceptor{client: b.client(), policy: b.o.Policy, server: b.inflight}}
	err := func() error {
		if k == renderPage {
			files, err := b.renderFiles()
			if err != nil {
				return err
			}
			p.in.local = files
		}
		t := time.AfterFunc(pageTimeout, cancel)
		defer t.Stop()
		if err := p.in.start(tctx); err != nil {
			return err
		}
		if k == renderPage {
			if err := chromedp.Do(tctx, chromedp.Navigate(renderURL)); err != nil {
				return fmt.Errorf("browser: render page: %w", err)
			}
			if warm {
				if _, err := chromedp.Run(tctx, chromedp.Evaluate[bool](warmJS, chromedp.EvalAwaitPromise)); err != nil {
					return fmt.Errorf("browser: render page: warm-up: %w", err)
				}
			}
		}
		return nil
	}()
	if err != nil {
		cancel()
		return nil, err
	}
	return p, nil
}

// refill prepares a spare page of kind k for the next request, unless
// there is one or the browser stopped (or restarted: gen) meanwhile.
func (b *Browser) refill(bctx context.Context, gen int, k pageKind) {
	b.mu.Lock()
	busy := b.spares[k] != nil || b.refilling[k] || b.gen != gen || b.ctx == nil
	if !busy {
		b.refilling[k] = true
	}
	b.mu.Unlock()
	if busy {
		return
	}
	p, err := b.openPage(bctx, k, true)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refilling[k] = false
	if err != nil {
		return
	}
	if b.gen != gen || b.ctx == nil || b.spares[k] != nil {
		p.cancel()
		return
	}
	b.spares[k] = p
}

func (b *Browser) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.users--
	if b.users == 0 && b.ctx != nil {
		b.idle = time.AfterFunc(b.o.IdleTimeout, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.users == 0 && b.idle != nil {
				b.idle = nil
				b.stopLocked()
			}
		})
	}
}

// startLocked launches the browser, deciding the sandbox verdict at the
// first launch. ctx is the request's, for Launching.
func (b *Browser) startLocked(ctx context.Context) error {
	if b.o.Binary.Path == "" {
		return ErrNoChrome
	}
	if b.verdict.Decided {
		return b.launchLocked(ctx, !b.verdict.Sandboxed, b.verdict.Detail)
	}
	if b.o.Sandbox == SandboxOff {
		if err := b.launchLocked(ctx, true, EnvSandbox+"=0"); err != nil {
			return err
		}
		b.verdict = Verdict{Decided: true, Detail: EnvSandbox + "=0"}
		b.o.Log.Warn("Chrome sandbox off: "+EnvSandbox+"=0 starts the browser with --no-sandbox", "binary", b.o.Binary.Path)
		return nil
	}
	err := b.launchLocked(ctx, false, "")
	if errors.Is(err, errNotRecorded) {
		return err
	}
	if err == nil {
		b.verdict = Verdict{Decided: true, Sandboxed: true}
		b.o.Log.Info("Chrome sandbox on", "binary", b.o.Binary.Path)
		return nil
	}
	cause := sandboxCause(err)
	if b.o.Sandbox == SandboxRequire {
		return fmt.Errorf("%w: %s (%v)", ErrSandbox, cause, err)
	}
	if err2 := b.launchLocked(ctx, true, cause); err2 != nil {
		return fmt.Errorf("browser: %s failed to start, with Chrome's sandbox (%v) and without it: %w", b.o.Binary.Path, err, err2)
	}
	b.verdict = Verdict{Decided: true, Detail: cause}
	b.o.Log.Warn("Chrome sandbox unavailable: the browser runs with --no-sandbox, pages are contained only by the request policy; likely cause: "+cause,
		"binary", b.o.Binary.Path, "err", firstLine(err.Error()), "fix", "run the server as an unprivileged user with user namespaces available (or an AppArmor profile for this binary), or set "+EnvSandbox+"=0 to accept it")
	return nil
}

// errNotRecorded wraps a Launching error: the start is refused.
var errNotRecorded = errors.New("browser: the start of the browser could not be recorded")

// launchLocked starts the browser process and its first tab, once
// Launching (if set) recorded it; detail says why it has no sandbox.
func (b *Browser) launchLocked(ctx context.Context, noSandbox bool, detail string) error {
	if b.o.Launching != nil {
		if err := b.o.Launching(ctx, Launch{Binary: b.o.Binary.Path, Sandboxed: !noSandbox, Detail: detail}); err != nil {
			return fmt.Errorf("%w: %w", errNotRecorded, err)
		}
	}
	refuser, err := newRefuser()
	if err != nil {
		return err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(b.o.Binary.Path),
		// chromedp adds --no-sandbox as root unless the flag is set.
		chromedp.Flag("no-sandbox", noSandbox),
		// A closed network: nothing phones home.
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("disable-field-trial-config", true),
		chromedp.Flag("mute-audio", true),
		// New headless is the whole browser: without these it preloads
		// the omnibox popup's WebUI, a renderer of its own for each
		// window, so for each request's context too, which took more
		// CPU than the page. (chromedp's defaults first.)
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,PreloadTopChromeWebUI,WebUIOmniboxPopup,WebUIOmniboxAimPopup,WebUIOmniboxFullPopup"),
		chromedp.Flag("hide-scrollbars", true),
		// The backstop of the request policy: what the Fetch domain
		// does not pause cannot connect anywhere.
		chromedp.Flag("proxy-server", "http://"+refuser.Addr().String()),
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND"),
		chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("webrtc-ip-handling-policy", "disable_non_proxied_udp"),
	)
	for k, v := range b.o.extraFlags {
		opts = append(opts, chromedp.Flag(k, v))
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	stop := func() {
		bcancel()
		acancel()
		refuser.Close()
	}
	t := time.AfterFunc(b.o.StartTimeout, bcancel)
	err = chromedp.Do(bctx)
	t.Stop()
	if err != nil {
		stop()
		return fmt.Errorf("browser: %s: %w", b.o.Binary.Path, err)
	}
	group, err := b.confineLocked(browserPid(bctx))
	if err != nil {
		stop()
		return err
	}
	b.ctx, b.stop, b.group = bctx, stop, group
	b.gen++
	return nil
}

// browserPid is the pid of the browser process of bctx.
func browserPid(bctx context.Context) int {
	return chromedp.FromContext(bctx).Browser.Process().Pid
}

// confineLocked moves the browser process pid and every process it
// started into a new cgroup bounded by Options.Memory, before any page
// loads: what they fork later (each page's renderer) starts inside it.
// Without a delegated cgroup the browser runs unbounded, with a warning
// (once), unless Options.RequireLimits.
func (b *Browser) confineLocked(pid int) (*cgroup.Group, error) {
	if b.o.Memory <= 0 {
		return nil, nil
	}
	if b.tree == nil {
		t, err := cgroup.Open(cgroup.Options{Path: b.o.Cgroup, Parent: b.o.CgroupParent})
		if err != nil {
			if b.o.RequireLimits {
				return nil, fmt.Errorf("%w: %w", ErrLimits, err)
			}
			if b.unbounded == "" {
				b.o.Log.Warn("the browser's memory is not bounded: no delegated cgroup", "err", err, "fix", cgroup.Remedy())
			}
			b.unbounded = "memory not bounded: " + err.Error()
			return nil, nil
		}
		b.tree = t
	}
	g, err := b.tree.New(cgroup.Limits{Memory: b.o.Memory, Pids: maxProcesses})
	if err != nil {
		return nil, fmt.Errorf("browser: its cgroup: %w", err)
	}
	// A process may fork while the tree is moved: again until a pass
	// finds none left outside.
	for range 20 {
		in, err := g.Pids()
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("browser: its cgroup: %w", err)
		}
		moved := 0
		for _, p := range processTree(pid) {
			if slices.Contains(in, p) {
				continue
			}
			if err := g.Add(p); err != nil {
				if processGone(p) {
					continue
				}
				g.Close()
				return nil, fmt.Errorf("browser: its cgroup: %w", err)
			}
			moved++
		}
		if moved == 0 {
			b.unbounded = ""
			return g, nil
		}
	}
	g.Close()
	return nil, errors.New("browser: its processes kept forking while they were moved into their cgroup")
}

// sandboxCause names the likely cause of a launch failure with the
// sandbox, from the process's identity, the kernel's settings and
// Chrome's words.
func sandboxCause(err error) string {
	msg := err.Error()
	var causes []string
	if os.Geteuid() == 0 {
		causes = append(causes, "running as root (Chrome refuses its sandbox as root)")
	}
	if v, _ := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); strings.TrimSpace(string(v)) == "1" {
		causes = append(causes, "unprivileged user namespaces restricted by AppArmor (apparmor_restrict_unprivileged_userns=1) and no AppArmor profile for this binary")
	}
	if v, _ := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); strings.TrimSpace(string(v)) == "0" {
		causes = append(causes, "unprivileged user namespaces disabled (kernel.unprivileged_userns_clone=0)")
	}
	if v, _ := os.ReadFile("/proc/sys/user/max_user_namespaces"); strings.TrimSpace(string(v)) == "0" {
		causes = append(causes, "user namespaces disabled (user.max_user_namespaces=0)")
	}
	if len(causes) == 0 {
		switch {
		case strings.Contains(msg, "No usable sandbox"), strings.Contains(msg, "namespace"):
			causes = append(causes, "unprivileged user namespaces restricted (by a seccomp filter, a container or a parent sandbox) and no setuid chrome-sandbox")
		default:
			causes = append(causes, "unknown; Chrome said: "+firstLine(msg))
		}
	}
	return strings.Join(causes, "; ")
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "[") {
			return truncate(l, 300)
		}
	}
	return truncate(strings.TrimSpace(s), 300)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// newRefuser listens on loopback and closes every connection at once:
// the proxy Chrome is given, so that a request the Fetch domain did not
// pause fails instead of reaching the network.
func newRefuser() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("browser: backstop proxy: %w", err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln, nil
}

// Probe starts the browser once, as the first request would (the sandbox
// first, the fallback per o.Sandbox), stops it, and reports the verdict:
// for codumentorctl check.
func Probe(o Options) (Verdict, error) {
	b := New(o)
	defer b.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.startLocked(context.Background())
	return b.verdict, err
}
