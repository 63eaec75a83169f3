// Package config is the server's configuration: an instance directory
// holding config.yaml, data/ (the SQLite database), workspaces/ and logs/,
// and the YAML schema of config.yaml with its defaults.
//
// The instance directory holds password hashes, encrypted secrets and
// copies of users' files, so it and every directory in it must be
// private to the server's user (0700). Load refuses a looser mode and
// says how to fix it, rather than run with it.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/approvalrule"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/externalagent"
	"github.com/codumentor/codumentor/integrations/ldap"
	"github.com/codumentor/codumentor/integrations/llm"
	"github.com/codumentor/codumentor/sandboxkit/randid"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// EnvJWTSecret overrides auth.jwt_secret, so that the secret can stay out
// of the file.
const EnvJWTSecret = "CODUMENTOR_JWT_SECRET"

// envOverrides are the environment variables that override a key of
// config.yaml when set.
var envOverrides = []struct {
	name string
	key  func(*Config) *string
}{
	{EnvJWTSecret, func(c *Config) *string { return &c.Auth.JWTSecret }},
	{"CODUMENTOR_LLM_BASE_URL", func(c *Config) *string { return &c.LLM.BaseURL }},
	{"CODUMENTOR_LLM_MODEL", func(c *Config) *string { return &c.LLM.Model }},
	{"CODUMENTOR_LLM_API_KEY", func(c *Config) *string { return &c.LLM.APIKey }},
}

// PluginWorkspaceIsolation runs the agent's shell commands and file tools
// in a per-conversation bubblewrap sandbox over a copy-on-write workspace.
const PluginWorkspaceIsolation = "workspace_isolation"

// PluginExternalAgent offers the model the external_agent tool: the
// coding-agent CLIs of external_agents, run in the conversation's sandbox.
const PluginExternalAgent = "external_agent"

// knownPlugins are the plugins Validate accepts.
var knownPlugins = []string{PluginWorkspaceIsolation, PluginExternalAgent, PluginMCP, PluginOffice, PluginWebRetrieve, PluginMermaidRender}

// Config is config.yaml. Zero values mean the defaults of Default.
type Config struct {
	// Listen is the HTTP address; loopback unless TLS or InsecureListen.
	Listen string `yaml:"listen"`
	// InsecureListen allows a non-loopback Listen without TLS (e.g. behind
	// a TLS-terminating proxy on another host). Tokens and passwords then
	// cross the network in the clear.
	InsecureListen bool `yaml:"insecure_listen"`
	// TrustedProxies are the addresses or CIDR ranges of reverse proxies
	// (e.g. the TLS-terminating one of an insecure_listen setup) whose
	// X-Forwarded-For is believed: the client, whose address the login
	// limits count, is the right-most address in it that is not a trusted
	// proxy. Empty: the TCP peer is the client.
	TrustedProxies []string  `yaml:"trusted_proxies"`
	TLS            TLSConfig `yaml:"tls"`
	Auth           Auth      `yaml:"auth"`
	LLM            LLM       `yaml:"llm"`
	Sandbox        Sandbox   `yaml:"sandbox"`
	Office         Office    `yaml:"office"`
	Retrieval      Retrieval `yaml:"retrieval"`
	// Plugins are enabled by name, in order.
	Plugins []string `yaml:"plugins"`
	Log     Log      `yaml:"log"`
	Server  Server   `yaml:"server"`
	// Store configures the instance database.
	Store Store `yaml:"store"`
	// Cluster configures this server as one node of several on a
	// PostgreSQL store.
	Cluster Cluster `yaml:"cluster"`
	// Audit configures the audit log.
	Audit Audit `yaml:"audit"`
	// Metrics configures GET /metrics.
	Metrics Metrics `yaml:"metrics"`
	// Quotas limit users' model tokens (quotas.go).
	Quotas Quotas `yaml:"quotas"`
	// ExternalAgents are the external_agent plugin's agents.
	ExternalAgents []externalagent.Config `yaml:"external_agents"`
	// AllowUnsandboxedExternalAgents lets an agent with sandbox_tier 0
	// run unconfined on the host while workspace isolation is enabled;
	// without it such an agent stops the server from starting.
	AllowUnsandboxedExternalAgents bool `yaml:"allow_unsandboxed_external_agents"`
	// SubagentIsolation offers the model the delegate tool: "shared" (the
	// subagent works in the conversation's workspace) or "isolated" (its
	// own sandbox and layer; its changes come back as a diff). Empty: no
	// delegate tool.
	SubagentIsolation string `yaml:"subagent_isolation"`
	// MCP configures the mcp plugin's servers (integrations.go).
	MCP MCP `yaml:"mcp"`
	// Investigation allows host read-only conversations (integrations.go).
	Investigation Investigation `yaml:"investigation"`
	// Repositories configures repositories and the push gateway.
	Repositories Repositories `yaml:"repositories"`
	// Browser, WebRetrieve and MermaidRender configure headless Chromium
	// and its two plugins (browser.go).
	Browser       Browser       `yaml:"browser"`
	WebRetrieve   WebRetrieve   `yaml:"webretrieve"`
	MermaidRender MermaidRender `yaml:"mermaid_render"`
}

// Repositories configures repositories and the push gateway.
type Repositories struct {
	// ProtectedBranches are never pushed to (default main, master).
	ProtectedBranches []string `yaml:"protected_branches"`
	// MaxPushBytes bounds a pushed patch (default 16 MiB).
	MaxPushBytes int64 `yaml:"max_push_bytes"`
	// MaxSnapshotBytes bounds the disk one snapshot's checkout takes,
	// and one project setup's layer, measured while they run (default
	// 2 GiB): past it the checkout or setup is stopped and removed, and
	// conversations on that commit are refused with the reason.
	MaxSnapshotBytes Size `yaml:"max_snapshot_bytes"`
	// SnapshotHistory is how many commits of history a snapshot's .git
	// holds, for git inside the workspace (default 50; 0: snapshots have
	// no .git). It counts in max_snapshot_bytes.
	SnapshotHistory int `yaml:"snapshot_history"`
	// DefaultAccess is the access entries a new repository gets: "all"
	// (every signed-in user may read and push, the default) or "admins"
	// (none: only administrators until they add entries).
	DefaultAccess string `yaml:"default_access"`
}

// Server bounds what HTTP clients can hold open. Zero counts are derived
// from the process's descriptor limit (RLIMIT_NOFILE) at start.
type Server struct {
	// MaxConnections caps open client connections; beyond it the server
	// stops accepting until one closes (default: half the descriptor
	// limit, the rest is for the database, logs and sandboxes).
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerIP caps one client address's connections; more are
	// closed at once (default: a quarter of max_connections). It does not
	// apply to trusted_proxies, whose clients all have their address.
	MaxConnectionsPerIP int `yaml:"max_connections_per_ip"`
	// HeaderTimeout closes a connection that has not sent a request
	// header in this time (default 10s).
	HeaderTimeout Duration `yaml:"header_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long (default
	// 2m).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxStreamsPerUser caps one user's open event streams (default 16).
	MaxStreamsPerUser int `yaml:"max_streams_per_user"`
	// MaxStreams caps all open event streams (default: a quarter of
	// max_connections).
	MaxStreams int `yaml:"max_streams"`
	// MaxBodyBytes caps the bytes of request bodies the server holds in
	// memory at once, over all connections (default 32MiB); past it a
	// request answers 503 busy. Uploads are streamed to disk and count
	// only their buffers.
	MaxBodyBytes Size `yaml:"max_body_bytes"`
}

// TLSConfig serves HTTPS when both files are set.
type TLSConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Enabled reports whether TLS is configured.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" && t.KeyFile != "" }

// Auth configures logins, tokens and the key of secrets at rest.
type Auth struct {
	// JWTSecret signs tokens and derives the key that encrypts secrets at
	// rest. Without it, tokens die with the process and secrets are stored
	// in plaintext (logged as an error at every start).
	JWTSecret string `yaml:"jwt_secret"`
	// PreviousJWTSecrets still verify tokens and decrypt secrets during a
	// rotation (codumentorctl secrets rotate).
	PreviousJWTSecrets []string `yaml:"previous_jwt_secrets"`
	// TokenTTL is how long a login token is valid (default 12h).
	TokenTTL Duration `yaml:"token_ttl"`
	// LDAP, when its url is set, authenticates users not found locally.
	LDAP ldap.Config `yaml:"ldap"`
	// LoginLimits bound failed logins per name and per address.
	LoginLimits LoginLimits `yaml:"login_limits"`
	// OIDC are the OpenID providers users may sign in with (oidc.go).
	OIDC []OIDCProvider `yaml:"oidc"`
	// AdminGroups make their members administrators, evaluated at each
	// sign-in (and when a local membership changes).
	AdminGroups []string `yaml:"admin_groups"`
}

// LoginLimits is auth.login_limits: how failed logins slow down a name
// and refuse an address (auth.LimitOptions says how they combine).
type LoginLimits struct {
	// UserFailures are the failures of one name within Window before
	// its attempts from failing addresses are slowed down (default 10).
	UserFailures int `yaml:"user_failures"`
	// UserDelay is the first delay, doubling with each further failure
	// up to MaxUserDelay (defaults 1s and 1m).
	UserDelay    Duration `yaml:"user_delay"`
	MaxUserDelay Duration `yaml:"max_user_delay"`
	// AddressFailures are the failures of one address within Window,
	// whatever the names, before its logins are refused (default 30).
	AddressFailures int `yaml:"address_failures"`
	// Window is the sliding window failures count in (default 15m).
	Window Duration `yaml:"window"`
}

// LLM is the OpenAI-compatible endpoint the agent talks to.
type LLM struct {
	BaseURL string   `yaml:"base_url"`
	Model   string   `yaml:"model"`
	APIKey  string   `yaml:"api_key"`
	Timeout Duration `yaml:"timeout"`
	// AllowedEndpoints are the base URLs users' model profiles may name
	// (see endpoints.go); empty: no profiles, only base_url.
	AllowedEndpoints []string `yaml:"allowed_endpoints"`
	// SystemPrompt is the template of the system message of every model
	// request (Go text/template over agentcore.PromptData); SystemPromptFile
	// names a file holding it instead. Neither: agentcore's default.
	SystemPrompt     string `yaml:"system_prompt"`
	SystemPromptFile string `yaml:"system_prompt_file"`
	// Sampling (temperature, top_p, max_tokens, stop): unset ones are not
	// sent. A model profile's own replace them.
	Sampling llm.Sampling `yaml:",inline"`
	// ToolCalls is how the model calls tools: native (default), text or
	// auto (agentcore.ToolCallMode); a model profile may set its own.
	ToolCalls agentcore.ToolCallMode `yaml:"tool_calls"`
	// MaxSteps bounds a turn's model calls (default 50).
	MaxSteps int `yaml:"max_steps"`
	// RepeatLimit stops a turn at the same tool call with the same
	// arguments this many times in a row (default 3, at least 2).
	RepeatLimit int `yaml:"repeat_limit"`
	// ContextWindow is the model's context length in tokens; 0: read
	// from the endpoint. A model profile's own replaces it.
	ContextWindow int `yaml:"context_window"`
}

// Checkpoints bound one conversation's workspace checkpoints.
type Checkpoints struct {
	MaxCount int  `yaml:"max_count"` // distinct workspace states kept (default 50)
	MaxBytes Size `yaml:"max_bytes"` // bytes of their file copies, each counted once (default 1GiB)
}

// Sandbox configures the workspace_isolation plugin.
type Sandbox struct {
	// Bwrap is the bubblewrap binary; empty means "bwrap" on PATH.
	Bwrap string `yaml:"bwrap"`
	// Seccomp is the filter mode: log (default), enforce or off.
	Seccomp seccomp.Mode `yaml:"seccomp"`
	// WorkspaceTTL removes a conversation's workspace layer unused this
	// long (default 30 days).
	WorkspaceTTL Duration `yaml:"workspace_ttl"`
	// GCInterval is how often the workspace GC job runs (default 1h).
	GCInterval Duration `yaml:"gc_interval"`
	// ShellAlwaysAllow runs shell commands without asking their owner.
	ShellAlwaysAllow bool `yaml:"shell_always_allow"`
	// Checkpoints bound each conversation's workspace checkpoints (the
	// undo of a turn, edit, regenerate, fork): past either the oldest go.
	Checkpoints Checkpoints `yaml:"checkpoints"`
	// ApprovalTimeout is how long an approval waits (default 10 min).
	ApprovalTimeout Duration `yaml:"approval_timeout"`
	// ApprovalRules approve the shell commands they match without asking
	// (exact commands and argv prefixes; see daemon/approvalrule).
	ApprovalRules []approvalrule.Rule `yaml:"approval_rules"`
	// DefaultRules adds approvalrule.Defaults, the ready read-only set
	// (ls, cat, rg, git status, ...), to ApprovalRules.
	DefaultRules bool `yaml:"default_rules"`
	// UserRules are the rules within which users may add their own
	// (/api/v1/me/approval-rules, the approval card's "always allow
	// commands like this"); a user's rule also takes the exceptions of
	// the one it is within. Empty: users add none.
	UserRules []approvalrule.Rule `yaml:"user_rules"`
	// CommandTimeout bounds a shell command that sends no timeout
	// (default 10 min); MaxCommandTimeout bounds the timeout one may send
	// (default 30 min).
	CommandTimeout    Duration `yaml:"command_timeout"`
	MaxCommandTimeout Duration `yaml:"max_command_timeout"`
	// OutputKeep bounds the output of one shell command kept whole, for
	// read_file, outside the workspace (default 16MiB); OutputKeepTotal
	// bounds a conversation's kept outputs, the oldest dropped first
	// (default 128MiB).
	OutputKeep      Size `yaml:"output_keep"`
	OutputKeepTotal Size `yaml:"output_keep_total"`
	// Limits bound each sandbox's processes, memory, CPU, tmpfs and disk
	// (see limits.go for the keys and defaults).
	Limits Limits `yaml:"limits"`
	// RequireLimits refuses to start sandboxes when no delegated cgroup
	// can enforce the process, memory and CPU limits, instead of running
	// them with rlimits only.
	RequireLimits bool `yaml:"require_limits"`
	// Egress caps each egress proxy (see egress.go).
	Egress Egress `yaml:"egress"`
}

// Metrics configures GET /metrics.
type Metrics struct {
	// Token, if set, is the bearer token a scrape must send; empty:
	// /metrics is public (restrict it at the proxy, see the README).
	Token string `yaml:"token"`
}

// Audit configures the audit log.
type Audit struct {
	// HeadInterval is how often the server writes the audit log's head
	// (the newest record's number and MAC) to its log, besides at
	// shutdown, for codumentorctl audit verify --head (default 15m).
	HeadInterval Duration `yaml:"head_interval"`
}

// Store configures the database: the instance's SQLite file (the
// default), or PostgreSQL, which several servers can share.
type Store struct {
	// BusyTimeout is how long a write waits for another connection's
	// write lock (codumentorctl's, a backup's, another server's) before
	// the request answers 503 storage_busy (default 5s).
	BusyTimeout Duration `yaml:"busy_timeout"`
	// Backend is sqlite (default: data/codumentor.db in the instance)
	// or postgres (Postgres).
	Backend string `yaml:"backend"`
	// Postgres is the database of backend postgres.
	Postgres Postgres `yaml:"postgres"`
}

// Cluster configures a node of a deployment of several servers on one
// PostgreSQL database (store.backend postgres); a server on SQLite is
// the only one and ignores it.
type Cluster struct {
	// Node is this node's name, unique in the deployment (default: the
	// instance's own, data/node_id, made at the first start).
	Node string `yaml:"node"`
	// URL is where the other nodes reach this one's API, for the
	// requests they forward to the home node of a conversation
	// (default: the address it listens on, if that is not a wildcard).
	URL string `yaml:"url"`
	// Heartbeat is how often the node renews its record (default 2s);
	// LostAfter how old that record may be before the others take the
	// node to be lost (default 10s).
	Heartbeat Duration `yaml:"heartbeat"`
	LostAfter Duration `yaml:"lost_after"`
	// DrainTimeout is how long a node that shuts down (SIGTERM) waits
	// for its running turns to end before it interrupts them (default
	// 2m).
	DrainTimeout Duration `yaml:"drain_timeout"`
}

// Postgres says how to reach the PostgreSQL database.
type Postgres struct {
	// DSN is a connection string without a password:
	// postgres://codumentor@db.example:5432/codumentor?sslmode=verify-full
	// or host=… dbname=… pairs.
	DSN string `yaml:"dsn"`
	// PasswordEnv names the environment variable that holds the
	// password; PasswordFile is a file that does (its first line). At
	// most one; neither for a database that needs none (peer or
	// certificate authentication).
	PasswordEnv  string `yaml:"password_env"`
	PasswordFile string `yaml:"password_file"`
	// MaxConns bounds the server's connections (default 16).
	MaxConns int `yaml:"max_conns"`
}

// Database is the store.Config of the database that c and i name, the
// PostgreSQL password read from where c says.
func (c Store) Database(i Instance) (store.Config, error) {
	sc := store.Config{Backend: c.Backend, BusyTimeout: c.BusyTimeout.Std(), MaxConns: c.Postgres.MaxConns}
	if c.Backend != store.BackendPostgres {
		sc.Backend, sc.Path = store.BackendSQLite, i.Database()
		return sc, nil
	}
	sc.DSN = c.Postgres.DSN
	switch p := c.Postgres; {
	case p.PasswordEnv != "":
		sc.Password = os.Getenv(p.PasswordEnv)
		if sc.Password == "" {
			return sc, fmt.Errorf("store.postgres.password_env: the environment variable %s is not set", p.PasswordEnv)
		}
	case p.PasswordFile != "":
		b, err := os.ReadFile(p.PasswordFile)
		if err != nil {
			return sc, fmt.Errorf("store.postgres.password_file: %w", err)
		}
		sc.Password, _, _ = strings.Cut(string(b), "\n")
		sc.Password = strings.TrimSuffix(sc.Password, "\r")
		if sc.Password == "" {
			return sc, fmt.Errorf("store.postgres.password_file %s is empty", p.PasswordFile)
		}
	}
	return sc, nil
}

// Log configures logs/codumentor.log (and stderr).
type Log struct {
	// Level is trace, debug, info (default), warn or error.
	Level string `yaml:"level"`
	// Format is text (default) or json: one JSON object a line, for a
	// log shipper.
	Format string `yaml:"format"`
}

// The log formats.
const (
	LogText = "text"
	LogJSON = "json"
)

// Duration is a time.Duration written as "30s", "12h", "720h" or "30d"
// in YAML (see ParseDuration).
type Duration time.Duration

// UnmarshalYAML reads a duration as ParseDuration does.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 30s, 12h, 720h or 30d", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// ParseDuration is time.ParseDuration plus a leading whole number of days
// ("30d", "1d12h"), the unit operators write for retention periods. A day
// is 24 hours.
func ParseDuration(s string) (time.Duration, error) {
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.ParseUint(days, 10, 16)
	if err != nil || days == "" || days[0] == '+' {
		return 0, fmt.Errorf("time: invalid duration %q", s)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest == "" {
		return d, nil
	}
	r, err := time.ParseDuration(rest)
	if err != nil || r < 0 {
		return 0, fmt.Errorf("time: invalid duration %q", s)
	}
	return d + r, nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Std is the duration as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Default returns the embedded defaults: loopback, SQLite, workspace
// isolation on, seccomp in log mode.
func Default() Config {
	return Config{
		Listen: "127.0.0.1:8080",
		Auth: Auth{TokenTTL: Duration(12 * time.Hour), LoginLimits: LoginLimits{
			UserFailures: 10, UserDelay: Duration(time.Second), MaxUserDelay: Duration(time.Minute),
			AddressFailures: 30, Window: Duration(15 * time.Minute),
		}},
		LLM:     LLM{Timeout: Duration(2 * time.Minute), ToolCalls: agentcore.ToolCallsNative, MaxSteps: 50, RepeatLimit: 3},
		Plugins: []string{PluginWorkspaceIsolation},
		Sandbox: Sandbox{
			Seccomp:         seccomp.Log,
			WorkspaceTTL:    Duration(30 * 24 * time.Hour),
			GCInterval:      Duration(time.Hour),
			ApprovalTimeout: Duration(10 * time.Minute),
			Limits:          DefaultLimits(),
			Egress:          DefaultEgress(),

			CommandTimeout:    Duration(10 * time.Minute),
			MaxCommandTimeout: Duration(30 * time.Minute),
			OutputKeep:        16 << 20,
			OutputKeepTotal:   128 << 20,
			Checkpoints:       Checkpoints{MaxCount: 50, MaxBytes: 1 << 30},
		},
		Log:          Log{Level: "info", Format: LogText},
		Store:        Store{BusyTimeout: Duration(5 * time.Second)},
		Cluster:      Cluster{Heartbeat: Duration(2 * time.Second), LostAfter: Duration(10 * time.Second), DrainTimeout: Duration(2 * time.Minute)},
		Audit:        Audit{HeadInterval: Duration(15 * time.Minute)},
		Repositories: Repositories{ProtectedBranches: []string{"main", "master"}, MaxPushBytes: 16 << 20, MaxSnapshotBytes: 2 << 30, SnapshotHistory: 50, DefaultAccess: "all"},
		Office:       DefaultOffice(),
		Server: Server{
			HeaderTimeout:     Duration(10 * time.Second),
			IdleTimeout:       Duration(2 * time.Minute),
			MaxStreamsPerUser: 16,
			MaxBodyBytes:      32 << 20,
		},
		Browser: Browser{IdleTimeout: browserIdleTimeout, Memory: browserMemory},
	}
}

// Parse reads config.yaml's content over the defaults. Unknown keys are
// errors: a misspelt key would otherwise be silently ignored.
func Parse(b []byte) (Config, error) {
	c := Default()
	if len(bytes.TrimSpace(b)) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return Config{}, err
		}
	}
	return c, c.Validate()
}

// Validate checks values the YAML types cannot, naming the key at fault.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen: %q is not host:port", c.Listen))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, errors.New("tls: set both cert_file and key_file, or neither"))
	}
	if s := c.Auth.JWTSecret; s != "" && len(s) < 32 {
		errs = append(errs, fmt.Errorf("auth.jwt_secret: %d bytes is too short; use at least 32 random bytes (codumentorctl secrets rotate writes one)", len(s)))
	}
	for i, s := range c.Auth.PreviousJWTSecrets {
		if s == "" {
			errs = append(errs, fmt.Errorf("auth.previous_jwt_secrets[%d] is empty", i))
		}
	}
	if _, err := c.Proxies(); err != nil {
		errs = append(errs, err)
	}
	if c.Auth.TokenTTL <= 0 {
		errs = append(errs, errors.New("auth.token_ttl must be positive"))
	}
	if c.Audit.HeadInterval <= 0 {
		errs = append(errs, errors.New("audit.head_interval must be positive"))
	}
	if c.Store.BusyTimeout <= 0 {
		errs = append(errs, errors.New("store.busy_timeout must be positive"))
	}
	errs = append(errs, c.Store.validate()...)
	if c.Cluster.Node != "" && !validNodeName(c.Cluster.Node) {
		errs = append(errs, fmt.Errorf("cluster.node %q: use 1 to 64 of a-z, A-Z, 0-9, '.', '_' and '-'", c.Cluster.Node))
	}
	if c.Cluster.URL != "" {
		if u, err := url.Parse(c.Cluster.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" && u.Path != "/" {
			errs = append(errs, fmt.Errorf("cluster.url %q: give http(s)://host:port of this node's API", c.Cluster.URL))
		}
	}
	if c.Cluster.Heartbeat <= 0 || c.Cluster.LostAfter < 2*c.Cluster.Heartbeat {
		errs = append(errs, errors.New("cluster.heartbeat must be positive and cluster.lost_after at least two heartbeats"))
	}
	if c.Cluster.DrainTimeout < 0 {
		errs = append(errs, errors.New("cluster.drain_timeout must not be negative"))
	}
	if l := c.Auth.LoginLimits; l.UserFailures <= 0 || l.AddressFailures <= 0 || l.UserDelay <= 0 || l.MaxUserDelay < l.UserDelay || l.Window <= 0 {
		errs = append(errs, errors.New("auth.login_limits: user_failures, address_failures, user_delay and window must be positive, max_user_delay at least user_delay"))
	}
	if c.Auth.LDAP.URL != "" {
		if err := c.Auth.LDAP.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.Auth.validateOIDC()...)
	if _, err := seccomp.ParseMode(string(c.Sandbox.Seccomp)); err != nil {
		errs = append(errs, fmt.Errorf("sandbox.seccomp: %w", err))
	}
	if c.Sandbox.WorkspaceTTL <= 0 {
		errs = append(errs, errors.New("sandbox.workspace_ttl must be positive"))
	}
	if c.Sandbox.GCInterval <= 0 {
		errs = append(errs, errors.New("sandbox.gc_interval must be positive"))
	}
	if s := c.Sandbox; s.CommandTimeout <= 0 || s.MaxCommandTimeout < s.CommandTimeout {
		errs = append(errs, errors.New("sandbox.command_timeout must be positive, sandbox.max_command_timeout at least command_timeout"))
	}
	if s := c.Sandbox; s.OutputKeep <= 0 || s.OutputKeepTotal < s.OutputKeep {
		errs = append(errs, errors.New("sandbox.output_keep must be positive, sandbox.output_keep_total at least output_keep"))
	}
	if n := c.Sandbox.Checkpoints.MaxCount; n < 1 || n > 1000 {
		errs = append(errs, fmt.Errorf("sandbox.checkpoints.max_count is %d; use 1 to 1000", n))
	}
	if c.Sandbox.Checkpoints.MaxBytes <= 0 {
		errs = append(errs, errors.New("sandbox.checkpoints.max_bytes must be positive, such as 1GiB"))
	}
	errs = append(errs, c.Sandbox.Limits.validate()...)
	for i, r := range c.Sandbox.ApprovalRules {
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("sandbox.approval_rules[%d]: %w", i, err))
		}
	}
	for i, r := range c.Sandbox.UserRules {
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("sandbox.user_rules[%d]: %w", i, err))
		}
	}
	errs = append(errs, c.Sandbox.Egress.validate()...)
	errs = append(errs, c.Office.validate()...)
	errs = append(errs, c.Quotas.validate()...)
	errs = append(errs, c.Retrieval.validate(c.LLM.BaseURL)...)
	errs = append(errs, c.LLM.validateEndpoints()...)
	if err := c.LLM.Sampling.Check(); err != nil {
		errs = append(errs, err)
	}
	if err := llm.CheckContextWindow(c.LLM.ContextWindow, c.LLM.Sampling.MaxTokens); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.LLM.Prompt(); err != nil {
		errs = append(errs, err)
	}
	if _, err := agentcore.ParseToolCallMode(string(c.LLM.ToolCalls)); err != nil {
		errs = append(errs, fmt.Errorf("llm.tool_calls: %w", err))
	}
	if c.LLM.MaxSteps < 1 {
		errs = append(errs, fmt.Errorf("llm.max_steps must be at least 1, got %d", c.LLM.MaxSteps))
	}
	if c.LLM.RepeatLimit < 2 {
		errs = append(errs, fmt.Errorf("llm.repeat_limit must be at least 2 (a call repeats from its second time), got %d", c.LLM.RepeatLimit))
	}
	for _, p := range c.Plugins {
		if !slices.Contains(knownPlugins, p) {
			errs = append(errs, fmt.Errorf("plugins: unknown plugin %q (known: %s)", p, strings.Join(knownPlugins, ", ")))
		}
	}
	switch c.SubagentIsolation {
	case "", agentcore.SubagentsShared, agentcore.SubagentsIsolated:
	default:
		errs = append(errs, fmt.Errorf("subagent_isolation: %q is not %s or %s", c.SubagentIsolation, agentcore.SubagentsShared, agentcore.SubagentsIsolated))
	}
	if err := externalagent.Validate(c.ExternalAgents); err != nil {
		errs = append(errs, err)
	}
	if len(c.ExternalAgents) > 0 && !c.Enabled(PluginExternalAgent) {
		errs = append(errs, fmt.Errorf("external_agents: configured, but the %s plugin is not enabled: add it to plugins", PluginExternalAgent))
	}
	errs = append(errs, c.validateIntegrations()...)
	if c.Browser.IdleTimeout < 0 {
		errs = append(errs, errors.New("browser.idle_timeout must not be negative (0: the default, 2m)"))
	}
	if c.Browser.Memory != 0 && c.Browser.Memory < 256<<20 {
		errs = append(errs, errors.New("browser.memory must be 0 (no cgroup) or at least 256MiB: Chromium does not start in less"))
	}
	if c.Server.MaxConnections < 0 || c.Server.MaxConnectionsPerIP < 0 || c.Server.MaxStreams < 0 || c.Server.MaxStreamsPerUser <= 0 {
		errs = append(errs, errors.New("server: max_connections, max_connections_per_ip and max_streams must be 0 (derived) or positive, max_streams_per_user positive"))
	}
	if c.Server.MaxBodyBytes < 1<<20 {
		errs = append(errs, errors.New("server.max_body_bytes must be at least 1MiB (default 32MiB)"))
	}
	if c.Server.HeaderTimeout <= 0 || c.Server.IdleTimeout <= 0 {
		errs = append(errs, errors.New("server.header_timeout and server.idle_timeout must be positive"))
	}
	if c.Repositories.MaxPushBytes <= 0 {
		errs = append(errs, errors.New("repositories.max_push_bytes must be positive"))
	}
	if c.Repositories.MaxSnapshotBytes <= 0 {
		errs = append(errs, errors.New("repositories.max_snapshot_bytes must be positive"))
	}
	switch c.Repositories.DefaultAccess {
	case "", "all", "admins":
	default:
		errs = append(errs, fmt.Errorf("repositories.default_access: %q is not all or admins", c.Repositories.DefaultAccess))
	}
	for _, g := range c.Auth.AdminGroups {
		if strings.TrimSpace(g) == "" || len(g) > 256 {
			errs = append(errs, fmt.Errorf("auth.admin_groups: %q is not a group name (1 to 256 bytes)", g))
		}
	}
	if h := c.Repositories.SnapshotHistory; h < 0 || h > 1<<20 {
		errs = append(errs, fmt.Errorf("repositories.snapshot_history must be between 0 (no .git) and %d commits, not %d", 1<<20, h))
	}
	switch strings.ToLower(c.Log.Level) {
	case "trace", "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not trace, debug, info, warn or error", c.Log.Level))
	}
	switch c.Log.Format {
	case "", LogText, LogJSON:
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not text or json", c.Log.Format))
	}
	return errors.Join(errs...)
}

// Proxies parses TrustedProxies: an address is a one-address range.
func (c Config) Proxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range c.TrustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("trusted_proxies[%d]: %q is neither an IP address nor a CIDR range like 10.0.0.0/8", i, s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Enabled reports whether the plugin is enabled.
func (c Config) Enabled(plugin string) bool {
	for _, p := range c.Plugins {
		if p == plugin {
			return true
		}
	}
	return false
}

// Instance is an instance directory's layout.
type Instance struct {
	Dir string
}

// NewInstance is the instance at dir, made absolute once: the paths
// derived from it reach the sandbox (bwrap needs absolute ones) and
// outlive a change of the working directory.
func NewInstance(dir string) (Instance, error) {
	if dir == "" {
		return Instance{}, errors.New("no instance directory given (--instance DIR)")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Instance{}, fmt.Errorf("instance directory %s: %w", dir, err)
	}
	return Instance{Dir: abs}, nil
}

// Paths inside an instance directory.
func (i Instance) ConfigFile() string    { return filepath.Join(i.Dir, "config.yaml") }
func (i Instance) DataDir() string       { return filepath.Join(i.Dir, "data") }
func (i Instance) Database() string      { return filepath.Join(i.Dir, "data", "codumentor.db") }
func (i Instance) WorkspacesDir() string { return filepath.Join(i.Dir, "workspaces") }
func (i Instance) LogsDir() string       { return filepath.Join(i.Dir, "logs") }
func (i Instance) ReposDir() string      { return filepath.Join(i.Dir, "repos") }
func (i Instance) LogFile() string       { return filepath.Join(i.Dir, "logs", "codumentor.log") }

// dirs are the directories Init creates and Check inspects.
func (i Instance) dirs() []string {
	return []string{i.Dir, i.DataDir(), i.WorkspacesDir(), i.LogsDir()}
}

// Init creates the instance directory and its subdirectories (0700) if
// they do not exist. It does not write config.yaml.
func (i Instance) Init() error {
	if i.Dir == "" {
		return errors.New("no instance directory given (--instance DIR)")
	}
	for _, d := range i.dirs() {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	return i.CheckModes()
}

// ErrNoInstance is wrapped by CheckModes when the directory is missing.
var ErrNoInstance = errors.New("no instance directory")

// ErrLooseMode is wrapped by CheckModes' errors.
var ErrLooseMode = errors.New("instance directory is readable or writable by others")

// CheckModes checks that the instance's directories exist, are
// directories and are private to their owner, and that config.yaml is not
// readable by others (it holds the jwt_secret).
func (i Instance) CheckModes() error {
	var errs []error
	if _, err := os.Lstat(i.Dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w at %s: check --instance (or $CODUMENTOR_INSTANCE)", ErrNoInstance, i.Dir)
	}
	for _, d := range i.dirs() {
		st, err := os.Lstat(d)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w (create it with codumentorctl users add --instance %s, or mkdir -m 0700)", d, err, i.Dir))
		case !st.IsDir():
			errs = append(errs, fmt.Errorf("%s is not a directory", d))
		case st.Mode().Perm()&0o077 != 0:
			errs = append(errs, fmt.Errorf("%w: %s has mode %#o; fix: chmod 0700 %s", ErrLooseMode, d, st.Mode().Perm(), d))
		}
	}
	if st, err := os.Stat(i.ConfigFile()); err == nil && st.Mode().Perm()&0o077 != 0 {
		errs = append(errs, fmt.Errorf("%w: %s has mode %#o; fix: chmod 0600 %s", ErrLooseMode, i.ConfigFile(), st.Mode().Perm(), i.ConfigFile()))
	}
	return errors.Join(errs...)
}

// Load reads the configuration: file (config.yaml of the instance when
// empty; a missing instance config.yaml means the defaults), then the
// environment (CODUMENTOR_JWT_SECRET for auth.jwt_secret,
// CODUMENTOR_LLM_BASE_URL, CODUMENTOR_LLM_MODEL, CODUMENTOR_LLM_API_KEY).
func (i Instance) Load(file string) (Config, error) {
	if file == "" {
		file = i.ConfigFile()
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) && file == i.ConfigFile() {
		b, err = nil, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("reading the configuration: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", file, err)
	}
	for _, o := range envOverrides {
		// Empty counts as unset: an empty export must not turn
		// encryption off.
		if v := os.Getenv(o.name); v != "" {
			*o.key(&c) = v
			if err := c.Validate(); err != nil {
				return Config{}, fmt.Errorf("%s: %w", o.name, err)
			}
		}
	}
	return c, nil
}

func (c Store) validate() []error {
	var errs []error
	p := c.Postgres
	switch c.Backend {
	case "", store.BackendSQLite:
		if p.DSN != "" || p.PasswordEnv != "" || p.PasswordFile != "" {
			errs = append(errs, errors.New("store.postgres names a database, but store.backend is not postgres"))
		}
	case store.BackendPostgres:
		if _, err := store.ParsePostgresDSN(p.DSN); err != nil {
			errs = append(errs, errors.New(strings.TrimPrefix(err.Error(), "store: ")))
		}
		if p.PasswordEnv != "" && p.PasswordFile != "" {
			errs = append(errs, errors.New("store.postgres: set password_env or password_file, not both"))
		}
		if p.MaxConns < 0 {
			errs = append(errs, errors.New("store.postgres.max_conns must not be negative"))
		}
	default:
		errs = append(errs, fmt.Errorf("store.backend %q: use sqlite or postgres", c.Backend))
	}
	return errs
}

// NodeID returns the instance's node name, data/node_id, which it
// creates (random) the first time: what names this node among the
// servers of a deployment unless cluster.node does.
func (i Instance) NodeID() (string, error) {
	file := filepath.Join(i.DataDir(), "node_id")
	b, err := os.ReadFile(file)
	if err == nil {
		if id := strings.TrimSpace(string(b)); validNodeName(id) {
			return id, nil
		}
		return "", fmt.Errorf("%s does not hold a node name: remove it for a new one, or set cluster.node", file)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading the node name: %w", err)
	}
	id := randid.New("node_")
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return i.NodeID()
	}
	if err != nil {
		return "", fmt.Errorf("creating the node name: %w", err)
	}
	_, err = f.WriteString(id + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("writing the node name: %w", err)
	}
	return id, nil
}

func validNodeName(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
