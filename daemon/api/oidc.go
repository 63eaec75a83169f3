package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/web"
)

// OIDC sign-in for the web UI (web.Backend). The begun sign-in's binding
// goes in its own cookie, SameSite=Lax: the provider's redirect back is a
// top-level GET from another site, which a browser sends Lax cookies with
// and Strict ones not. The session cookie stays Strict; the callback page
// (web) moves on to the next page by a navigation of its own, so that the
// browser sends it there.

// OIDCCookie names the cookie of a begun OIDC sign-in ("__Host-" prefixed
// under TLS, as SessionCookie).
const OIDCCookie = "codumentor_oidc"

func (s *Server) oidcCookie(c *fiber.Ctx) string { return s.hostCookie(c, OIDCCookie) }

// OIDCProviders lists the providers the sign-in page offers.
func (s *Server) OIDCProviders() []web.Provider {
	var out []web.Provider
	for _, p := range s.d.OIDC.Providers() {
		out = append(out, web.Provider{Name: p.Name, Label: p.Label})
	}
	return out
}

var (
	errNoProvider     = &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such sign-in provider"}
	errOIDCRefused    = &Error{Status: http.StatusUnauthorized, Code: "invalid_credentials", Message: "the sign-in was refused; sign in again"}
	errOIDCUnavailble = &Error{Status: http.StatusServiceUnavailable, Code: "oidc_unavailable", Message: "the sign-in provider cannot be reached; try again later or ask the administrator", retryAfter: 10}
	errOIDCBusy       = &Error{Status: http.StatusServiceUnavailable, Code: "busy", Message: "too many sign-ins at once; try again in a moment", retryAfter: 1}
)

// OIDCBegin starts a sign-in with provider name and returns the
// provider's URL to send the browser to.
func (s *Server) OIDCBegin(c *fiber.Ctx, name, next string) (string, error) {
	start, err := s.d.OIDC.Begin(c.UserContext(), name, s.origin(c)+"/auth/oidc/"+name+"/callback", next, s.clientIP(c))
	if err != nil {
		return "", s.oidcAnswer(c, name, err)
	}
	c.Cookie(&fiber.Cookie{
		Name: s.oidcCookie(c), Value: start.Binding, Path: "/", Expires: start.Expires,
		HTTPOnly: true, SameSite: fiber.CookieSameSiteLaxMode, Secure: s.secure(c),
	})
	return start.URL, nil
}

// OIDCCallback completes a sign-in (the provider's redirect back), sets
// the session cookie and returns the local path to go to.
func (s *Server) OIDCCallback(c *fiber.Ctx, name string) (string, error) {
	binding := c.Cookies(s.oidcCookie(c))
	// Spent by this request whatever its outcome.
	c.Cookie(&fiber.Cookie{Name: s.oidcCookie(c), Path: "/", Expires: time.Unix(0, 0), MaxAge: -1,
		HTTPOnly: true, SameSite: fiber.CookieSameSiteLaxMode, Secure: s.secure(c)})
	u, next, err := s.d.OIDC.Finish(c.UserContext(), auth.OIDCCallback{
		Provider: name, State: c.Query("state"), Code: c.Query("code"), Error: c.Query("error"),
		Binding: binding, IP: s.clientIP(c),
	})
	if err != nil {
		return "", s.oidcAnswer(c, name, err)
	}
	tok, exp, err := s.d.Tokens.Load().Issue(u)
	if err != nil {
		return "", err
	}
	s.metrics.logins.WithLabelValues("ok").Inc()
	s.setSessionCookie(c, tok, exp)
	return next, nil
}

// oidcAnswer is the answer to a failed OIDC step; the detail goes to the
// log only (it may quote the provider).
func (s *Server) oidcAnswer(c *fiber.Ctx, name string, err error) error {
	var limited *auth.RateLimitedError
	switch {
	case errors.Is(err, auth.ErrOIDCUnknownProvider):
		return errNoProvider
	case errors.As(err, &limited):
		secs := max(int(limited.RetryAfter.Round(time.Second)/time.Second), 1)
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(secs))
		s.metrics.logins.WithLabelValues("rate_limited").Inc()
		return apiError(http.StatusTooManyRequests, "rate_limited", "too many failed sign-ins; try again in %d s", secs)
	case errors.Is(err, auth.ErrOIDCRefused):
		s.log.Info("OIDC sign-in refused", "provider", name, "ip", s.clientIP(c), "err", err)
		s.metrics.logins.WithLabelValues("refused").Inc()
		return errOIDCRefused
	case errors.Is(err, auth.ErrOIDCUnavailable):
		s.log.Warn("OIDC sign-in: the provider is unavailable", "provider", name, "err", err)
		s.metrics.logins.WithLabelValues("unavailable").Inc()
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(errOIDCUnavailble.retryAfter))
		return errOIDCUnavailble
	case errors.Is(err, auth.ErrBusy):
		s.metrics.logins.WithLabelValues("busy").Inc()
		c.Set(fiber.HeaderRetryAfter, "1")
		return errOIDCBusy
	}
	s.log.Error("OIDC sign-in failed", "provider", name, "err", err)
	s.metrics.logins.WithLabelValues("error").Inc()
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "signing in failed; the server log has the details"}
}
