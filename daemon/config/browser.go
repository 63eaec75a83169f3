package config

import "time"

// PluginWebRetrieve gives the agent the fetch_urls tool: pages read by
// headless Chromium (browser section), destinations checked by the
// request policy (webretrieve section).
const PluginWebRetrieve = "webretrieve"

// PluginMermaidRender gives the agent the render_diagram tool and serves
// POST /api/v1/render/diagram (mermaid in headless Chromium).
const PluginMermaidRender = "mermaid_render"

// Browser configures the headless Chromium of the webretrieve and
// mermaid_render plugins. CODUMENTOR_CHROME_SANDBOX (1: require Chrome's
// sandbox, 0: run without it) is read from the environment.
type Browser struct {
	// Path is the Chrome or Chromium binary; empty: a Playwright-managed
	// build under ~/.cache/ms-playwright/, else chromium or google-chrome
	// on PATH.
	Path string `yaml:"path"`
	// IdleTimeout stops the browser process after this long without a
	// request (default 2m).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// RequireSandbox refuses to start the browser without Chrome's own
	// sandbox, instead of falling back to --no-sandbox with a warning
	// (as CODUMENTOR_CHROME_SANDBOX=1 does).
	RequireSandbox bool `yaml:"require_sandbox"`
	// Memory caps the memory of the browser's processes together, in
	// their own cgroup (default 2GiB): a page that crosses it ends its
	// request and the browser restarts. 0: no cgroup.
	Memory Size `yaml:"memory"`
}

// WebRetrieve configures the webretrieve plugin.
type WebRetrieve struct {
	// AllowPrivate lets pages reach loopback, private addresses (an
	// intranet) and this host's own. Link-local and cloud metadata
	// addresses, and the server's own port on any address, stay
	// refused.
	AllowPrivate bool `yaml:"allow_private"`
}

// MermaidRender configures the mermaid_render plugin.
type MermaidRender struct {
	// Script is mermaid.min.js (default: the version scripts/install-prereqs
	// installs under /var/cache/codumentor-prereqs).
	Script string `yaml:"script"`
}

// Browser's defaults.
const (
	browserIdleTimeout = Duration(2 * time.Minute)
	browserMemory      = Size(2 << 30)
)
