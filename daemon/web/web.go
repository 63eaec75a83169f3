// Package web is the browser UI, served by the server at /: Go
// html/template pages and a little plain JavaScript (ES modules), all
// embedded, that call the JSON API with the session cookie.
//
// Model output, file names and diffs are hostile input to the page.
// Every page is sent with a strict Content-Security-Policy (scripts only
// from this origin, no inline script or style attribute, no plugins, no
// framing, forms only to this origin), nosniff and no Referer to
// other origins. Templates
// escape what they print; the scripts insert text with textContent and
// HTML only from the server's Markdown renderer (Markdown), which drops
// raw HTML and unsafe link targets.
//
// A page needs a session (the cookie the sign-in form sets); without one
// it redirects to /login. Authentication, CSRF tokens and the ownership
// check are the API's (Backend): a page reads a conversation by the same
// query as every conversation route, so a foreign ID is 404 here too.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// CSP is every page's Content-Security-Policy.
const CSP = "default-src 'self'; script-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// RouteName names the routes Mount adds (fiber.Route.Name), so that the
// API's route list can leave them out.
const RouteName = "web"

var (
	// ErrNoSession is Backend.Session's answer to a request without a
	// valid session cookie.
	ErrNoSession = errors.New("web: not signed in")
	// ErrNotFound is Backend.Conversation's answer to an unknown or
	// foreign conversation ID.
	ErrNotFound = errors.New("web: no such conversation")
)

// Session is a signed-in browser.
type Session struct {
	User auth.User
	// CSRF is the session's anti-forgery token, which every state
	// changing request must carry.
	CSRF string
}

// Backend is what the pages need of the API: its sessions and its one
// ownership check.
type Backend interface {
	// Session is the request's session, or ErrNoSession.
	Session(c *fiber.Ctx) (Session, error)
	// SignIn checks the credentials (the API's login path and limiter)
	// and sets the session cookie; an error's message can be shown.
	SignIn(c *fiber.Ctx, username, password string) error
	// SignOut revokes the session (after checking the form's Origin and
	// CSRF token) and clears the cookie. A URL it returns ends the
	// session at the user's OpenID provider too: the browser goes there.
	SignOut(c *fiber.Ctx, s Session) (string, error)
	// OIDCProviders are the OpenID providers the sign-in page offers.
	OIDCProviders() []Provider
	// OIDCBegin starts a sign-in with provider name (then to local path
	// next): the provider's URL to send the browser to.
	OIDCBegin(c *fiber.Ctx, name, next string) (string, error)
	// OIDCCallback completes a sign-in at the provider's redirect back and
	// sets the session cookie: the local path to go to.
	OIDCCallback(c *fiber.Ctx, name string) (string, error)
	// Conversation is s's conversation id, or ErrNotFound.
	Conversation(c *fiber.Ctx, s Session, id string) (store.Conversation, error)
	// MayInvestigate reports whether s may start host read-only
	// investigations.
	MayInvestigate(s Session) bool
}

// Provider is an OpenID provider the sign-in page offers.
type Provider struct {
	Name, Label string
}

// page is what a template gets.
type page struct {
	Title   string
	Page    string // data-page: which script part runs
	Session Session
	Admin   bool
	Nav     string
	Conv    store.Conversation
	Error   string
	Next    string
	// Investigate offers the host read-only mode for a new conversation.
	Investigate bool
	// Providers are the sign-in page's OpenID providers.
	Providers []Provider
	// Refresh, if set, is where the page sends the browser at once.
	Refresh string
}

type ui struct {
	b     Backend
	pages map[string]*template.Template
	// static holds the assets by name, with their ETags.
	static map[string]asset
}

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Mount adds the UI's routes to app: the pages, /login, /logout and
// /static/.
func Mount(app fiber.Router, b Backend) {
	u := &ui{b: b, pages: map[string]*template.Template{}, static: map[string]asset{}}
	names, _ := fs.Glob(templateFS, "templates/*.html")
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" {
			continue
		}
		u.pages[strings.TrimSuffix(base, ".html")] = template.Must(template.ParseFS(templateFS, "templates/layout.html", n))
	}
	fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, _ := staticFS.ReadFile(p)
		ctype := "text/javascript; charset=utf-8"
		switch path.Ext(p) {
		case ".css":
			ctype = "text/css; charset=utf-8"
			body = append(body, chromaCSS()...)
		case ".svg":
			ctype = "image/svg+xml"
		}
		sum := sha256.Sum256(body)
		u.static[path.Base(p)] = asset{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})

	get := func(p string, h fiber.Handler) { app.Get(p, headers, h).Name(RouteName) }
	get("/static/:name", u.asset)
	// Browsers ask for /favicon.ico whatever the page links.
	get("/favicon.ico", func(c *fiber.Ctx) error { return u.send(c, u.static["favicon.svg"]) })
	get("/login", u.loginPage)
	app.Post("/login", headers, u.signIn).Name(RouteName)
	app.Post("/logout", headers, u.signOut).Name(RouteName)
	get("/auth/oidc/:name/start", u.oidcStart)
	get("/auth/oidc/:name/callback", u.oidcCallback)
	get("/", u.show("conversations", "Conversations", "conversations", false))
	get("/c/:id", u.conversation("conversation"))
	get("/c/:id/workspace", u.conversation("workspace"))
	get("/secrets", u.show("secrets", "Secrets", "secrets", false))
	get("/profiles", u.show("profiles", "Model profiles", "profiles", false))
	get("/admin/users", u.show("users", "Users", "admin", true))
	get("/admin/repositories", u.show("repositories", "Repositories", "admin", true))
	get("/admin/mcp", u.show("mcp", "MCP servers", "admin", true))
	get("/admin/doctor", u.show("doctor", "Sandbox doctor", "admin", true))
	get("/admin/system-prompt", u.show("sysprompt", "System prompt", "admin", true))
	get("/search", u.show("search", "Code search", "search", false))
	get("/usage", u.show("usage", "Usage", "usage", false))
	get("/admin/audit", u.show("audit", "Audit log", "admin", true))
}

// headers sets the security headers of every page and asset.
func headers(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentSecurityPolicy, CSP)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	// Not no-referrer: under it a browser sends "Origin: null" on the
	// pages' own POSTs, which the Origin check must refuse. same-origin
	// sends no Referer to any other origin either.
	c.Set(fiber.HeaderReferrerPolicy, "same-origin")
	c.Set(fiber.HeaderXFrameOptions, "DENY")
	return c.Next()
}

func (u *ui) asset(c *fiber.Ctx) error {
	a, ok := u.static[c.Params("name")]
	if !ok {
		return c.Status(http.StatusNotFound).SendString("not found")
	}
	return u.send(c, a)
}

func (u *ui) send(c *fiber.Ctx, a asset) error {
	c.Set(fiber.HeaderETag, a.etag)
	c.Set(fiber.HeaderCacheControl, "no-cache")
	if c.Get(fiber.HeaderIfNoneMatch) == a.etag {
		return c.SendStatus(http.StatusNotModified)
	}
	c.Set(fiber.HeaderContentType, a.ctype)
	return c.Send(a.body)
}

func (u *ui) render(c *fiber.Ctx, status int, name string, p page) error {
	var b bytes.Buffer
	if err := u.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(status).Send(b.Bytes())
}

// session is the request's session; without one, the answer is a
// redirect to the sign-in page (ok false).
func (u *ui) session(c *fiber.Ctx) (Session, bool, error) {
	s, err := u.b.Session(c)
	if errors.Is(err, ErrNoSession) {
		return s, false, c.Redirect("/login?next="+url.QueryEscape(c.OriginalURL()), http.StatusSeeOther)
	}
	return s, err == nil, err
}

func (u *ui) show(name, title, nav string, admin bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		s, ok, err := u.session(c)
		if !ok {
			return err
		}
		isAdmin := s.User.Role == auth.RoleAdmin
		if admin && !isAdmin {
			return u.render(c, http.StatusForbidden, "error", page{Title: "Not allowed", Session: s, Error: "This page needs the admin role."})
		}
		return u.render(c, http.StatusOK, name, page{Title: title, Page: name, Session: s, Admin: isAdmin, Nav: nav, Investigate: name == "conversations" && u.b.MayInvestigate(s)})
	}
}

func (u *ui) conversation(name string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		s, ok, err := u.session(c)
		if !ok {
			return err
		}
		conv, err := u.b.Conversation(c, s, c.Params("id"))
		if errors.Is(err, ErrNotFound) {
			return u.render(c, http.StatusNotFound, "error", page{Title: "Not found", Session: s, Admin: s.User.Role == auth.RoleAdmin, Error: "No such conversation."})
		}
		if err != nil {
			return err
		}
		title := conv.Title
		if title == "" {
			title = "Conversation"
		}
		return u.render(c, http.StatusOK, name, page{Title: title, Page: name, Session: s, Admin: s.User.Role == auth.RoleAdmin, Nav: "conversations", Conv: conv})
	}
}

func (u *ui) loginPage(c *fiber.Ctx) error {
	return u.login(c, http.StatusOK, "", safeNext(c.Query("next")))
}

// login renders the sign-in page.
func (u *ui) login(c *fiber.Ctx, status int, msg, next string) error {
	return u.render(c, status, "login", page{Title: "Sign in", Page: "login", Error: msg, Next: next, Providers: u.b.OIDCProviders()})
}

// statusMessage is err's answer, if it has one to show.
func statusMessage(err error) (int, string) {
	var se interface{ StatusMessage() (int, string) }
	if errors.As(err, &se) {
		return se.StatusMessage()
	}
	return http.StatusInternalServerError, "Signing in failed; the server log has the details."
}

// oidcStart sends the browser to an OpenID provider to sign in. A link,
// not a form: the page's CSP (form-action 'self') would stop a form's
// redirect to the provider.
func (u *ui) oidcStart(c *fiber.Ctx) error {
	next := safeNext(c.Query("next"))
	to, err := u.b.OIDCBegin(c, c.Params("name"), next)
	if err != nil {
		status, msg := statusMessage(err)
		return u.login(c, status, msg, next)
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Redirect(to, http.StatusSeeOther)
}

// oidcCallback is where the provider sends the browser back. On success
// the page moves on by itself rather than by a redirect: this request
// came from the provider's site, and a browser does not send the
// SameSite=Strict session cookie on a redirect that such a navigation
// led to, only on a navigation this origin starts.
func (u *ui) oidcCallback(c *fiber.Ctx) error {
	next, err := u.b.OIDCCallback(c, c.Params("name"))
	if err != nil {
		status, msg := statusMessage(err)
		return u.login(c, status, msg, "/")
	}
	next = safeNext(next)
	return u.render(c, http.StatusOK, "continue", page{Title: "Signed in", Page: "continue", Next: next, Refresh: next})
}

// safeNext is where to go after signing in: a path on this server only.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n\t") {
		return "/"
	}
	return next
}

func (u *ui) signIn(c *fiber.Ctx) error {
	next := safeNext(c.FormValue("next"))
	err := u.b.SignIn(c, c.FormValue("username"), c.FormValue("password"))
	if err != nil {
		status, msg := statusMessage(err)
		return u.login(c, status, msg, next)
	}
	return c.Redirect(next, http.StatusSeeOther)
}

func (u *ui) signOut(c *fiber.Ctx) error {
	s, err := u.b.Session(c)
	if errors.Is(err, ErrNoSession) {
		return c.Redirect("/login", http.StatusSeeOther)
	}
	if err != nil {
		return err
	}
	end, err := u.b.SignOut(c, s)
	if err != nil {
		var se interface{ StatusMessage() (int, string) }
		if errors.As(err, &se) {
			status, msg := se.StatusMessage()
			return u.render(c, status, "error", page{Title: "Not signed out", Session: s, Error: msg})
		}
		return err
	}
	if end != "" {
		// Not a redirect: the form's CSP (form-action 'self') would stop
		// one to the provider.
		return u.render(c, http.StatusOK, "continue", page{Title: "Signed out", Page: "continue", Next: end, Refresh: end,
			Error: "You are signed out here; the sign-in provider ends its session next."})
	}
	return c.Redirect("/login", http.StatusSeeOther)
}
