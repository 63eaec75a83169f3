package api

import (
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/web"
)

// Browser sessions. The web UI (package web) signs in through the same
// login path as POST /auth/login, and keeps the token in an HttpOnly,
// SameSite=Strict cookie instead of handing it to script. authenticate
// accepts that cookie as it accepts a bearer token; a request that
// changes state with it must also come from the server's own origin
// (Origin, else Referer) and carry the session's CSRF token (header
// X-CSRF-Token, or form field csrf_token). Bearer requests are not
// affected: no browser sends an Authorization header by itself.

// SessionCookie names the browser session's cookie; under TLS it is
// "__Host-" + SessionCookie, a name browsers accept only from this very
// host (Secure, Path=/, no Domain): a sibling subdomain cannot toss its
// own session into the browser (login CSRF), and the plain name is
// then not read.
const SessionCookie = "codumentor_session"

// sessionCookie is the request's session cookie's name (SessionCookie).
func (s *Server) sessionCookie(c *fiber.Ctx) string { return s.hostCookie(c, SessionCookie) }

// hostCookie is cookie name's name for the request: "__Host-" + name
// under TLS (see SessionCookie).
func (s *Server) hostCookie(c *fiber.Ctx, name string) string {
	if s.secure(c) {
		return "__Host-" + name
	}
	return name
}

// HeaderCSRF carries a cookie session's CSRF token on a fetch.
const HeaderCSRF = "X-CSRF-Token"

var (
	errCrossOrigin = &Error{Status: http.StatusForbidden, Code: "cross_origin", Message: "a browser request that changes state must come from this server's own pages (Origin)"}
	errCSRF        = &Error{Status: http.StatusForbidden, Code: "csrf", Message: "missing or wrong CSRF token: reload the page"}
)

// authenticateCookie admits a request by its session cookie: like a
// bearer token, and for a method that can change state, only from this
// origin with the session's CSRF token.
func (s *Server) authenticateCookie(c *fiber.Ctx, tok string) error {
	u, claims, err := s.session(c.UserContext(), tok)
	if errors.Is(err, auth.ErrInvalidToken) {
		s.log.Debug("session cookie refused", "ip", s.clientIP(c), "err", err)
		return errUnauthorized
	}
	if err != nil {
		return err
	}
	switch c.Method() {
	case fiber.MethodGet, fiber.MethodHead, fiber.MethodOptions:
	default:
		if !s.sameOrigin(c) {
			return errCrossOrigin
		}
		csrf := c.Get(HeaderCSRF)
		// The form field only from a urlencoded form: a multipart body
		// (an upload) is not parsed into memory here to look for it.
		if csrf == "" && strings.HasPrefix(c.Get(fiber.HeaderContentType), fiber.MIMEApplicationForm) {
			csrf = c.FormValue("csrf_token")
		}
		if !s.d.Tokens.Load().CheckCSRF(claims.ID, csrf) {
			return errCSRF
		}
	}
	// Not kept in the browser's cache (a shared machine, after sign-out).
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Locals(localUser, u)
	c.Locals(localToken, tok)
	return c.Next()
}

// secure reports whether the client reached us over TLS: directly, or
// through a trusted proxy that says so.
func (s *Server) secure(c *fiber.Ctx) bool {
	if c.Context().IsTLS() {
		return true
	}
	if f := s.forwarded(c); f.ok {
		return f.proto == "https"
	}
	peer, ok := netip.AddrFromSlice(c.Context().RemoteIP())
	if !ok || !slices.ContainsFunc(s.d.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(peer.Unmap()) }) {
		return false
	}
	return strings.EqualFold(c.Get(fiber.HeaderXForwardedProto), "https")
}

// sameOrigin reports whether the request names this server's origin in
// Origin or, without it, Referer. Without either it is refused: every
// browser this UI supports sends Origin on a POST.
func (s *Server) sameOrigin(c *fiber.Ctx) bool {
	own := s.origin(c)
	if o := c.Get(fiber.HeaderOrigin); o != "" {
		if strings.EqualFold(o, own) {
			return true
		}
		s.warnHost(o, strings.ToLower(string(c.Request().Host())))
		return false
	}
	u, err := url.Parse(c.Get(fiber.HeaderReferer))
	return err == nil && u.Host != "" && strings.EqualFold(u.Scheme+"://"+u.Host, own)
}

// origin is this server's origin as the browser reached it.
func (s *Server) origin(c *fiber.Ctx) string {
	scheme := "http"
	if s.secure(c) {
		scheme = "https"
	}
	return scheme + "://" + string(c.Request().Host())
}

// warnHost logs, once, a refused Origin that names this host on another
// port than Host does: the mark of a reverse proxy that rewrites Host
// without the port (nginx's "proxy_set_header Host $host"), which would
// otherwise refuse every browser sign-in without a word in the log.
func (s *Server) warnHost(origin, host string) {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return
	}
	oh, op := u.Hostname(), u.Port()
	hh, hp, err := net.SplitHostPort(host)
	if err != nil {
		hh, hp = strings.Trim(host, "[]"), ""
	}
	if !strings.EqualFold(oh, hh) || op == hp || !s.hostWarned.CompareAndSwap(false, true) {
		return
	}
	s.log.Warn("browser requests are refused as cross-origin: their Origin names another port than the Host header the server received; a reverse proxy must pass the Host as the browser sent it (nginx: proxy_set_header Host $http_host, not $host, which drops the port)",
		"origin", origin, "host", host)
}

// The web.Backend the UI's pages use.

// Session is the request's browser session, or web.ErrNoSession.
func (s *Server) Session(c *fiber.Ctx) (web.Session, error) {
	tok := c.Cookies(s.sessionCookie(c))
	if tok == "" {
		return web.Session{}, web.ErrNoSession
	}
	u, claims, err := s.session(c.UserContext(), tok)
	if errors.Is(err, auth.ErrInvalidToken) {
		return web.Session{}, web.ErrNoSession
	}
	if err != nil {
		return web.Session{}, err
	}
	return web.Session{User: u, CSRF: s.d.Tokens.Load().CSRF(claims.ID)}, nil
}

// Conversation is the session user's conversation id, by the same
// query as every conversation route (owned): web.ErrNotFound for an
// unknown or foreign ID.
func (s *Server) Conversation(c *fiber.Ctx, sess web.Session, id string) (store.Conversation, error) {
	conv, err := s.d.Conversations.Get(c.UserContext(), sess.User.ID, id)
	if errors.Is(err, agentcore.ErrNotFound) {
		return conv, web.ErrNotFound
	}
	return conv, err
}

// MayInvestigate reports whether the session's user may create host
// read-only conversations (checkMode).
func (s *Server) MayInvestigate(sess web.Session) bool {
	return s.checkMode(sess.User, store.ModeHostReadOnly) == nil
}

// SignIn checks the credentials as POST /auth/login does (same
// limiter, same answers) and sets the session cookie. A refusal is an
// error whose message can be shown.
func (s *Server) SignIn(c *fiber.Ctx, username, password string) error {
	if !s.sameOrigin(c) {
		return errCrossOrigin
	}
	u, err := s.checkLogin(c, username, password)
	if err != nil {
		if ae, known := asAPIError(err); known {
			return ae
		}
		if ae, ok := storageAnswer(err); ok {
			s.log.Warn("sign-in failed", "err", err)
			c.Set(fiber.HeaderRetryAfter, strconv.Itoa(ae.retryAfter))
			return ae
		}
		return err
	}
	tok, exp, err := s.d.Tokens.Load().Issue(u)
	if err != nil {
		return err
	}
	s.metrics.logins.WithLabelValues("ok").Inc()
	s.setSessionCookie(c, tok, exp)
	return nil
}

// setSessionCookie sets the session cookie to tok until exp; an empty tok
// clears it.
func (s *Server) setSessionCookie(c *fiber.Ctx, tok string, exp time.Time) {
	ck := &fiber.Cookie{
		Name: s.sessionCookie(c), Value: tok, Path: "/", Expires: exp,
		HTTPOnly: true, SameSite: fiber.CookieSameSiteStrictMode, Secure: s.secure(c),
	}
	if tok == "" {
		ck.Expires, ck.MaxAge = time.Unix(0, 0), -1
	}
	c.Cookie(ck)
}

// SignOut revokes the user's tokens (as POST /auth/logout) and clears
// the cookie, if the form carries sess's CSRF token.
// For a user of an OpenID provider that offers end_session_endpoint, it
// returns the URL that ends the provider's session too.
func (s *Server) SignOut(c *fiber.Ctx, sess web.Session) (string, error) {
	if !s.sameOrigin(c) {
		return "", errCrossOrigin
	}
	// sess.CSRF is the token of the cookie Session verified: compared in
	// constant time, as Tokens.CheckCSRF does.
	if sess.CSRF == "" || subtle.ConstantTimeCompare([]byte(sess.CSRF), []byte(c.FormValue("csrf_token"))) != 1 {
		return "", errCSRF
	}
	if err := s.d.Users.Revoke(c.UserContext(), sess.User.ID); err != nil {
		return "", err
	}
	s.setSessionCookie(c, "", time.Time{})
	end, err := s.d.OIDC.SignOut(c.UserContext(), sess.User, s.origin(c)+"/login")
	if err != nil {
		// The local session is over all the same.
		s.log.Warn("sign-out: the OpenID provider's session is not ended", "user", sess.User.Name, "err", err)
		return "", nil
	}
	return end, nil
}

// maxMarkdown bounds POST /render/markdown: texts and bytes. Once a
// request has spent markdownBudget formatting, its other texts are shown
// as typed (web.Plain): with web.MaxMarkdown bounding one text's time,
// that bounds the request's.
const (
	maxMarkdownTexts = 1000
	maxMarkdownBytes = 4 << 20
	markdownBudget   = time.Second
)

// renderMarkdown is POST /render/markdown: texts (messages) rendered
// as the web UI shows them, HTML-safe (no raw HTML, no dangerous link
// schemes, code highlighted with CSS classes).
func (s *Server) renderMarkdown(c *fiber.Ctx) error {
	var req struct {
		Texts []string `json:"texts"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	total := 0
	for _, t := range req.Texts {
		total += len(t)
	}
	if len(req.Texts) > maxMarkdownTexts || total > maxMarkdownBytes {
		return apiError(http.StatusRequestEntityTooLarge, "too_large", "at most %d texts of %d bytes in all", maxMarkdownTexts, maxMarkdownBytes)
	}
	out := make([]string, len(req.Texts))
	start := time.Now()
	for i, t := range req.Texts {
		if time.Since(start) < markdownBudget {
			out[i] = string(web.Markdown(t))
		} else {
			out[i] = string(web.Plain(t))
		}
	}
	return c.JSON(fiber.Map{"html": out})
}
