// Package daemon is the server process, codumentor api: it reads the
// instance directory's configuration, opens the database, and runs the
// HTTP API, the agent engine, the job queue and its scheduler in one
// process. Untrusted work (the agent's commands) runs only in the
// sandboxes the engine starts; nothing here evaluates model output.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"text/template"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/approvalrule"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/cluster"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/connlimit"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/setup"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/integrations/ldap"
	"github.com/codumentor/codumentor/integrations/llm"
	"github.com/codumentor/codumentor/integrations/mcp"
	"github.com/codumentor/codumentor/integrations/retrieval"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// Options are codumentor api's command line.
type Options struct {
	// Instance is the instance directory (created 0700 if missing).
	Instance string
	// ConfigFile overrides <instance>/config.yaml.
	ConfigFile string
	// Listen overrides the configuration's listen address.
	Listen string
	// InsecureListen allows a non-loopback address without TLS.
	InsecureListen bool
	// Stderr receives the log as well as logs/codumentor.log (nil: none).
	Stderr io.Writer
	// ConfigPoll is how often config.yaml is checked for rotated secrets
	// (default 2s).
	ConfigPoll time.Duration
	// Heartbeat is the SSE heartbeat interval (default 15s).
	Heartbeat time.Duration
}

// ErrInsecureListen refuses a non-loopback address without TLS.
var ErrInsecureListen = errors.New("refusing to serve tokens and passwords in the clear on a non-loopback address")

// InterruptedReason is the error of a turn that a stopped server left
// running.
const InterruptedReason = "interrupted: the server stopped during this turn"

// Run serves until ctx ends, then shuts down: open event streams end,
// running turns are cancelled, the database is closed.
func Run(ctx context.Context, o Options) error {
	inst, err := config.NewInstance(o.Instance)
	if err != nil {
		return err
	}
	if err := inst.Init(); err != nil {
		return err
	}
	if o.ConfigFile != "" {
		if o.ConfigFile, err = filepath.Abs(o.ConfigFile); err != nil {
			return err
		}
	}
	cfg, err := inst.Load(o.ConfigFile)
	if err != nil {
		return err
	}
	if o.Listen != "" {
		cfg.Listen = o.Listen
	}
	cfg.InsecureListen = cfg.InsecureListen || o.InsecureListen
	if err := checkListen(cfg); err != nil {
		return err
	}
	// One server per instance, before the database is opened; then the
	// log and the address, so that a server that cannot serve never runs
	// recovery.
	lock, err := inst.Lock()
	if err != nil {
		return err
	}
	defer lock.Close()
	logFile, err := openLogFile(inst.LogFile())
	if err != nil {
		return err
	}
	defer logFile.Close()
	var out io.Writer = logFile
	if o.Stderr != nil {
		out = io.MultiWriter(logFile, o.Stderr)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "codumentor", Level: hclog.LevelFromString(cfg.Log.Level), Output: out, JSONFormat: cfg.Log.Format == config.LogJSON})
	ln, scheme, err := listen(cfg, log)
	if err != nil {
		return err
	}
	defer ln.Close()

	if cfg.Auth.JWTSecret == "" {
		log.Error("*** auth.jwt_secret is not set: secrets are stored in PLAINTEXT and login tokens die with this process. Set auth.jwt_secret (or " + config.EnvJWTSecret + ") to at least 32 random bytes: codumentorctl secrets rotate --instance " + inst.Dir + " writes one. ***")
	}
	if cfg.LLM.BaseURL == "" {
		log.Warn("llm.base_url is not set: the server runs, but every turn fails until an OpenAI-compatible endpoint is configured in config.yaml (llm.base_url, llm.model)")
	}

	dbc, err := cfg.Store.Database(inst)
	if err != nil {
		return err
	}
	db, err := store.OpenConfig(ctx, dbc)
	if err != nil {
		return err
	}
	defer store.Close(db)
	var nodes *cluster.Registry
	if store.Backend(db) == store.BackendPostgres {
		// Servers that share a database must share the secret that
		// signs what they hand out.
		node, err := nodeName(cfg, inst)
		if err != nil {
			return err
		}
		others, err := cluster.Others(ctx, db, node, cfg.Cluster.LostAfter.Std())
		if err != nil {
			return err
		}
		if err := auth.CheckSharedSecret(ctx, db, cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets, others == 0); err != nil {
			return err
		}
		if nodes, err = joinCluster(ctx, cfg, node, db, ln, scheme); err != nil {
			return err
		}
	}
	if err := audit.UseKeys(db, audit.NewKeys(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets)); err != nil {
		return err
	}
	s, err := build(ctx, cfg, inst, db, nodes, log, o)
	if err != nil {
		return err
	}
	s.logFile = logFile
	defer s.indexDB.close()
	defer s.engine.Close()
	return s.serve(ctx, ln, scheme, inst, o)
}

// server is one running codumentor api.
type server struct {
	log     hclog.Logger
	inst    config.Instance
	db      *gorm.DB
	engine  *agentcore.Engine
	convs   *store.Conversations
	nodes   *cluster.Registry // nil: the only server on its database
	api     *api.Server
	queue   *jobs.Queue
	secrets *secrets.Store
	tokens  atomic.Pointer[auth.Tokens]
	layers  *overlay.Store
	trees   *trees
	repos   *repos.Service
	cfg     atomic.Pointer[config.Config]
	mcp     *mcp.Manager // nil unless the mcp plugin is enabled
	egress  *egressMetrics
	// sandboxes count the sandboxes started, stopped by a limit, running.
	sandboxes *sandboxMetrics
	attach    *api.Attachments
	search    *retrieval.Searcher // code search; its Index ingests
	indexDB   indexFiles          // the embedded index's files
	// hostMasks are hidden from host read-only investigations.
	hostMasks []string
	// sandbox are the settings every sandbox of the server shares.
	sandbox sandboxkit.Settings

	// usage is the model calls' usage and the users' quotas.
	usage *store.Usage

	browsers browsers            // the webretrieve and mermaid_render plugins'
	diagrams api.DiagramRenderer // set by mermaid_render

	logFile *logFile // logs/codumentor.log, reopened on SIGHUP
}

// build makes the server in stages, each a function of what the stages
// before it made (store → auth → metrics → code index → workspaces and
// repositories → model → engine → search → attachments → plugins → API).
// No closure made here reads the server: a stage gets its inputs as
// arguments, so reordering stages fails to compile rather than reading
// a field not yet set (TestBuildStages).
func build(ctx context.Context, cfg config.Config, inst config.Instance, db *gorm.DB, nodes *cluster.Registry, log hclog.Logger, o Options) (*server, error) {
	s := &server{log: log, db: db, inst: inst, hostMasks: hostMasks(inst, o.ConfigFile, cfg)}
	s.cfg.Store(&cfg)
	live := &s.cfg // the running configuration, as watchConfig reloads it
	st, err := openStores(ctx, cfg, db, nodes, log)
	if err != nil {
		return nil, err
	}
	s.secrets, s.queue, s.usage = st.secrets, st.queue, st.usage
	au, err := openAuth(ctx, cfg, db, st.users)
	if err != nil {
		return nil, err
	}
	if au.oidc, err = openOIDC(cfg, st.users, au.limiter, st.secrets); err != nil {
		return nil, err
	}
	s.tokens.Store(au.tokens)
	m := newMetrics(st.convs)
	s.egress, s.sandboxes = m.egress, m.sandboxes
	// The settings every sandbox of the server shares, built once.
	s.sandbox = cfg.Sandbox.Settings()
	s.sandbox.Launching = launchRecorder(db, m.sandboxes)
	index, indexDB, err := openCodeIndex(ctx, cfg, inst, db, log)
	if err != nil {
		return nil, err
	}
	s.indexDB = indexDB
	built := false
	defer func() {
		if !built {
			indexDB.close()
		}
	}()
	ws, err := openWorkspaces(ctx, cfg, inst, db, st, m, s.sandbox, codeIndex{index}, log)
	if err != nil {
		return nil, err
	}
	s.layers, s.repos, s.trees = ws.layers, ws.repos, ws.trees
	model, prompt, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	approver := &ruleApprover{sandbox: func() config.Sandbox { return live.Load().Sandbox }, rules: st.userRules, convs: st.convs}
	engine, err := newEngine(cfg, engineDeps{
		stores: st, metrics: m, workspaces: ws, model: model, prompt: prompt.template,
		turnModel: turnModel(st.convs, st.secrets, live), promptContext: promptContext(st.convs, approver, ws.repos),
		approver: approver, hostMasks: s.hostMasks, sandbox: s.sandbox, log: log,
	})
	if err != nil {
		return nil, err
	}
	s.engine, s.convs, s.nodes = engine, st.convs, nodes
	// The setups' events are their conversations': published by the
	// engine, which needs the setups' layers first.
	ws.trees.setups.SetPublish(engine.Publish)
	s.search = newSearcher(index, st.convs, ws.repos)
	if err := engine.Register(s.search.Tool()); err != nil {
		return nil, err
	}
	if s.attach, err = openAttachments(db, inst, cfg); err != nil {
		return nil, err
	}
	for _, name := range cfg.Plugins {
		if err := plugins[name].start(ctx, s, cfg); err != nil {
			return nil, fmt.Errorf("plugin %s: %w", name, err)
		}
	}
	if !cfg.Enabled(config.PluginWorkspaceIsolation) {
		log.Warn("the workspace_isolation plugin is not enabled: the agent has no shell or file tools")
	}
	_, apiLimits := limits(cfg.Server)
	s.api = api.New(api.Deps{
		Conversations: st.convs,
		Users:         st.users,
		Login:         au.login,
		OIDC:          au.oidc,
		Tokens:        &s.tokens,
		Secrets:       st.secrets,
		Jobs:          st.queue,
		Engine:        engine,
		Workspaces:    ws.trees,
		Layers:        ws.layers,
		Repositories:  ws.repos,
		Ready:         s.ready,
		Log:           log.Named("api"),
		Registry:      m.registry,
		Heartbeat:     o.Heartbeat,
		Limits:        apiLimits,
		MCP:           s.mcp,
		Investigation: api.Investigation{Enabled: cfg.Investigation.Enabled, Users: cfg.Investigation.Users},
		Cluster:       nodes,
		Attachments:   s.attach,
		Usage:         st.usage,
		Search:        s.search,
		Diagrams:      s.diagrams,
		Setups:        ws.trees.setups,

		TrustedProxies: au.proxies,
		DB:             db,
		LLM:            func() config.LLM { return live.Load().LLM },
		ApprovalRules:  st.userRules,
		UserRules:      func() []approvalrule.Rule { return live.Load().Sandbox.UserRules },
		StorageDirs:    map[string]string{"data": inst.DataDir(), "workspaces": inst.WorkspacesDir(), "repos": inst.ReposDir(), "logs": inst.LogsDir()},
		MetricsToken:   cfg.Metrics.Token,
		SystemPrompt:   api.SystemPrompt{Source: prompt.source, Text: prompt.text},
		AutoApproved:   approver.autoApproved,
	})
	built = true
	return s, nil
}

// stores are the database's tables and what keeps them: build's first
// stage.
type stores struct {
	convs     *store.Conversations
	userRules *store.ApprovalRules
	users     *auth.Users
	secrets   *secrets.Store
	queue     *jobs.Queue
	usage     *store.Usage
	nodes     *cluster.Registry // nil: the only server on its database
}

// openStores migrates the tables (Migrate), records the configuration,
// opens the tables and marks the turns the last stop interrupted as
// failed. The queue runs the jobs of no node and of this one (its GC).
func openStores(ctx context.Context, cfg config.Config, db *gorm.DB, nodes *cluster.Registry, log hclog.Logger) (stores, error) {
	var st stores
	if err := Migrate(ctx, db); err != nil {
		return st, err
	}
	if err := recordConfig(ctx, db, cfg); err != nil {
		return st, err
	}
	var err error
	if st.convs, err = store.NewConversations(db); err != nil {
		return st, err
	}
	if nodes != nil {
		st.convs.SetNode(nodes.Self())
	}
	st.nodes = nodes
	if ids, err := st.convs.Recover(ctx, InterruptedReason); err != nil {
		return st, err
	} else if len(ids) > 0 {
		log.Warn("turns interrupted by the last stop were marked failed", "conversations", ids)
	}
	if st.userRules, err = store.NewApprovalRules(db); err != nil {
		return st, err
	}
	if st.users, err = auth.NewUsers(db); err != nil {
		return st, err
	}
	if err := st.users.SetAdminGroups(cfg.Auth.AdminGroups); err != nil {
		return st, err
	}
	if st.secrets, err = secrets.New(db, secrets.NewKeyring(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets)); err != nil {
		return st, err
	}
	var node string // one server on SQLite: the only node
	if nodes != nil {
		node = nodes.Self()
	}
	if st.queue, err = jobs.New(db, jobs.Options{Logger: log.Named("jobs"), Node: node}); err != nil {
		return st, err
	}
	if st.usage, err = store.NewUsage(db); err != nil {
		return st, err
	}
	st.usage.SetDefaultQuota(int64(cfg.Quotas.DailyTokens))
	return st, nil
}

// authn is how users sign in: build's auth stage.
type authn struct {
	tokens  *auth.Tokens
	login   *auth.Authenticator
	proxies []netip.Prefix
	limiter *auth.Limiter // login's, OIDC's too
	oidc    *auth.OIDC
}

// openAuth makes the login tokens, the login limiter (swept until ctx
// ends) and the authenticator (local users, LDAP if configured).
func openAuth(ctx context.Context, cfg config.Config, db *gorm.DB, users *auth.Users) (authn, error) {
	var a authn
	var err error
	if a.tokens, err = auth.NewTokens(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets, cfg.Auth.TokenTTL.Std()); err != nil {
		return a, err
	}
	var ldapCfg *ldap.Config
	if cfg.Auth.LDAP.URL != "" {
		ldapCfg = &cfg.Auth.LDAP
	}
	ll := cfg.Auth.LoginLimits
	limiter, err := auth.NewLimiter(db, auth.LimitOptions{
		UserFailures: ll.UserFailures, UserDelay: ll.UserDelay.Std(), MaxUserDelay: ll.MaxUserDelay.Std(),
		IPFailures: ll.AddressFailures, Window: ll.Window.Std(),
	})
	if err != nil {
		return a, err
	}
	go limiter.Sweep(ctx, time.Minute)
	a.limiter = limiter
	if a.login, err = auth.NewAuthenticator(users, ldapCfg, limiter); err != nil {
		return a, err
	}
	if a.proxies, err = cfg.Proxies(); err != nil {
		return a, err
	}
	return a, nil
}

// metrics are the server's Prometheus registry and the counters that
// stages share.
type metrics struct {
	registry *prometheus.Registry
	egress   *egressMetrics
	// sandboxes count the sandboxes started, stopped by a limit, running.
	sandboxes *sandboxMetrics
}

func newMetrics(convs *store.Conversations) metrics {
	m := metrics{registry: prometheus.NewRegistry()}
	m.egress = newEgressMetrics(m.registry)
	m.sandboxes = newSandboxMetrics(m.registry)
	convs.Observe(m.sandboxes.observe)
	return m
}

// workspaces are what conversations' workspaces are made of: the layers,
// the repositories and their snapshots, the lower trees and the project
// setups.
type workspaces struct {
	layers *overlay.Store
	repos  *repos.Service
	trees  *trees
}

// openWorkspaces opens the layers, the repositories (indexing into
// index), the trees and the setups, and schedules their collection. The
// setups publish nothing until their publish is set.
func openWorkspaces(ctx context.Context, cfg config.Config, inst config.Instance, db *gorm.DB, st stores, m metrics, sandbox sandboxkit.Settings, index codeIndex, log hclog.Logger) (workspaces, error) {
	var ws workspaces
	var err error
	if ws.layers, err = overlay.Open(filepath.Join(inst.WorkspacesDir(), "layers")); err != nil {
		return ws, err
	}
	if ws.repos, err = openRepos(ctx, cfg, inst, db, st, log, index, sandbox); err != nil {
		return ws, err
	}
	trees := &trees{dir: filepath.Join(inst.WorkspacesDir(), "trees"), convs: st.convs, repos: ws.repos}
	ws.trees = trees
	if err := os.Mkdir(trees.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return ws, err
	}
	if trees.setups, err = setup.Open(ctx, setup.Options{
		Dir: filepath.Join(inst.WorkspacesDir(), "setups"), DB: db,
		Conversations: st.convs, Repositories: ws.repos, Log: log.Named("setup"),
		Sandbox: sandbox, MaxLayer: int64(cfg.Repositories.MaxSnapshotBytes),
		OnEgress: m.egress.observer("setup"),
	}); err != nil {
		return ws, err
	}
	st.queue.Handle(setup.KindGC, func(ctx context.Context, _ *jobs.Job) (any, error) {
		removed, err := trees.setups.GC(ctx)
		return map[string][]string{"removed": removed}, err
	})
	st.queue.EveryNode("setup_gc", cfg.Sandbox.GCInterval.Std(), setup.KindGC, nil) // its workspaces/setups
	return ws, nil
}

// systemPrompt is the system prompt's text, read once (what the engine
// runs is what the admin route shows), its source, and its template
// (nil: the built-in one).
type systemPrompt struct {
	text, source string
	template     *template.Template
}

// newModel is the configured model (one that says what to configure if
// none is) and the system prompt.
func newModel(cfg config.Config) (agentcore.LLM, systemPrompt, error) {
	var model agentcore.LLM = unconfiguredLLM{}
	if cfg.LLM.BaseURL != "" {
		c, err := llm.New(llm.Config{BaseURL: cfg.LLM.BaseURL, Model: cfg.LLM.Model, APIKey: cfg.LLM.APIKey, Timeout: cfg.LLM.Timeout.Std(), Sampling: cfg.LLM.Sampling, ContextWindow: cfg.LLM.ContextWindow})
		if err != nil {
			return nil, systemPrompt{}, err
		}
		model = c
	}
	var p systemPrompt
	var err error
	p.text, p.source, err = cfg.LLM.PromptText()
	if err == nil && p.source != config.PromptBuiltin {
		p.template, err = config.ParsePrompt(p.source, p.text, config.MaxPromptTemplate)
	}
	if err != nil {
		return nil, systemPrompt{}, err
	}
	return model, p, nil
}

// engineDeps are what the engine is built from.
type engineDeps struct {
	stores        stores
	metrics       metrics
	workspaces    workspaces
	model         agentcore.LLM
	prompt        *template.Template
	turnModel     func(ctx context.Context, user, conversation string) (agentcore.LLM, error)
	promptContext func(ctx context.Context, user, conversation string) (agentcore.PromptContext, error)
	approver      *ruleApprover
	hostMasks     []string
	sandbox       sandboxkit.Settings
	log           hclog.Logger
}

// newEngine is the agent engine over the conversations and their
// workspaces.
func newEngine(cfg config.Config, d engineDeps) (*agentcore.Engine, error) {
	return agentcore.New(agentcore.Config{
		LLM:              d.model,
		Model:            d.turnModel,
		Store:            d.stores.convs,
		Workspaces:       d.workspaces.trees,
		Layers:           d.workspaces.layers,
		Secrets:          d.stores.secrets,
		Usage:            newAccounting(d.stores.usage, d.metrics.registry),
		Logger:           slog.New(slogHandler{log: d.log.Named("agent")}),
		Sandbox:          d.sandbox,
		ShellAlwaysAllow: cfg.Sandbox.ShellAlwaysAllow,
		Checkpoints:      overlay.CheckpointLimits{MaxCount: cfg.Sandbox.Checkpoints.MaxCount, MaxBytes: int64(cfg.Sandbox.Checkpoints.MaxBytes)},
		ApprovalTimeout:  cfg.Sandbox.ApprovalTimeout.Std(),
		SystemPrompt:     d.prompt,
		ToolCalls:        cfg.LLM.ToolCalls,
		MaxSteps:         cfg.LLM.MaxSteps,
		RepeatLimit:      cfg.LLM.RepeatLimit,
		PromptContext:    d.promptContext,
		NoWorkspaceTools: !cfg.Enabled(config.PluginWorkspaceIsolation),
		MaxJobs:          cfg.Sandbox.Limits.BackgroundJobs,
		Programs:         externalAgentPrograms(cfg),
		Subagents:        cfg.SubagentIsolation,
		HostReadOnly:     hostReadOnly(cfg, d.stores.convs),
		HostMasks:        d.hostMasks,
		OnEgress:         d.metrics.egress.observer("agent"),
		Approver:         d.approver,

		CommandTimeout:    cfg.Sandbox.CommandTimeout.Std(),
		MaxCommandTimeout: cfg.Sandbox.MaxCommandTimeout.Std(),
		OutputKeep:        int64(cfg.Sandbox.OutputKeep),
		OutputKeepTotal:   int64(cfg.Sandbox.OutputKeepTotal),
	})
}

// ready is GET /readyz: the database answers, and every enabled plugin's
// checks pass (workspace isolation: the sandbox Doctor's).
func (s *server) ready(ctx context.Context) api.Readiness {
	cfg := s.cfg.Load()
	r := api.Readiness{Ready: true}
	add := func(c api.Check) {
		r.Checks = append(r.Checks, c)
		r.Ready = r.Ready && c.OK
	}
	db := api.Check{Name: "database", OK: true}
	if err := s.db.WithContext(ctx).Exec("SELECT 1").Error; err != nil {
		db.OK, db.Detail = false, err.Error()
	}
	add(db)
	add(storageCheck(s.inst, cfg.Sandbox.SandboxLimits()))
	seen := map[string]bool{}
	for _, name := range cfg.Plugins {
		for _, c := range plugins[name].checks(ctx, s, *cfg) {
			// Plugins that share a component (webretrieve and
			// mermaid_render the browser) report its check once.
			if !seen[c.Name] {
				seen[c.Name] = true
				add(c)
			}
		}
	}
	if cfg.Investigation.Enabled {
		add(investigationCheck(s.hostMasks))
	}
	if cfg.Auth.JWTSecret == "" {
		r.Warnings = append(r.Warnings, "auth.jwt_secret is not set: secrets are stored in plaintext and tokens die with the process")
	}
	if cfg.LLM.BaseURL == "" {
		r.Warnings = append(r.Warnings, "llm.base_url is not set: turns fail until a model endpoint is configured")
	}
	r.Warnings = append(r.Warnings, sandboxWarnings(r.Checks)...)
	return r
}

// listen opens the configured address, with TLS when configured.
func listen(cfg config.Config, log hclog.Logger) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, "", fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	lo, _ := limits(cfg.Server)
	lo.Log = log.Named("listener").Warn
	lo.Proxies, _ = cfg.Proxies() // checked by the config's validation
	ln = connlimit.New(ln, lo)
	scheme := "http"
	if cfg.TLS.Enabled() {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			ln.Close()
			return nil, "", fmt.Errorf("tls: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	return ln, scheme, nil
}

func (s *server) serve(ctx context.Context, ln net.Listener, scheme string, inst config.Instance, o Options) error {
	var err error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.browsers.listening(ln.Addr())
	defer s.browsers.close()
	queueDone := make(chan error, 1)
	go func() { queueDone <- s.queue.Run(ctx) }()
	// SIGHUP, as daemons take it: reopen the log (logrotate has renamed
	// it) and re-read the configuration now.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			if err := s.logFile.Reopen(); err != nil {
				s.log.Error("SIGHUP: reopening the log failed; still writing the old file", "err", err)
			} else {
				s.log.Info("SIGHUP: log reopened; re-reading the configuration")
			}
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}()
	go s.watchConfig(ctx, inst, o, reload)
	go s.logAuditHeads(ctx, s.cfg.Load().Audit.HeadInterval.Std())
	// The node's record and the events of the others outlive ctx until
	// the node has drained its turns.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	if s.nodes != nil {
		go s.nodes.Run(bg, func() int {
			n, err := s.convs.Running(bg, s.nodes.Self())
			if err != nil {
				s.log.Warn("counting this node's running turns", "err", err)
			}
			return n
		})
	}
	// The events other servers on the database store reach this one's
	// subscribers (PostgreSQL; nothing to do on SQLite).
	listened := make(chan error, 1)
	go func() {
		listened <- s.convs.Listen(bg, s.engine.Wake, func(lost error) {
			s.log.Warn("the database's event notifications were interrupted; subscribers re-read the events", "err", lost)
			s.engine.WakeAll()
		})
	}()

	served := make(chan error, 1)
	go func() { served <- s.api.App().Listener(ln) }()
	s.log.Info("listening", "url", fmt.Sprintf("%s://%s", scheme, ln.Addr()), "instance", inst.Dir)

	select {
	case err = <-served:
		cancel()
	case <-ctx.Done():
		s.log.Info("shutting down")
		if s.nodes != nil {
			s.drain(bg)
		}
		if serr := s.api.Shutdown(10 * time.Second); serr != nil {
			s.log.Warn("shutdown", "err", serr)
		}
		err = nil
	}
	s.trees.setups.Close()
	s.engine.Close()
	cancel()
	stopBG()
	if lerr := <-listened; lerr != nil {
		s.log.Warn("event notifications", "err", lerr)
	}
	if qerr := <-queueDone; qerr != nil && !errors.Is(qerr, context.Canceled) {
		s.log.Warn("job queue", "err", qerr)
	}
	s.logAuditHead(context.WithoutCancel(ctx))
	return err
}

// watchConfig applies rotated secrets (codumentorctl secrets rotate)
// without a restart: tokens and the secrets' keyring are swapped when
// config.yaml's auth section changes. So are llm.allowed_endpoints and
// quotas.
//
// A value on reload re-reads config.yaml at once, changed or not
// (SIGHUP).
func (s *server) watchConfig(ctx context.Context, inst config.Instance, o Options, reload <-chan struct{}) {
	poll := o.ConfigPoll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	file := o.ConfigFile
	if file == "" {
		file = inst.ConfigFile()
	}
	stamp := func() string {
		st, err := os.Stat(file)
		if err != nil {
			return ""
		}
		return fmt.Sprint(st.ModTime().UnixNano(), st.Size(), st.Sys())
	}
	last := stamp()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-reload:
			forced = true
		}
		now := stamp()
		if now == last && !forced {
			continue
		}
		last = now
		next, err := inst.Load(o.ConfigFile)
		if err != nil {
			s.log.Error("config.yaml cannot be read; keeping the running configuration", "err", err)
			continue
		}
		cur := s.cfg.Load()
		if next.Log.Level != cur.Log.Level {
			s.log.SetLevel(hclog.LevelFromString(next.Log.Level))
			updated := *cur
			updated.Log.Level = next.Log.Level
			s.cfg.Store(&updated)
			cur = &updated
			s.log.Info("log.level reloaded from config.yaml", "level", next.Log.Level)
		}
		if !slices.Equal(next.LLM.AllowedEndpoints, cur.LLM.AllowedEndpoints) {
			// Model profiles' endpoints are checked at each turn: one taken
			// off the list is used no more from now on.
			updated := *cur
			updated.LLM.AllowedEndpoints = next.LLM.AllowedEndpoints
			s.cfg.Store(&updated)
			cur = &updated
			s.log.Info("llm.allowed_endpoints reloaded from config.yaml", "endpoints", len(next.LLM.AllowedEndpoints))
		}
		if next.Quotas != cur.Quotas {
			updated := *cur
			updated.Quotas = next.Quotas
			s.cfg.Store(&updated)
			cur = &updated
			s.usage.SetDefaultQuota(int64(next.Quotas.DailyTokens))
			s.log.Info("quotas reloaded from config.yaml", "daily_tokens", next.Quotas.DailyTokens)
		}
		if next.Auth.JWTSecret == cur.Auth.JWTSecret && slices.Equal(next.Auth.PreviousJWTSecrets, cur.Auth.PreviousJWTSecrets) {
			continue
		}
		tokens, err := auth.NewTokens(next.Auth.JWTSecret, next.Auth.PreviousJWTSecrets, cur.Auth.TokenTTL.Std())
		if err != nil {
			s.log.Error("config.yaml has new secrets that cannot be used; keeping the running ones", "err", err)
			continue
		}
		s.tokens.Store(tokens)
		s.secrets.SetKeyring(secrets.NewKeyring(next.Auth.JWTSecret, next.Auth.PreviousJWTSecrets))
		if err := audit.UseKeys(s.db, audit.NewKeys(next.Auth.JWTSecret, next.Auth.PreviousJWTSecrets)); err != nil {
			s.log.Error("the audit log's MAC keys cannot be swapped", "err", err)
		}
		updated := *cur
		updated.Auth.JWTSecret, updated.Auth.PreviousJWTSecrets = next.Auth.JWTSecret, next.Auth.PreviousJWTSecrets
		s.cfg.Store(&updated)
		s.log.Info("auth secrets reloaded from config.yaml", "previous", len(next.Auth.PreviousJWTSecrets))
	}
}

// checkListen refuses to serve in the clear beyond this machine unless
// told to.
func checkListen(cfg config.Config) error {
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %q is not host:port", cfg.Listen)
	}
	if isLoopback(host) || cfg.TLS.Enabled() || cfg.InsecureListen {
		return nil
	}
	return fmt.Errorf("%w %q: configure tls.cert_file and tls.key_file, listen on 127.0.0.1, or pass --insecure-listen (e.g. behind a TLS proxy)", ErrInsecureListen, cfg.Listen)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// trees are the conversations' lower trees: the snapshot of its
// repository at its base commit, or an empty private directory.
type trees struct {
	dir    string
	convs  *store.Conversations
	repos  *repos.Service
	setups *setup.Service
}

// Layers is the conversation's project setup layer, if any.
func (t *trees) Layers(ctx context.Context, user, conversation string) ([]string, error) {
	return t.setups.Layers(ctx, user, conversation)
}

var conversationID = regexp.MustCompile(`^conv_[0-9a-f]{24}$`)

func (t *trees) Lower(ctx context.Context, user, conversation string) (string, error) {
	if !conversationID.MatchString(conversation) {
		return "", fmt.Errorf("not a conversation ID: %q", conversation)
	}
	if c, err := t.convs.Get(ctx, user, conversation); err == nil && c.Repository != "" {
		return t.repos.Snapshot(audit.ForConversation(ctx, user, conversation), c.Repository, c.BaseCommit)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	d := filepath.Join(t.dir, conversation)
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return d, nil
}

// Remove deletes a deleted conversation's tree, and stops its setup.
func (t *trees) Remove(conversation string) error {
	if !conversationID.MatchString(conversation) {
		return fmt.Errorf("not a conversation ID: %q", conversation)
	}
	t.setups.Cancel(conversation)
	return overlay.RemoveAll(filepath.Join(t.dir, conversation))
}

// openRepos opens the repositories (mirrors under <instance>/repos) and
// schedules the collection of snapshots no conversation uses. Indexer is
// nil: it is set when retrieval is enabled.
func openRepos(ctx context.Context, cfg config.Config, inst config.Instance, db *gorm.DB, st stores, log hclog.Logger, ix codeIndex, sb sandboxkit.Settings) (*repos.Service, error) {
	q, sec, convs := st.queue, st.secrets, st.convs
	o := repos.Options{
		DB: db, Queue: q, Secrets: sec, Dir: inst.ReposDir(),
		Indexer: ix.ingest, Unindex: ix.drop,
		Sandbox: git.Sandbox{Settings: sb,
			CheckoutBytes: int64(cfg.Repositories.MaxSnapshotBytes), History: cfg.Repositories.SnapshotHistory},
		ProtectedBranches: cfg.Repositories.ProtectedBranches,
		MaxPatchBytes:     cfg.Repositories.MaxPushBytes,
		DefaultAccess:     cfg.Repositories.DefaultAccess,
		Log:               log.Named("repos"),
	}
	if st.nodes != nil {
		o.Nodes, o.Node = st.nodes.Live, st.nodes.Self()
		o.SharedIndex = cfg.Retrieval.Backend == config.RetrievalWeaviate
	}
	r, err := repos.Open(o)
	if err != nil {
		return nil, err
	}
	// A node new to the deployment fetches what the others have.
	if err := r.CatchUp(ctx); err != nil {
		return nil, err
	}
	q.Handle(repos.KindSnapshotGC, func(ctx context.Context, _ *jobs.Job) (any, error) {
		removed, err := r.GCSnapshots(ctx, func(ctx context.Context) (map[string]bool, error) {
			return convs.RepositoryCommits(ctx, repos.SnapshotName)
		})
		return map[string][]string{"removed": removed}, err
	})
	q.EveryNode("snapshot_gc", cfg.Sandbox.GCInterval.Std(), repos.KindSnapshotGC, nil) // its repos/snapshots
	return r, nil
}

// unconfiguredLLM answers every turn with what to configure.
type unconfiguredLLM struct{}

func (unconfiguredLLM) Stream(context.Context, agentcore.Request) (agentcore.Stream, error) {
	return nil, errors.New("no model is configured: set llm.base_url (and llm.model) in config.yaml to an OpenAI-compatible endpoint and restart")
}

// drain lets a node that shuts down finish its turns first: it takes no
// new conversations (the others place them) and no new turns (503
// shutting_down), while it still serves approvals, history and events,
// for up to cluster.drain_timeout.
func (s *server) drain(ctx context.Context) {
	if err := s.nodes.Drain(ctx); err != nil {
		s.log.Warn("recording that this node drains", "err", err)
	}
	timeout := s.cfg.Load().Cluster.DrainTimeout.Std()
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, _ := s.convs.Running(ctx, s.nodes.Self())
	s.log.Info("draining: waiting for the running turns to end", "turns", n, "timeout", timeout)
	if err := s.engine.Drain(dctx); err != nil {
		s.log.Warn("draining: turns still running after cluster.drain_timeout are interrupted", "timeout", timeout)
	}
}

// nodeName is this server's name among the nodes: cluster.node, or
// the instance's.
func nodeName(cfg config.Config, inst config.Instance) (string, error) {
	if cfg.Cluster.Node != "" {
		return cfg.Cluster.Node, nil
	}
	return inst.NodeID()
}

// joinCluster records this server as node id of the deployment on db,
// with the URL the other nodes forward to (cluster.url, or the address
// it listens on).
func joinCluster(ctx context.Context, cfg config.Config, id string, db *gorm.DB, ln net.Listener, scheme string) (*cluster.Registry, error) {
	url := cfg.Cluster.URL
	if url == "" {
		addr, ok := ln.Addr().(*net.TCPAddr)
		if !ok || addr.IP.IsUnspecified() {
			return nil, fmt.Errorf("cluster.url is not set and the server listens on %s, which the other nodes cannot use: set cluster.url to where they reach this node", ln.Addr())
		}
		url = scheme + "://" + addr.String()
	}
	return cluster.Open(ctx, db, cluster.Node{ID: id, URL: strings.TrimSuffix(url, "/")}, cluster.Options{
		Secret: cfg.Auth.JWTSecret, Heartbeat: cfg.Cluster.Heartbeat.Std(), LostAfter: cfg.Cluster.LostAfter.Std(),
	})
}
