// Package mcp runs the operator's local MCP stdio servers and offers
// their tools to the agent engine, as mcp__<server>__<tool>.
//
// Each configured server is started once, when a turn first needs the
// tool list, and shared by every conversation. A sandboxed server
// (the default) runs in its own long-lived sandbox, sandboxkit's MCP
// profile: an empty tmpfs HOME (the service user's ~/.ssh, ~/.gnupg and
// the instance directory are not there), its own pid namespace (it
// cannot signal the server), none of the server's environment but the
// configured env, read-only binds of the command and the read_only
// paths, and no network unless the server's network is "host" or it
// has an egress allow-list: then its sandbox keeps its own network and
// reaches those destinations only, through sandboxkit's egress proxy.
// When the sandbox (or its proxy) cannot be provided the server is not
// started: its tool says why (fail closed). mode: off runs it
// unconfined, only because the operator wrote so, with a warning at
// every start.
//
// Every call of a server's tool needs the user's approval unless the
// operator lists the tool in auto_approve; the annotations a server
// gives its tools (readOnlyHint, …) waive nothing. The client advertises
// no capabilities: the server's sampling and elicitation requests are
// refused. A server that exits is restarted with backoff; calls in
// flight get an error saying so.
package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/headtail"
)

// Network and mode values of ServerConfig.
const (
	NetworkNone   = "none"
	NetworkHost   = "host"
	ModeSandboxed = "sandboxed"
	ModeOff       = "off"
)

// NetworkAllowlist is Status.Network of a sandboxed server with an
// egress_allowlist: its own network namespace, from which it reaches
// only those destinations, through the egress proxy.
const NetworkAllowlist = "egress_allowlist"

// Values of Status.Files: what of the host's files a server can use.
const (
	// FilesSandbox: /usr, a curated /etc, its command and its read_only
	// paths (read-only), an empty HOME; not the service user's files.
	FilesSandbox = "sandbox"
	// FilesServiceUser: everything the service user can read and write,
	// its ~/.ssh and the instance's database and keys too (mode: off).
	FilesServiceUser = "service_user"
)

// confinement is what a server's process runs with. spawn builds the
// sandbox (or runs it unconfined) from it and Status shows it, so what
// the admin listing says is what the process gets.
type confinement struct {
	sandboxed bool
	network   string // NetworkNone, NetworkHost or NetworkAllowlist
	files     string // FilesSandbox or FilesServiceUser
}

// hostPath is PATH of a server started unsandboxed (mode: off): the
// minimal one a sandbox has too, nothing of the server's own environment.
const hostPath = "/usr/local/bin:/usr/bin:/bin"

func confinementOf(c ServerConfig) confinement {
	if c.Mode == ModeOff {
		// Unconfined: the service user's network namespace and files.
		return confinement{sandboxed: false, network: NetworkHost, files: FilesServiceUser}
	}
	cf := confinement{sandboxed: true, network: NetworkNone, files: FilesSandbox}
	switch {
	case c.Network == NetworkHost:
		cf.network = NetworkHost
	case len(c.EgressAllowlist) > 0:
		cf.network = NetworkAllowlist
	}
	return cf
}

// ServerConfig is one entry of config.yaml's mcp.servers.
type ServerConfig struct {
	// Name names the server in its tools' names: lower-case letters,
	// digits and "-", at most 24 characters.
	Name string `yaml:"name"`
	// Command is the program, looked up on PATH inside the sandbox
	// (/usr/local/bin, /usr/bin, /bin), or an absolute path (bound
	// read-only when it is outside /usr).
	Command string   `yaml:"command"`
	Args    []string `yaml:"args"`
	// Env is the server's whole environment beyond the sandbox's minimal
	// one (PATH, HOME, LANG, …): nothing of the server's is passed on.
	Env map[string]string `yaml:"env"`
	// ReadOnly lists host paths the command needs (its package
	// directory, e.g. a node_modules tree), bound read-only at the same
	// path. Nothing else of the host is visible beyond /usr and a
	// curated /etc.
	ReadOnly []string `yaml:"read_only"`
	// Network is "none" (default) or "host" (the host's network, also
	// its 127.0.0.1 services).
	Network string `yaml:"network"`
	// EgressAllowlist lets a sandboxed server with no host network reach
	// these destinations only (see egress.ParseAllow), through the egress
	// proxy; empty: no network (unless Network is "host").
	EgressAllowlist []string `yaml:"egress_allowlist"`
	// Mode is "sandboxed" (default) or "off": unconfined, as the
	// service user, with a warning at every start.
	Mode string `yaml:"mode"`
	// AutoApprove lists the server's tools (their names as the server
	// gives them) that run without asking the user.
	AutoApprove []string `yaml:"auto_approve"`
}

// maxEgressAllow bounds a server's egress allow-list.
const maxEgressAllow = 64

// serverName is what a server may be called. The patterns are compiled
// on first use: a server without the plugin never builds them.
var serverName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,23}$`) })

// Validate checks c, with errors naming the setting.
func (c ServerConfig) Validate() error {
	var errs []error
	if !serverName().MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("mcp.servers: name %q must be 1-24 lower-case letters, digits or '-'", c.Name))
	}
	if strings.TrimSpace(c.Command) == "" {
		errs = append(errs, fmt.Errorf("mcp.servers %s: command is required", c.Name))
	}
	if c.Network != "" && c.Network != NetworkNone && c.Network != NetworkHost {
		errs = append(errs, fmt.Errorf("mcp.servers %s: network %q must be none or host", c.Name, c.Network))
	}
	if c.Mode != "" && c.Mode != ModeSandboxed && c.Mode != ModeOff {
		errs = append(errs, fmt.Errorf("mcp.servers %s: mode %q must be sandboxed or off", c.Name, c.Mode))
	}
	if len(c.EgressAllowlist) > 0 {
		switch {
		case c.Network == NetworkHost:
			errs = append(errs, fmt.Errorf("mcp.servers %s: egress_allowlist and network: host exclude each other (the host network has no allow-list)", c.Name))
		case c.Mode == ModeOff:
			errs = append(errs, fmt.Errorf("mcp.servers %s: egress_allowlist needs mode: sandboxed (an unconfined server has the host network)", c.Name))
		case len(c.EgressAllowlist) > maxEgressAllow:
			errs = append(errs, fmt.Errorf("mcp.servers %s: egress_allowlist: at most %d entries", c.Name, maxEgressAllow))
		}
		if err := egress.ParseAllow(c.EgressAllowlist); err != nil {
			errs = append(errs, fmt.Errorf("mcp.servers %s: egress_allowlist: %w", c.Name, err))
		}
	}
	for _, p := range c.ReadOnly {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			errs = append(errs, fmt.Errorf("mcp.servers %s: read_only path %q must be absolute and clean", c.Name, p))
		}
	}
	for k := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			errs = append(errs, fmt.Errorf("mcp.servers %s: env name %q is not valid", c.Name, k))
		}
	}
	return errors.Join(errs...)
}

// ValidateServers checks each server and that no two share a name.
func ValidateServers(servers []ServerConfig) error {
	seen := map[string]bool{}
	var errs []error
	for _, c := range servers {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[c.Name] {
			errs = append(errs, fmt.Errorf("mcp.servers: name %q is used twice", c.Name))
		}
		seen[c.Name] = true
	}
	return errors.Join(errs...)
}

// Options configure a Manager.
type Options struct {
	Servers []ServerConfig
	// Sandbox are the settings of the servers' sandboxes (ServerPolicy),
	// the caps of the egress proxy of each server with an
	// egress_allowlist included. Its Launching is told of each sandboxed
	// server's start before it runs; its error refuses the start.
	Sandbox sandboxkit.Settings
	// OnEgress, if set, is told of every attempt through the egress
	// proxy of every server (a server is shared by every conversation:
	// its attempts are no conversation's events; they are logged and
	// counted in Status).
	OnEgress func(egress.Event)
	// Logger may be nil.
	Logger *slog.Logger
	// StartTimeout bounds starting a server, its handshake and its tool
	// list (default 30s); CallTimeout bounds one tool call (default 2m).
	StartTimeout, CallTimeout time.Duration
	// MaxBackoff caps the wait before restarting a server that exited
	// (default 1m; it starts at 1s and doubles).
	MaxBackoff time.Duration
}

// Bounds on what a server can make the engine hold or send the model.
const (
	maxTools       = 128
	maxDescription = 2 << 10
	maxSchema      = 16 << 10
	maxMessage     = 4 << 20
	stderrKept     = 2 << 10
	// maxEgressLogged bounds the egress attempts logged one by one per
	// start of a server (all are counted).
	maxEgressLogged = 200
)

// Manager runs the configured servers. It is an agentcore.ToolSource.
type Manager struct {
	o       Options
	log     *slog.Logger
	servers []*server
	ctx     context.Context // ends every server at Close
	cancel  context.CancelFunc
}

// New checks the configuration and returns a Manager; no server starts
// before Tools is first called. A mode: off server is logged as a
// warning here, at every start of the process.
func New(o Options) (*Manager, error) {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 2 * time.Minute
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Minute
	}
	m := &Manager{o: o, log: o.Logger}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if err := ValidateServers(o.Servers); err != nil {
		return nil, err
	}
	for _, c := range o.Servers {
		if c.Mode == ModeOff {
			m.log.Warn("MCP server runs UNSANDBOXED (mode: off in config.yaml): it can read everything the service user can, including the instance's database and keys, and reach the network", "server", c.Name)
		}
		s := &server{m: m, cfg: c, conf: confinementOf(c), state: StateIdle, backoff: time.Second}
		if len(c.EgressAllowlist) > 0 {
			s.egress = map[string]int64{egress.Allowed: 0, egress.Refused: 0, egress.Failed: 0}
		}
		m.servers = append(m.servers, s)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// Close stops every server.
func (m *Manager) Close() error {
	m.cancel()
	for _, s := range m.servers {
		s.stop()
	}
	return nil
}

// Tools starts the servers not started yet (in parallel, each at most
// StartTimeout) and returns every server's tools. A server that cannot
// run offers one tool, mcp__<server>, that says why.
func (m *Manager) Tools(ctx context.Context) []agentcore.Tool {
	var wg sync.WaitGroup
	for _, s := range m.servers {
		wg.Go(func() { s.ensure(ctx) })
	}
	wg.Wait()
	var out []agentcore.Tool
	for _, s := range m.servers {
		out = append(out, s.toolList()...)
	}
	return out
}

// State is where a server is in its life.
type State string

const (
	StateIdle     State = "idle"     // not started yet: no turn has needed it
	StateStarting State = "starting" // being started
	StateRunning  State = "running"
	StateStopped  State = "stopped" // exited or failed to start; see LastError
	StateClosed   State = "closed"  // the Manager was closed
)

// Status is a server as GET /api/v1/admin/mcp shows it.
type Status struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	// Sandboxed, Network and Files are what its process runs with:
	// false, NetworkHost and FilesServiceUser for mode: off.
	Sandboxed bool   `json:"sandboxed"`
	Network   string `json:"network"`
	Files     string `json:"files"`
	// EgressAllowlist and EgressAttempts: the destinations it may reach
	// through the egress proxy, and its attempts so far by verdict
	// (allowed, refused, failed).
	EgressAllowlist []string         `json:"egress_allowlist,omitempty"`
	EgressAttempts  map[string]int64 `json:"egress_attempts,omitempty"`
	// Tools is the server's last tool list, those not offered to the
	// model included.
	Tools []ToolStatus `json:"tools"`
	// Restarts counts starts after the first.
	Restarts  int       `json:"restarts"`
	LastError string    `json:"last_error,omitempty"`
	Started   time.Time `json:"started,omitzero"`
}

// ToolStatus is one tool of a server's list.
type ToolStatus struct {
	// Name is the tool's name at the server; the model sees
	// mcp__<server>__<name>.
	Name string `json:"name"`
	// Offered is false for a tool the model is not offered; Reason says
	// why.
	Offered bool   `json:"offered"`
	Reason  string `json:"reason,omitempty"`
}

// Status lists the servers in configuration order.
func (m *Manager) Status() []Status {
	out := make([]Status, 0, len(m.servers))
	for _, s := range m.servers {
		s.mu.Lock()
		st := Status{Name: s.cfg.Name, State: s.state, Sandboxed: s.conf.sandboxed, Network: s.conf.network, Files: s.conf.files,
			Tools: slices.Clone(s.listed), Restarts: max(s.starts-1, 0), LastError: s.lastErr, Started: s.started}
		if st.Tools == nil {
			st.Tools = []ToolStatus{}
		}
		if len(s.cfg.EgressAllowlist) > 0 {
			st.EgressAllowlist = slices.Clone(s.cfg.EgressAllowlist)
			st.EgressAttempts = maps.Clone(s.egress)
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	return out
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// server is one configured server and its current process.
type server struct {
	m    *Manager
	cfg  ServerConfig
	conf confinement

	mu      sync.Mutex
	state   State
	sess    *sdk.ClientSession
	proc    *process
	listed  []ToolStatus     // the last list; kept while it restarts
	offered []agentcore.Tool // tools as the engine gets them
	starts  int
	lastErr string
	err     error         // why it is not running, for its tools
	started time.Time     // of the running process
	waiting chan struct{} // closed when the start in progress ends
	next    time.Time     // no start before (backoff)
	backoff time.Duration
	egress  map[string]int64 // egress attempts by verdict
	logged  int              // egress attempts logged since the last start
}

// ensure starts s if it is idle, or stopped and its backoff is over,
// and waits (at most ctx) for a start in progress.
func (s *server) ensure(ctx context.Context) {
	s.mu.Lock()
	switch {
	case s.state == StateStarting:
		w := s.waiting
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
		}
		return
	case s.state == StateIdle, s.state == StateStopped && !time.Now().Before(s.next):
		s.state, s.waiting = StateStarting, make(chan struct{})
		s.mu.Unlock()
		s.start(ctx)
		return
	}
	s.mu.Unlock()
}

// start runs one attempt; the caller set StateStarting.
func (s *server) start(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.m.o.StartTimeout)
	defer cancel()
	sess, p, tools, err := s.launch(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(s.waiting)
	s.starts++
	if s.state == StateClosed {
		if err == nil {
			sess.Close()
			p.kill()
		}
		return
	}
	if err != nil {
		s.state, s.err, s.lastErr = StateStopped, err, err.Error()
		s.next = time.Now().Add(s.backoff)
		s.backoff = min(2*s.backoff, s.m.o.MaxBackoff)
		s.m.log.Error("MCP server did not start", "server", s.cfg.Name, "err", sandboxkit.UnavailableDetail(err))
		return
	}
	s.state, s.sess, s.proc, s.err, s.started = StateRunning, sess, p, nil, time.Now()
	s.offered, s.listed = s.offer(tools)
	s.m.log.Info("MCP server started", "server", s.cfg.Name, "tools", len(tools), "offered", len(s.offered),
		"sandboxed", s.conf.sandboxed, "network", s.conf.network, "files", s.conf.files)
	go s.watch(sess, p)
}

// watch waits for the process to end; unless it was stopped on
// purpose, it records why and restarts it after the backoff.
func (s *server) watch(sess *sdk.ClientSession, p *process) {
	<-p.done
	sess.Close()
	s.mu.Lock()
	if s.proc != p || s.state == StateClosed {
		s.mu.Unlock()
		return
	}
	if time.Since(s.started) > s.m.o.MaxBackoff {
		s.backoff = time.Second // it ran well for a while
	}
	why := fmt.Sprintf("the server exited (%v)", p.err)
	if tail := strings.TrimSpace(strings.ToValidUTF8(p.stderr.String(), "\uFFFD")); tail != "" {
		why += "; its last output: " + tail
	}
	s.state, s.sess, s.proc, s.lastErr = StateStopped, nil, nil, why
	s.err = fmt.Errorf("MCP server %s is restarting: %s", s.cfg.Name, why)
	wait := s.backoff
	s.next = time.Now().Add(wait)
	s.backoff = min(2*s.backoff, s.m.o.MaxBackoff)
	s.mu.Unlock()
	s.m.log.Warn("MCP server exited; restarting", "server", s.cfg.Name, "in", wait, "err", p.err)
	select {
	case <-time.After(wait):
		s.ensure(s.m.ctx)
	case <-s.m.ctx.Done():
	}
}

func (s *server) stop() {
	s.mu.Lock()
	s.state = StateClosed
	sess, p := s.sess, s.proc
	s.sess, s.proc = nil, nil
	s.mu.Unlock()
	if sess != nil {
		sess.Close()
	}
	if p != nil {
		p.kill()
		<-p.done
	}
}

// launch starts the process, makes the MCP handshake and lists its tools.
func (s *server) launch(ctx context.Context) (*sdk.ClientSession, *process, []*sdk.Tool, error) {
	p, err := s.spawn()
	if err != nil {
		return nil, nil, nil, err
	}
	// No handlers and empty capabilities: the client advertises neither
	// sampling nor elicitation nor roots, and the SDK answers such
	// requests from the server with an error. Multi round-trip requests
	// (a result asking for input) come back to callTool, which refuses
	// them, instead of being fulfilled by the SDK.
	client := sdk.NewClient(&sdk.Implementation{Name: "codumentor", Version: "1"}, &sdk.ClientOptions{
		Capabilities:   &sdk.ClientCapabilities{},
		MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true},
	})
	sess, err := client.Connect(ctx, &sdk.IOTransport{Reader: p.stdout, Writer: p.stdin, MaxLineLength: maxMessage}, nil)
	if err != nil {
		p.kill()
		<-p.done
		return nil, nil, nil, s.startErr("the MCP handshake failed", err, p)
	}
	tools, err := listTools(ctx, sess)
	if err != nil {
		sess.Close()
		p.kill()
		<-p.done
		return nil, nil, nil, s.startErr("listing its tools failed", err, p)
	}
	return sess, p, tools, nil
}

func (s *server) startErr(what string, err error, p *process) error {
	msg := fmt.Sprintf("MCP server %s: %s: %v", s.cfg.Name, what, err)
	if tail := strings.TrimSpace(strings.ToValidUTF8(p.stderr.String(), "\uFFFD")); tail != "" {
		msg += "; its last output: " + tail
	}
	return errors.New(msg)
}

// listTools reads the server's tool list, keeping the tools whose name
// and schema can be offered to a model.
func listTools(ctx context.Context, sess *sdk.ClientSession) ([]*sdk.Tool, error) {
	var out []*sdk.Tool
	cursor := ""
	for page := 0; page < 16 && len(out) < maxTools; page++ {
		res, err := sess.ListTools(ctx, &sdk.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			if len(out) < maxTools {
				out = append(out, t)
			}
		}
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	return out, nil
}

// toolList is s's tools for the engine: the last list it gave while it
// runs or restarts, or one tool that says why it cannot run.
func (s *server) toolList() []agentcore.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.offered) == 0 && s.err != nil {
		return []agentcore.Tool{&downTool{s: s}}
	}
	return s.offered
}

// offer turns the server's list into the engine's tools (gated unless
// auto_approve names them) and the admin listing's, which also has
// those the model cannot be offered and why.
func (s *server) offer(tools []*sdk.Tool) (out []agentcore.Tool, listed []ToolStatus) {
	for _, t := range tools {
		spec, reason := s.spec(t)
		listed = append(listed, ToolStatus{Name: shownName(t.Name), Offered: reason == "", Reason: reason})
		if reason != "" {
			s.m.log.Warn("MCP tool not offered", "server", s.cfg.Name, "tool", shownName(t.Name), "reason", reason)
			continue
		}
		ct := &callTool{s: s, remote: t.Name, spec: spec}
		if slices.Contains(s.cfg.AutoApprove, t.Name) {
			out = append(out, ct)
		} else {
			out = append(out, &gatedTool{ct})
		}
	}
	return out, listed
}

// shownName is a tool's name for the admin listing: valid UTF-8, at
// most maxShownName bytes (a server's names are not bounded).
func shownName(n string) string {
	n = strings.ToValidUTF8(n, "\uFFFD")
	if len(n) > maxShownName {
		n = strings.ToValidUTF8(n[:maxShownName], "") + "…"
	}
	return n
}

const maxShownName = 256

var toolName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]+$`) })

// maxToolName bounds the name the model sees (the OpenAI-compatible
// APIs' limit on a function's name).
const maxToolName = 64

// spec is t as the model sees it, or why it cannot be offered.
func (s *server) spec(t *sdk.Tool) (agentcore.ToolSpec, string) {
	name := "mcp__" + s.cfg.Name + "__" + t.Name
	switch {
	case !toolName().MatchString(t.Name):
		return agentcore.ToolSpec{}, "its name has characters other than A-Z, a-z, 0-9, _ and - (the model's tool names allow no others)"
	case len(name) > maxToolName:
		return agentcore.ToolSpec{}, fmt.Sprintf("its name as the model would see it (mcp__%s__<name>) is longer than %d characters", s.cfg.Name, maxToolName)
	}
	schema, err := jsonMarshal(t.InputSchema)
	switch {
	case err == nil && len(schema) > maxSchema:
		return agentcore.ToolSpec{}, fmt.Sprintf("its input schema is larger than %d KiB", maxSchema>>10)
	case err != nil || !isObjectSchema(schema):
		return agentcore.ToolSpec{}, "its input schema is not a JSON object schema"
	}
	desc := strings.ToValidUTF8(t.Description, "\uFFFD")
	if len(desc) > maxDescription {
		desc = desc[:maxDescription] + "…"
	}
	desc = "[MCP server " + s.cfg.Name + "] " + desc
	return agentcore.ToolSpec{Name: name, Description: desc, Parameters: schema}, ""
}

// session is the running server's session, or why there is none.
func (s *server) session() (*sdk.ClientSession, *process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		if s.err != nil {
			return nil, nil, s.err
		}
		return nil, nil, fmt.Errorf("MCP server %s is not running (%s)", s.cfg.Name, s.state)
	}
	return s.sess, s.proc, nil
}

// process is a running server: in its sandbox, or unconfined (mode off).
type process struct {
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *headtail.Buffer // the end of the server's stderr, shown in its last error
	kill   func()
	done   chan struct{} // closed when it exited and its pipes are closed
	err    error         // how it exited; read after done
}

// spawn starts the server's process with its stdin and stdout as pipes.
func (s *server) spawn() (*process, error) {
	c := s.cfg
	env := make([]string, 0, len(c.Env))
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		env = append(env, k+"="+c.Env[k])
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW := io.Pipe()
	p := &process{stdin: inW, stdout: outR, stderr: headtail.New(0, stderrKept), done: make(chan struct{})}
	finish := func(wait func() error) {
		p.err = wait()
		outW.CloseWithError(io.EOF)
		inW.Close()
		close(p.done)
	}
	ctx, cancel := context.WithCancel(s.m.ctx)
	p.kill = cancel
	if !s.conf.sandboxed {
		s.m.log.Warn("starting MCP server UNSANDBOXED (mode: off)", "server", c.Name)
		cmd := exec.CommandContext(ctx, c.Command, c.Args...)
		home, _ := os.UserHomeDir()
		cmd.Env = append([]string{"PATH=" + hostPath, "HOME=" + home, "LANG=C.UTF-8"}, env...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, p.stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Start()
		inR.Close()
		if err != nil {
			cancel()
			inW.Close()
			return nil, fmt.Errorf("MCP server %s (unsandboxed): %w", c.Name, err)
		}
		go finish(cmd.Wait)
		return p, nil
	}
	pol, err := ServerPolicy(s.m.o.Sandbox, c)
	if err == nil {
		pol.Env = env
		if pol.Egress != nil {
			pol.Egress.OnEvent = s.onEgress
			s.mu.Lock()
			s.logged = 0
			s.mu.Unlock()
		}
	}
	if err != nil {
		cancel()
		inR.Close()
		inW.Close()
		return nil, s.unavailable(err)
	}
	cmd := sandboxkit.Command(ctx, pol, append([]string{c.Command}, c.Args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, p.stderr
	err = cmd.Start()
	inR.Close()
	if err != nil {
		cancel()
		inW.Close()
		return nil, s.unavailable(err)
	}
	go finish(cmd.Wait)
	return p, nil
}

// onEgress hears of each attempt through the server's egress proxy:
// it counts it, logs it (the first maxEgressLogged of each start) and
// passes it on to Options.OnEgress.
func (s *server) onEgress(e egress.Event) {
	s.mu.Lock()
	s.egress[e.Verdict]++
	s.logged++
	n := s.logged
	s.mu.Unlock()
	if n <= maxEgressLogged {
		lvl := slog.LevelInfo
		if e.Verdict != egress.Allowed {
			lvl = slog.LevelWarn
		}
		s.m.log.Log(context.Background(), lvl, "MCP server egress attempt", "server", s.cfg.Name, "verdict", e.Verdict, "proto", e.Proto,
			"host", e.Host, "port", e.Port, "addr", e.Addr, "reason", e.Reason, "sent", e.Sent, "received", e.Received, "duration", e.Duration)
		if n == maxEgressLogged {
			s.m.log.Warn("MCP server egress: further attempts are counted, not logged, until it restarts", "server", s.cfg.Name, "logged", maxEgressLogged)
		}
	}
	if f := s.m.o.OnEgress; f != nil {
		f(e)
	}
}

// unavailable says that the server was not started, keeping errors.Is
// sandboxkit.ErrUnavailable (the engine then tells the user the sandbox
// is unavailable) and egress.ErrProxyDown.
func (s *server) unavailable(err error) error {
	if errors.Is(err, sandboxkit.ErrUnavailable) {
		return fmt.Errorf("MCP server %s was not started because its sandbox is unavailable: %w; nothing was run", s.cfg.Name, err)
	}
	if errors.Is(err, egress.ErrProxyDown) {
		return fmt.Errorf("MCP server %s was not started because its egress proxy could not start (%w); nothing was run", s.cfg.Name, err)
	}
	return fmt.Errorf("MCP server %s: starting its sandbox: %w", s.cfg.Name, err)
}

// binds are the read-only binds the command needs: itself when it is an
// absolute path outside /usr, and the configured read_only paths.
// serverLabel is the label of the servers' sandboxes (Policy.Profile).
const serverLabel = "mcp"

// ServerPolicy is the sandbox of a local MCP stdio server under s, for
// the life of the process: an empty HOME (no ~/.ssh, ~/.gnupg), its own
// pid namespace (it cannot signal the server), its command (outside
// /usr) and read_only paths read-only, and the network of its config:
// none, the host's (network: host), or only the destinations of its
// egress_allowlist through an egress proxy under s's caps. A server
// with mode off has no sandbox.
func ServerPolicy(s sandboxkit.Settings, c ServerConfig) (*sandboxkit.Policy, error) {
	cf := confinementOf(c)
	if !cf.sandboxed {
		return nil, fmt.Errorf("MCP server %s runs without a sandbox (mode: off)", c.Name)
	}
	p, err := s.NewPolicy(serverLabel)
	if err != nil {
		return nil, err
	}
	switch cf.network {
	case NetworkHost:
		p.ShareNet = true
	case NetworkAllowlist:
		p.Egress = s.Egress(c.EgressAllowlist)
	}
	if p.ReadOnly, err = binds(c); err != nil {
		return nil, err
	}
	return p, nil
}

func binds(c ServerConfig) ([]sandboxkit.Bind, error) {
	var paths []string
	if filepath.IsAbs(c.Command) && !strings.HasPrefix(c.Command, "/usr/") {
		paths = append(paths, filepath.Clean(c.Command))
	}
	paths = append(paths, c.ReadOnly...)
	var out []sandboxkit.Bind
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("read_only path %s: %w", p, err)
		}
		out = append(out, sandboxkit.Bind{Src: p})
	}
	return out, nil
}
