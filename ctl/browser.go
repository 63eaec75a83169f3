package ctl

import (
	"context"
	"fmt"
	"slices"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/integrations/browser"
	"github.com/codumentor/codumentor/sandboxkit"
)

// browserChecks adds the "browser" row: which Chrome binary the
// webretrieve and mermaid_render plugins would run (browser.path, a
// Playwright build, or PATH) and the sandbox verdict of starting it once,
// as the server's first request would. Required (a failure) only when
// --instance enables one of those plugins; otherwise a missing browser
// is a warning.
func browserChecks(ctx context.Context, o checkOptions, r *checkReport) {
	if r.Report == nil || slices.ContainsFunc(r.Checks, func(c sandboxkit.Check) bool { return !c.OK }) {
		return
	}
	cfg := config.Default()
	if o.instance != "" {
		if c, err := (config.Instance{Dir: o.instance}).Load(""); err == nil {
			cfg = c
		}
	}
	required := cfg.Enabled(config.PluginWebRetrieve) || cfg.Enabled(config.PluginMermaidRender)
	c := sandboxkit.Check{Name: "browser", OK: true}
	// A problem is a failure when a plugin needs the browser, a warning
	// otherwise.
	problem := func(detail, remedy string) {
		c.Detail, c.Remedy = detail, remedy
		c.OK, c.Warning = !required, !required
	}
	mode, err := browser.SandboxFor(cfg.Browser.RequireSandbox)
	bin, ferr := browser.FindChrome(cfg.Browser.Path)
	switch {
	case err != nil:
		problem(err.Error(), "unset "+browser.EnvSandbox+", or set it to 1, or to 0 without browser.require_sandbox")
	case ferr != nil:
		problem(ferr.Error()+" (needed by the webretrieve and mermaid_render plugins)", "apt-get install chromium (scripts/install-prereqs), or set browser.path")
	default:
		v, err := browser.Probe(browser.Options{Binary: bin, Sandbox: mode,
			Memory: int64(cfg.Browser.Memory), Cgroup: cfg.Sandbox.Limits.Cgroup, CgroupParent: config.CgroupParent, RequireLimits: cfg.Sandbox.RequireLimits})
		switch {
		case err != nil:
			problem(fmt.Sprintf("%s (%s) does not start: %v", bin.Path, bin.Source, err), "see the error; browser.require_sandbox (and "+browser.EnvSandbox+"=1) forbid the fallback to --no-sandbox")
		case !v.Sandboxed:
			c.Detail, c.Warning = fmt.Sprintf("%s (%s): %s", bin.Path, bin.Source, v), true
			c.Remedy = "run the server as an unprivileged user where unprivileged user namespaces are allowed (or give this binary an AppArmor profile that allows them), and set browser.require_sandbox: true so that it never starts without"
		default:
			c.Detail = fmt.Sprintf("%s (%s): %s", bin.Path, bin.Source, v)
		}
	}
	r.Checks = append(r.Checks, c)
}
