package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/integrations/browser"
)

// browsers holds the one headless browser the webretrieve and
// mermaid_render plugins share, made by the first of them to start.
type browsers struct {
	once sync.Once
	b    *browser.Browser
	err  error
	// port is the server's listening port: pages may not call it, also
	// with webretrieve.allow_private.
	port atomic.Uint32
}

// get returns the shared browser, made on first call; the process starts
// on the first request.
func (bs *browsers) get(s *server, cfg config.Config) (*browser.Browser, error) {
	bs.once.Do(func() {
		mode, err := browser.SandboxFor(cfg.Browser.RequireSandbox)
		if err != nil {
			bs.err = err
			return
		}
		bin, err := browser.FindChrome(cfg.Browser.Path)
		if err != nil {
			// Logged, not fatal: the tools and the route answer that the
			// browser is missing, and /readyz fails its check.
			s.log.Error("headless browser unavailable: fetch_urls and diagrams fail until it is installed", "err", err)
		}
		if _, p, err := net.SplitHostPort(cfg.Listen); err == nil {
			var n uint16
			fmt.Sscan(p, &n)
			bs.port.Store(uint32(n))
		}
		bs.b = browser.New(browser.Options{
			Binary:      bin,
			Sandbox:     mode,
			IdleTimeout: cfg.Browser.IdleTimeout.Std(),
			// Its own cgroup, in the sandboxes' delegated subtree.
			Memory:        int64(cfg.Browser.Memory),
			Cgroup:        cfg.Sandbox.Limits.Cgroup,
			CgroupParent:  config.CgroupParent,
			RequireLimits: cfg.Sandbox.RequireLimits,
			Mermaid:       cfg.MermaidRender.Script,
			Log:           s.log.Named("browser"),
			Launching:     browserLaunchRecorder(s.db),
			Policy: browser.Policy{
				AllowPrivate: cfg.WebRetrieve.AllowPrivate,
				ServerPorts:  func() []uint16 { return []uint16{uint16(bs.port.Load())} },
			},
		})
	})
	return bs.b, bs.err
}

// listening records the port the server listens on.
func (bs *browsers) listening(addr net.Addr) {
	if ap, err := netip.ParseAddrPort(addr.String()); err == nil {
		bs.port.Store(uint32(ap.Port()))
	}
}

// close stops the browser process, if one was made.
func (bs *browsers) close() {
	if bs.b != nil {
		bs.b.Close()
	}
}

func startWebRetrieve(ctx context.Context, s *server, cfg config.Config) error {
	b, err := s.browsers.get(s, cfg)
	if err != nil {
		return err
	}
	return s.engine.Register(auditedTool{browser.FetchTool{B: b}})
}

func startMermaidRender(ctx context.Context, s *server, cfg config.Config) error {
	b, err := s.browsers.get(s, cfg)
	if err != nil {
		return err
	}
	s.diagrams = b
	return s.engine.Register(auditedTool{browser.DiagramTool{B: b}})
}

// auditedTool runs a tool with its call's user and conversation in the
// context (audit.ForConversation), for what it records: the browser's
// launch.
type auditedTool struct{ agentcore.Tool }

func (t auditedTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	return t.Tool.Run(audit.ForConversation(ctx, c.User, c.Conversation), c)
}

// browserLaunchRecorder is the browser's Launching hook: every start of
// the headless browser is recorded before it runs, with its Chrome
// sandbox verdict, for the request that ctx names (or the server).
func browserLaunchRecorder(db *gorm.DB) func(context.Context, browser.Launch) error {
	return func(ctx context.Context, l browser.Launch) error {
		user, conv := audit.ConversationOf(ctx)
		if user == "" {
			user = "server"
		}
		sandbox := "on"
		if !l.Sandboxed {
			sandbox = "off"
		}
		return audit.Write(ctx, db, audit.Entry{Kind: audit.KindBrowserLaunch, User: user, Data: map[string]string{
			"conversation": conv, "binary": l.Binary, "sandbox": sandbox, "detail": l.Detail,
		}})
	}
}

// browserSandboxRemedy is what closes the browser's run without Chrome's
// sandbox.
const browserSandboxRemedy = "run the server as an unprivileged user where unprivileged user namespaces are allowed (or give this binary an AppArmor profile that allows them), and set browser.require_sandbox: true so that it never starts without"

// browserChecks: the browser binary is found (its verdict, once it
// started), and for mermaid_render the mermaid script is readable.
func browserChecks(ctx context.Context, s *server, cfg config.Config) []api.Check {
	bin, err := browser.FindChrome(cfg.Browser.Path)
	c := api.Check{Name: "browser", OK: err == nil}
	if err != nil {
		c.Detail, c.Remedy = err.Error(), "apt-get install chromium (scripts/install-prereqs), or set browser.path"
	} else {
		v := browser.Verdict{}
		if s.browsers.b != nil {
			v = s.browsers.b.Verdict()
		}
		c.Detail = fmt.Sprintf("%s (%s); %s", bin.Path, bin.Source, v)
		if v.Decided && !v.Sandboxed {
			c.Warning, c.Remedy = true, browserSandboxRemedy
		}
		if s.browsers.b != nil {
			if why := s.browsers.b.Unbounded(); why != "" {
				c.Detail += "; " + why
				c.Warning, c.Remedy = true, strings.TrimPrefix(c.Remedy+"; ", "; ")+config.CgroupRemedy()
			}
		}
	}
	return []api.Check{c}
}

func mermaidChecks(ctx context.Context, s *server, cfg config.Config) []api.Check {
	out := browserChecks(ctx, s, cfg)
	script := cfg.MermaidRender.Script
	if script == "" {
		script = browser.DefaultMermaid
	}
	c := api.Check{Name: "mermaid", OK: true, Detail: script}
	if f, err := os.Open(script); err != nil {
		c.OK, c.Remedy = false, "run scripts/install-prereqs (installs mermaid under /var/cache/codumentor-prereqs), or set mermaid_render.script"
	} else {
		f.Close()
	}
	return append(out, c)
}
