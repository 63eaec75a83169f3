package daemon

import (
	"context"
	"fmt"
	"os"

	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
)

// openOIDC is the sign-in with auth.oidc's providers (nil when there is
// none). A client secret is read at each use: an instance secret can be
// stored or replaced while the server runs.
func openOIDC(cfg config.Config, users *auth.Users, limiter *auth.Limiter, sec *secrets.Store) (*auth.OIDC, error) {
	if len(cfg.Auth.OIDC) == 0 {
		return nil, nil
	}
	var ps []auth.OIDCProvider
	for _, p := range cfg.Auth.OIDC {
		ps = append(ps, auth.OIDCProvider{
			Name: p.Name, Label: p.Label, Issuer: p.Issuer, ClientID: p.ClientID,
			ClientSecret: clientSecret(p, sec),
			RedirectURL:  p.RedirectURL, Scopes: p.Scopes,
			UsernameClaim: p.UsernameClaim, NameClaim: p.NameClaim, EmailClaim: p.EmailClaim, GroupsClaim: p.GroupsClaim,
			AllowedGroups: p.AllowedGroups, CreateUsers: p.CreateUsers,
		})
	}
	return auth.NewOIDC(users, auth.OIDCOptions{Providers: ps, Tokens: sec, Limiter: limiter})
}

// clientSecret reads p's client secret; its errors name where it is
// looked for, never a value.
func clientSecret(p config.OIDCProvider, sec *secrets.Store) func(context.Context) (string, error) {
	if p.ClientSecretEnv != "" {
		return func(context.Context) (string, error) {
			if v := os.Getenv(p.ClientSecretEnv); v != "" {
				return v, nil
			}
			return "", fmt.Errorf("the environment variable %s is empty", p.ClientSecretEnv)
		}
	}
	return func(ctx context.Context) (string, error) {
		v, err := sec.Value(ctx, repos.InstanceOwner, p.ClientSecretName)
		if err != nil {
			return "", fmt.Errorf("instance secret %s (PUT /api/v1/admin/secrets/%s): %w", p.ClientSecretName, p.ClientSecretName, err)
		}
		return v, nil
	}
}
