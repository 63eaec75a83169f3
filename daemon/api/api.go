// Package api is the server's HTTP API (Fiber v2): JSON under /api/v1,
// server-sent events for conversations, and the health, readiness and
// metrics endpoints. The OpenAPI document it serves (openapi.json) lists
// every route; a test keeps the two in sync.
//
// Every /api/v1 route but auth/login needs a bearer token. Every route
// under /api/v1/conversations/{id} goes through one ownership check
// (owned), where another user's conversation and an unknown ID give the
// same 404 by the same query.
package api

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"golang.org/x/sync/semaphore"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/approvalrule"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/cluster"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/web"
	"github.com/codumentor/codumentor/integrations/mcp"
	"github.com/codumentor/codumentor/integrations/retrieval"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

//go:embed openapi.json
var openAPI []byte

// Setups runs the project setups (daemon/setup.Service).
type Setups interface {
	// Record records, in tx (the transaction creating conversation on
	// r), that its setup is to run if r has run_setup; its error undoes
	// the conversation.
	Record(tx *gorm.DB, conversation string, r repos.Repository) error
	// Start begins the setup Record recorded, once tx is committed; it
	// returns at once.
	Start(user, conversation string)
}

// Deps are what the API serves. All are required but Registry.
type Deps struct {
	// Setups, if set, runs the project setup of conversations started
	// on a repository with run_setup.
	Setups        Setups
	Conversations *store.Conversations
	Users         *auth.Users
	Login         *auth.Authenticator
	// OIDC signs users in with OpenID providers; nil: none configured.
	OIDC *auth.OIDC
	// Tokens is read on every request: the server swaps it when the
	// configuration's secrets change.
	Tokens  *atomic.Pointer[auth.Tokens]
	Secrets *secrets.Store
	Jobs    *jobs.Queue
	Engine  *agentcore.Engine
	// Workspaces and Layers are the engine's: the diff reads them.
	Workspaces agentcore.Workspaces
	Layers     *overlay.Store
	// Repositories are the instance's repositories and push gateway.
	Repositories *repos.Service
	// Ready reports readiness (GET /readyz).
	Ready func(ctx context.Context) Readiness
	Log   hclog.Logger
	// Registry collects the metrics served at /metrics; nil means a new
	// one.
	Registry *prometheus.Registry
	// Heartbeat is the interval of SSE heartbeat comments (default 15s);
	// at each, the stream's token and user are checked again.
	Heartbeat time.Duration
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client (config trusted_proxies); empty: the peer is the client.
	TrustedProxies []netip.Prefix
	// Limits bound what clients hold open.
	Limits Limits
	// MCP runs the mcp plugin's servers; nil when it is not enabled.
	MCP *mcp.Manager
	// Investigation allows host read-only conversations.
	Investigation Investigation
	// Cluster is the deployment's nodes when several servers share the
	// database; nil: this server is the only one. A request that needs a
	// conversation's workspace or runs its turns is forwarded to the
	// conversation's home node (forward.go).
	Cluster *cluster.Registry
	// Attachments serves conversations' attachments; nil: none.
	Attachments *Attachments
	// Usage is the model calls' usage and the users' quotas.
	Usage *store.Usage
	// Search answers GET /api/v1/search; nil answers 503.
	Search *retrieval.Searcher
	// DB is the instance database: the audit log (GET /admin/audit).
	DB *gorm.DB
	// Diagrams renders POST /render/diagram; nil: the plugin is off.
	Diagrams DiagramRenderer
	// LLM is the current llm configuration, read at each use: the
	// endpoints model profiles may name. nil: none.
	LLM func() config.LLM
	// StorageDirs are the instance's directories by name (data,
	// workspaces, repos, logs), whose file systems' free space /metrics
	// reports.
	StorageDirs map[string]string
	// MetricsToken, if set, is the bearer token GET /metrics needs
	// (metrics.token); empty: /metrics is public.
	MetricsToken string
	// ApprovalRules stores users' own approval rules; UserRules is the
	// current sandbox.user_rules, within which they may add them. Either
	// nil: users add none.
	ApprovalRules *store.ApprovalRules
	UserRules     func() []approvalrule.Rule
	// SystemPrompt is the engine's system prompt template, and
	// AutoApproved describes the approval rules that approve a user's
	// workspace commands (nil: none), for GET /admin/system-prompt.
	SystemPrompt SystemPrompt
	AutoApproved func(ctx context.Context, user string) ([]string, error)
}

// Limits bound what clients hold open; zero values are the defaults.
type Limits struct {
	// HeaderTimeout closes a connection that sends no request header in
	// this time (default 10s); the body then has 30 s more.
	HeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long (default
	// 2m).
	IdleTimeout time.Duration
	// MaxStreams caps all open event streams (default 1024).
	MaxStreams int
	// MaxStreamsPerUser caps one user's open event streams (default 16).
	MaxStreamsPerUser int
	// MaxBodyBytes caps the bytes of request bodies held in memory at
	// once (default 32 MiB); past it a request answers 503 busy.
	MaxBodyBytes int64
}

// bodyTimeout bounds reading a request's body once its header is in.
const bodyTimeout = 30 * time.Second

// Readiness is the result of the readiness checks: the body of GET
// /api/v1/admin/doctor. GET /readyz, which anyone may call, answers only
// whether the server is ready and the names of failing checks: the
// details name host paths and versions.
type Readiness struct {
	Ready    bool     `json:"ready"`
	Checks   []Check  `json:"checks"`
	Warnings []string `json:"warnings,omitempty"`
}

// Check is one readiness check.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	Remedy string `json:"remedy,omitempty"`
	// Warning marks a check that passes with less protection than it
	// could have (the browser without Chrome's sandbox); Remedy says how
	// to close it.
	Warning bool `json:"warning,omitempty"`
}

// Server is the HTTP API.
type Server struct {
	d   Deps
	app *fiber.App
	log hclog.Logger

	ctx    context.Context // ends the SSE streams at shutdown
	cancel context.CancelFunc

	metrics metrics
	streams streams
	// bodies is the budget of request bodies in memory (readBody).
	bodies *semaphore.Weighted

	// hostWarned: the Origin/Host port mismatch of a misconfigured
	// reverse proxy has been logged (once: sameOrigin).
	hostWarned atomic.Bool
}

// New builds the API.
func New(d Deps) *Server { return newServer(d, true) }

// newServer builds the API; immutable false is only for the benchmark
// that measures what Immutable costs.
func newServer(d Deps, immutable bool) *Server {
	if d.Heartbeat <= 0 {
		d.Heartbeat = 15 * time.Second
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Log == nil {
		d.Log = hclog.NewNullLogger()
	}
	l := &d.Limits
	l.HeaderTimeout = cmp.Or(l.HeaderTimeout, 10*time.Second)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, 2*time.Minute)
	l.MaxStreams = cmp.Or(l.MaxStreams, 1024)
	l.MaxStreamsPerUser = cmp.Or(l.MaxStreamsPerUser, 16)
	l.MaxBodyBytes = cmp.Or(l.MaxBodyBytes, defaultMaxBodyBytes)
	s := &Server{d: d, log: d.Log, streams: streams{perUser: map[string]int{}}, bodies: semaphore.NewWeighted(l.MaxBodyBytes)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.metrics = newMetrics(d.Registry, d)
	s.app = fiber.New(fiber.Config{
		AppName:               "codumentor",
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		BodyLimit:             d.bodyLimit(),
		// No body is read before readBody, which holds each route to its
		// limit after looking at the header, and leaves the upload's
		// body to its handler, after authentication.
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		// Fiber's strings (c.Method, c.Params, c.Query, c.Get, c.Body)
		// otherwise alias request buffers that the next request on any
		// connection reuses: a metrics label kept c.Method() and later
		// read "GETT". Immutable copies them, at a cost measured by
		// BenchmarkImmutable (scripts/bench): one rule for every handler
		// and goroutine (the SSE stream outlives its request) instead of
		// a copy at each boundary that the next edit can forget.
		Immutable: immutable,
		// ReadTimeout is the header's: a connection that sends nothing
		// is closed after it; the body gets bodyTimeout (HeaderReceived).
		ReadTimeout: l.HeaderTimeout,
		IdleTimeout: l.IdleTimeout,
		// c.IP() is the peer; clientIP reads X-Forwarded-For from
		// trusted proxies.
		EnableTrustedProxyCheck: true,
	})
	maxBody := d.bodyLimit()
	s.app.Server().HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		rc := fasthttp.RequestConfig{ReadTimeout: bodyTimeout}
		if h.ContentLength() > maxBody {
			// No route takes it: fasthttp hands it on at its first byte
			// instead of after 8 KiB, and readBody refuses it unread.
			rc.MaxRequestBodySize = 1
		}
		return rc
	}
	s.routes()
	return s
}

// App is the Fiber application, for Listen and tests.
func (s *Server) App() *fiber.App { return s.app }

// Shutdown ends the SSE streams, then stops the server, waiting at most
// timeout for requests in flight.
func (s *Server) Shutdown(timeout time.Duration) error {
	s.cancel()
	return s.app.ShutdownWithTimeout(timeout)
}

// Route is one documented route.
type Route struct{ Method, Path string }

func (s *Server) routes() {
	app := s.app
	app.Use(s.metrics.middleware)
	app.Use(s.readBody)
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	app.Get("/readyz", s.readyz)
	app.Get("/metrics", s.serveMetrics())

	v1 := app.Group("/api/v1")
	v1.Get("/openapi.json", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(openAPI)
	})
	v1.Post("/auth/login", s.login)

	authed := chain{r: v1, mw: []fiber.Handler{s.authenticate}}
	authed.Post("/auth/logout", s.logout)
	authed.Get("/me", s.me)
	authed.Get("/me/approval-rules", s.listRules)
	authed.Post("/me/approval-rules", s.addRule)
	authed.Delete("/me/approval-rules/:rid", s.deleteRule)
	authed.Post("/admin/users", s.admin, s.createUser)
	authed.Get("/admin/users", s.admin, s.listUsers)
	authed.Patch("/admin/users/:id", s.admin, s.updateUser)
	authed.Get("/admin/doctor", s.admin, s.doctor)
	authed.Get("/admin/mcp", s.admin, s.adminMCP)
	authed.Get("/admin/audit", s.admin, s.adminAudit)
	authed.Get("/admin/audit/verify", s.admin, s.verifyAudit)
	authed.Get("/admin/system-prompt", s.admin, s.adminSystemPrompt)
	authed.Get("/me/usage", s.myUsage)
	authed.Get("/admin/usage", s.admin, s.adminUsage)
	authed.Get("/admin/users/:id/quota", s.admin, s.getQuota)
	authed.Put("/admin/users/:id/quota", s.admin, s.putQuota)

	authed.Post("/conversations", s.createConversation)
	authed.Get("/conversations", s.listConversations)
	conv := authed.group("/conversations/:id", s.owned)
	// What reads the history is served by any node; what needs the
	// workspace, the sandbox or the running turn, by the home node.
	home := conv.group("", s.atHome)
	conv.Get("", s.getConversation)
	home.Patch("", s.updateConversation)
	home.Delete("", s.deleteConversation)
	home.Post("/messages", s.postMessage)
	conv.Get("/messages", s.listMessages)
	home.Put("/messages/:mid", s.editMessage)
	home.Post("/messages/:mid/regenerate", s.regenerate)
	home.Post("/messages/:mid/fork", s.forkConversation)
	home.Post("/turns/:tid/revert", s.revertTurn)
	home.Post("/cancel", s.cancelTurn)
	conv.Get("/events", s.events)
	conv.Get("/approvals", s.listApprovals)
	conv.Get("/context", s.conversationContext)
	home.Post("/approvals/:aid", s.decide)
	home.Post("/approvals/:aid/rule", s.allowRule)
	home.Get("/workspace/diff", s.diff)
	home.Get("/workspace/files", s.files)
	home.Post("/workspace/push", s.push)
	home.Post("/workspace/discard", s.discardWorkspace)

	authed.Post("/repositories", s.admin, s.createRepository)
	authed.Get("/repositories", s.listRepositories)
	// Every route under /repositories/{id} passes the one access check
	// (readable) first: one the user may not read is not found.
	repo := authed.group("/repositories/:id", s.readable)
	repo.Get("", s.getRepository)
	repo.Delete("", s.admin, s.deleteRepository)
	repo.Post("/sync", s.repoAdmin, s.syncRepository)
	repo.Get("/access", s.repoAdmin, s.getAccess)
	repo.Put("/access", s.repoAdmin, s.putAccess)
	authed.Get("/admin/groups", s.admin, s.listGroups)
	authed.Post("/admin/groups", s.admin, s.createGroup)
	authed.Delete("/admin/groups/:name", s.admin, s.deleteGroup)
	authed.Put("/admin/groups/:name/members/:user", s.admin, s.setGroupMember(true))
	authed.Delete("/admin/groups/:name/members/:user", s.admin, s.setGroupMember(false))
	authed.Get("/admin/secrets", s.admin, s.listInstanceSecrets)
	authed.Put("/admin/secrets/:name", s.admin, s.putInstanceSecret)
	home.Post("/attachments", s.uploadAttachment)
	home.Get("/attachments", s.listAttachments)
	home.Get("/attachments/:aid/text", s.attachmentText)
	home.Get("/sandbox/violations", s.violations)

	authed.Get("/secrets", s.listSecrets)
	authed.Put("/secrets/:name", s.putSecret)
	authed.Get("/secrets/:name", s.getSecret)
	authed.Delete("/secrets/:name", s.deleteSecret)

	authed.Get("/model-profiles", s.listModelProfiles)
	authed.Get("/model-profiles/:name", s.getModelProfile)
	authed.Put("/model-profiles/:name", s.putModelProfile)
	authed.Delete("/model-profiles/:name", s.deleteModelProfile)

	authed.Get("/jobs/:id", s.getJob)
	authed.Get("/search", s.search)
	authed.Post("/render/diagram", s.renderDiagram)
	authed.Post("/render/markdown", s.renderMarkdown)

	web.Mount(app, s)
	app.Use(func(c *fiber.Ctx) error { return errNotFound })
}

// chain registers routes under prefix whose handlers begin with mw, in
// each route's own handler chain rather than a group's Use: a request
// that mw refuses (401, 403, 404) is then counted under the route it
// called, not the group's prefix.
type chain struct {
	r      fiber.Router
	prefix string
	mw     []fiber.Handler
}

// group is a chain under ch's prefix plus prefix whose handlers begin
// with ch's and mw.
func (ch chain) group(prefix string, mw ...fiber.Handler) chain {
	return chain{r: ch.r, prefix: ch.prefix + prefix, mw: append(slices.Clone(ch.mw), mw...)}
}

func (ch chain) add(method, path string, h []fiber.Handler) {
	ch.r.Add(method, ch.prefix+path, append(slices.Clone(ch.mw), h...)...)
	if method == fiber.MethodGet {
		ch.r.Add(fiber.MethodHead, ch.prefix+path, append(slices.Clone(ch.mw), h...)...)
	}
}

func (ch chain) Get(path string, h ...fiber.Handler)    { ch.add(fiber.MethodGet, path, h) }
func (ch chain) Post(path string, h ...fiber.Handler)   { ch.add(fiber.MethodPost, path, h) }
func (ch chain) Put(path string, h ...fiber.Handler)    { ch.add(fiber.MethodPut, path, h) }
func (ch chain) Patch(path string, h ...fiber.Handler)  { ch.add(fiber.MethodPatch, path, h) }
func (ch chain) Delete(path string, h ...fiber.Handler) { ch.add(fiber.MethodDelete, path, h) }

// Routes lists the routes the API serves (method and OpenAPI path), for
// the document's test; the web UI's pages (package web) are not API.
func (s *Server) Routes() []Route {
	var out []Route
	seen := map[Route]bool{}
	for _, r := range s.app.GetRoutes(true) {
		if r.Method == fiber.MethodHead || r.Method == "USE" || r.Name == web.RouteName {
			continue
		}
		p := r.Path
		parts := strings.Split(p, "/")
		for i, part := range parts {
			if strings.HasPrefix(part, ":") {
				parts[i] = "{" + part[1:] + "}"
			}
		}
		rt := Route{r.Method, strings.TrimSuffix(strings.Join(parts, "/"), "/")}
		if !seen[rt] {
			seen[rt] = true
			out = append(out, rt)
		}
	}
	return out
}

// readyz answers anyone: ready or not, and which checks fail, by name.
func (s *Server) readyz(c *fiber.Ctx) error {
	r := s.d.Ready(c.UserContext())
	failing := []string{}
	for _, ch := range r.Checks {
		if !ch.OK {
			failing = append(failing, ch.Name)
		}
	}
	status := http.StatusOK
	if !r.Ready {
		status = http.StatusServiceUnavailable
	}
	return c.Status(status).JSON(fiber.Map{"ready": r.Ready, "failing": failing})
}

// doctor is the readiness checks with their details, for admins.
func (s *Server) doctor(c *fiber.Ctx) error { return c.JSON(s.d.Ready(c.UserContext())) }

// user is the authenticated user of the request.
func user(c *fiber.Ctx) auth.User { return c.Locals(localUser).(auth.User) }

type localKey int

const (
	localUser localKey = iota
	localConversation
	localRepository
	// localToken is the request's bearer token, valid only during the
	// request (Fiber reuses the header's buffer): clone it to keep it.
	localToken
	// localBody is an upload's streamed body (readBody).
	localBody
)

// authenticate admits requests with a valid bearer token (or, without
// one, browser session cookie: authenticateCookie) of an existing,
// enabled user that has not revoked it. The scheme's case does not
// matter (RFC 9110 §11.1). Every failure is the same 401.
func (s *Server) authenticate(c *fiber.Ctx) error {
	if c.Get(fiber.HeaderAuthorization) == "" {
		if tok := c.Cookies(s.sessionCookie(c)); tok != "" {
			return s.authenticateCookie(c, tok)
		}
	}
	scheme, tok, _ := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
	tok = strings.TrimLeft(tok, " ")
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return errUnauthorized
	}
	u, err := s.identify(c.UserContext(), tok)
	if errors.Is(err, auth.ErrInvalidToken) {
		s.log.Debug("token refused", "ip", s.clientIP(c), "err", err)
		return errUnauthorized
	}
	if err != nil {
		return err
	}
	c.Locals(localUser, u)
	c.Locals(localToken, tok)
	return c.Next()
}

// identify is the user a bearer token speaks for; an error wrapping
// auth.ErrInvalidToken if it is bad, expired or revoked, or its user is
// gone or disabled. Every request checks it, and an event stream at
// every heartbeat.
func (s *Server) identify(ctx context.Context, tok string) (auth.User, error) {
	u, _, err := s.session(ctx, tok)
	return u, err
}

// session is identify, also returning the token's claims (a cookie
// session's CSRF token is derived from their ID).
func (s *Server) session(ctx context.Context, tok string) (auth.User, auth.Claims, error) {
	claims, err := s.d.Tokens.Load().Verify(tok)
	if err != nil {
		return auth.User{}, claims, err
	}
	u, err := s.d.Users.ForToken(ctx, claims)
	return u, claims, err
}

func (s *Server) admin(c *fiber.Ctx) error {
	if user(c).Role != auth.RoleAdmin {
		return errForbidden
	}
	return c.Next()
}

// owned is the one ownership check of conversation routes: the
// conversation is looked up by ID and owner together, so another user's
// ID and an unknown one take the same path to the same 404.
func (s *Server) owned(c *fiber.Ctx) error {
	conv, err := s.d.Conversations.Get(c.UserContext(), user(c).ID, c.Params("id"))
	if errors.Is(err, agentcore.ErrNotFound) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	c.Locals(localConversation, conv)
	return c.Next()
}

func conversation(c *fiber.Ctx) store.Conversation {
	return c.Locals(localConversation).(store.Conversation)
}
