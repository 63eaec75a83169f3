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
	"context"
	_ "embed"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

//go:embed openapi.json
var openAPI []byte

// Deps are what the API serves. All are required but Registry.
type Deps struct {
	Conversations *store.Conversations
	Users         *auth.Users
	Login         *auth.Authenticator
	// Tokens is read on every request: the server swaps it when the
	// configuration's secrets change.
	Tokens  *atomic.Pointer[auth.Tokens]
	Secrets *secrets.Store
	Jobs    *jobs.Queue
	Engine  *agentcore.Engine
	// Workspaces and Layers are the engine's: the diff reads them.
	Workspaces agentcore.Workspaces
	Layers     *overlay.Store
	// Ready reports readiness (GET /readyz).
	Ready func(ctx context.Context) Readiness
	Log   hclog.Logger
	// Registry collects the metrics served at /metrics; nil means a new
	// one.
	Registry *prometheus.Registry
	// Heartbeat is the interval of SSE heartbeat comments (default 15s).
	Heartbeat time.Duration
}

// Readiness is the body of GET /readyz.
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
}

// Server is the HTTP API.
type Server struct {
	d   Deps
	app *fiber.App
	log hclog.Logger

	ctx    context.Context // ends the SSE streams at shutdown
	cancel context.CancelFunc

	metrics metrics
}

// New builds the API.
func New(d Deps) *Server {
	if d.Heartbeat <= 0 {
		d.Heartbeat = 15 * time.Second
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Log == nil {
		d.Log = hclog.NewNullLogger()
	}
	s := &Server{d: d, log: d.Log}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.metrics = newMetrics(d.Registry)
	s.app = fiber.New(fiber.Config{
		AppName:               "codumentor",
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		BodyLimit:             2 << 20,
		ReadTimeout:           30 * time.Second,
		IdleTimeout:           2 * time.Minute,
		// Behind no proxy by default: c.IP() is the peer, which the
		// login rate limit relies on.
		EnableTrustedProxyCheck: true,
	})
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
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	app.Get("/readyz", s.readyz)
	app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(s.d.Registry, promhttp.HandlerOpts{})))

	v1 := app.Group("/api/v1")
	v1.Get("/openapi.json", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(openAPI)
	})
	v1.Post("/auth/login", s.login)

	authed := v1.Group("", s.authenticate)
	authed.Get("/me", s.me)
	authed.Post("/admin/users", s.admin, s.createUser)
	authed.Get("/admin/users", s.admin, s.listUsers)

	authed.Post("/conversations", s.createConversation)
	authed.Get("/conversations", s.listConversations)
	conv := authed.Group("/conversations/:id", s.owned)
	conv.Get("", s.getConversation)
	conv.Delete("", s.deleteConversation)
	conv.Post("/messages", s.postMessage)
	conv.Post("/cancel", s.cancelTurn)
	conv.Get("/events", s.events)
	conv.Get("/approvals", s.listApprovals)
	conv.Post("/approvals/:aid", s.decide)
	conv.Get("/workspace/diff", s.diff)
	conv.Get("/workspace/files", s.files)

	authed.Get("/secrets", s.listSecrets)
	authed.Put("/secrets/:name", s.putSecret)
	authed.Get("/secrets/:name", s.getSecret)
	authed.Delete("/secrets/:name", s.deleteSecret)

	authed.Get("/jobs/:id", s.getJob)

	app.Use(func(c *fiber.Ctx) error { return errNotFound })
}

// Routes lists the routes the API serves (method and OpenAPI path), for
// the document's test.
func (s *Server) Routes() []Route {
	var out []Route
	seen := map[Route]bool{}
	for _, r := range s.app.GetRoutes(true) {
		if r.Method == fiber.MethodHead || r.Method == "USE" {
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

func (s *Server) readyz(c *fiber.Ctx) error {
	r := s.d.Ready(c.UserContext())
	status := http.StatusOK
	if !r.Ready {
		status = http.StatusServiceUnavailable
	}
	return c.Status(status).JSON(r)
}

// user is the authenticated user of the request.
func user(c *fiber.Ctx) auth.User { return c.Locals(localUser).(auth.User) }

type localKey int

const (
	localUser localKey = iota
	localConversation
)

// authenticate admits requests with a valid bearer token of an existing,
// enabled user. Every failure is the same 401.
func (s *Server) authenticate(c *fiber.Ctx) error {
	h := c.Get(fiber.HeaderAuthorization)
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return errUnauthorized
	}
	claims, err := s.d.Tokens.Load().Verify(tok)
	if err != nil {
		s.log.Debug("token refused", "ip", c.IP(), "err", err)
		return errUnauthorized
	}
	u, err := s.d.Users.ByID(c.UserContext(), claims.UserID)
	if errors.Is(err, auth.ErrUserNotFound) {
		return errUnauthorized
	}
	if err != nil {
		return err
	}
	if u.Disabled {
		return errUnauthorized
	}
	c.Locals(localUser, u)
	return c.Next()
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
