package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"slices"
)

// OIDCProvider is one entry of auth.oidc: an OpenID provider users sign in
// with (authorization code flow with PKCE).
type OIDCProvider struct {
	// Name identifies the provider in URLs (/auth/oidc/NAME/…) and in the
	// users and audit records: 1 to 32 of a-z, 0-9 and _, starting with a
	// letter.
	Name string `yaml:"name"`
	// Label is the sign-in button's text (default: Name).
	Label string `yaml:"label"`
	// Issuer is the provider's issuer URL (https, or http on loopback);
	// its discovery document is at Issuer/.well-known/openid-configuration.
	Issuer   string `yaml:"issuer"`
	ClientID string `yaml:"client_id"`
	// The client secret comes from the environment variable
	// ClientSecretEnv or from the instance secret ClientSecretName (PUT
	// /api/v1/admin/secrets/{name}), exactly one of them; never from this
	// file.
	ClientSecretEnv  string `yaml:"client_secret_env"`
	ClientSecretName string `yaml:"client_secret_name"`
	// RedirectURL is the callback registered with the provider (default:
	// this server's origin as the browser reached it +
	// /auth/oidc/NAME/callback).
	RedirectURL string `yaml:"redirect_url"`
	// Scopes requested (default openid, profile, email; openid is always
	// requested). Add offline_access for a refresh token, groups where the
	// provider needs it for the groups claim.
	Scopes []string `yaml:"scopes"`
	// The ID token's claims for the user name (default
	// preferred_username), display name (name), email (email) and groups
	// (empty: none).
	UsernameClaim string `yaml:"username_claim"`
	NameClaim     string `yaml:"name_claim"`
	EmailClaim    string `yaml:"email_claim"`
	GroupsClaim   string `yaml:"groups_claim"`
	// AllowedGroups, when set, refuses a user in none of them (needs
	// groups_claim).
	AllowedGroups []string `yaml:"allowed_groups"`
	// CreateUsers creates a user at their first sign-in; false signs in
	// only users an administrator created for this provider beforehand.
	CreateUsers bool `yaml:"create_users"`
}

// validateOIDC checks auth.oidc.
func (a Auth) validateOIDC() []error {
	var errs []error
	seen := map[string]bool{}
	for i, p := range a.OIDC {
		at := fmt.Sprintf("auth.oidc[%d]", i)
		if !validOIDCName(p.Name) {
			errs = append(errs, fmt.Errorf("%s.name %q: use 1 to 32 of a-z, 0-9 and _, starting with a letter", at, p.Name))
		} else if seen[p.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q is used twice", at, p.Name))
		}
		seen[p.Name] = true
		if err := checkOIDCURL(p.Issuer); err != nil {
			errs = append(errs, fmt.Errorf("%s.issuer: %w", at, err))
		}
		if p.RedirectURL != "" {
			if err := checkOIDCURL(p.RedirectURL); err != nil {
				errs = append(errs, fmt.Errorf("%s.redirect_url: %w", at, err))
			}
		}
		if p.ClientID == "" {
			errs = append(errs, fmt.Errorf("%s.client_id is empty", at))
		}
		switch {
		case (p.ClientSecretEnv == "") == (p.ClientSecretName == ""):
			errs = append(errs, fmt.Errorf("%s: set one of client_secret_env (an environment variable) and client_secret_name (an instance secret)", at))
		case p.ClientSecretEnv != "" && os.Getenv(p.ClientSecretEnv) == "":
			// The variable's name only: its value is the secret.
			errs = append(errs, fmt.Errorf("%s.client_secret_env: the environment variable %s is not set", at, p.ClientSecretEnv))
		}
		if len(p.AllowedGroups) > 0 && p.GroupsClaim == "" {
			errs = append(errs, fmt.Errorf("%s.allowed_groups needs groups_claim", at))
		}
		if slices.Contains(p.AllowedGroups, "") {
			errs = append(errs, fmt.Errorf("%s.allowed_groups has an empty group", at))
		}
	}
	return errs
}

func validOIDCName(s string) bool {
	if len(s) < 1 || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// checkOIDCURL accepts https URLs, and http ones on loopback (a provider
// on the same machine, or a test's).
func checkOIDCURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q is not an absolute URL without user, query or fragment", s)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopbackHost(u.Hostname()):
	default:
		return errors.New("use https (http only on loopback)")
	}
	return nil
}

// isLoopbackHost reports whether host is localhost or a loopback address.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
