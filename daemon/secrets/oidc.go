package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// oidcTokens are what an OpenID provider handed out at a user's sign-in and
// the server keeps: the refresh token (if any) and the ID token (the hint
// of a later sign-out at the provider). They are stored like a secret,
// under a key of their own, and never offered to the model: Names and
// Value do not see them.
type oidcTokens struct {
	RefreshToken string `json:"refresh_token,omitempty"`
	IDToken      string `json:"id_token,omitempty"`
}

// PutOIDCTokens stores user's tokens from provider, replacing any.
func (s *Store) PutOIDCTokens(ctx context.Context, user, provider, refreshToken, idToken string) error {
	b, err := json.Marshal(oidcTokens{refreshToken, idToken})
	if err != nil {
		return fmt.Errorf("secrets: encoding OIDC tokens: %w", err)
	}
	_, err = s.put(ctx, user, kindOIDC, provider, b)
	return err
}

// OIDCTokens returns user's tokens from provider; "", "", nil when there
// are none.
func (s *Store) OIDCTokens(ctx context.Context, user, provider string) (refreshToken, idToken string, err error) {
	b, err := s.read(ctx, user, kindOIDC, provider)
	if errors.Is(err, ErrNotFound) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	var t oidcTokens
	if err := json.Unmarshal(b, &t); err != nil {
		return "", "", fmt.Errorf("secrets: decoding OIDC tokens of user %q: %w", user, err)
	}
	return t.RefreshToken, t.IDToken, nil
}

// DeleteOIDCTokens removes user's tokens from provider, if there are any.
func (s *Store) DeleteOIDCTokens(ctx context.Context, user, provider string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	err := s.db.WithContext(ctx).Where("user_id = ? AND kind = ? AND name = ?", user, kindOIDC, provider).Delete(&row{}).Error
	if err != nil {
		return fmt.Errorf("secrets: deleting OIDC tokens of user %q: %w", user, err)
	}
	return nil
}
