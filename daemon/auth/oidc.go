package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit/randid"
)

// OIDC sign-in: the authorization code flow with PKCE, state and nonce.
//
//	start, err := o.Begin(ctx, "corp", redirectURL, next)   // redirect the browser to start.URL; start.Binding in a cookie
//	u, next, err := o.Finish(ctx, auth.OIDCCallback{...})  // the provider's redirect back, with the cookie
//
// The state is single-use, lives OIDCStateTTL and is bound to the browser
// that began: the callback must bring the cookie's binding, whose hash the
// pending sign-in holds. The ID token is verified by go-oidc (issuer,
// audience, expiry, signature by a key of the provider's JWKS, fetched
// again when a token names a key it does not know: rotation) and must
// carry the nonce. A user is found by the provider's subject, never by a
// name: a user name claim only names a new user (or finds one created
// beforehand for this provider, not yet linked), so no provider can take
// over a local, LDAP or another provider's account.
//
// Every refusal wraps ErrOIDCRefused and is recorded like a refused
// login, counted against the client address's login limit; the wrapped
// detail is for the log, never for the client.

var (
	// ErrOIDCRefused is wrapped by every refused OIDC sign-in (bad or
	// replayed state, a token that does not verify, a user outside the
	// allowed groups or not created beforehand, a disabled user). Show the
	// caller only that the sign-in was refused.
	ErrOIDCRefused = errors.New("auth: OIDC sign-in refused")
	// ErrOIDCUnavailable is wrapped when the provider cannot be reached or
	// answers nonsense: the server's problem (503), not the caller's.
	ErrOIDCUnavailable = errors.New("auth: OpenID provider unavailable")
	// ErrOIDCUnknownProvider is returned for a provider name that is not
	// configured.
	ErrOIDCUnknownProvider = errors.New("auth: no such OpenID provider")
)

// OIDCStateTTL is how long a begun sign-in may take to come back.
const OIDCStateTTL = 10 * time.Minute

// maxPendingOIDC bounds the begun sign-ins kept at once (unauthenticated
// requests create them); beyond it Begin answers ErrBusy. One client
// address may have maxPendingPerAddress of them (then a
// *RateLimitedError), so that one client cannot take them all.
const (
	maxPendingOIDC       = 10000
	maxPendingPerAddress = 50
)

// SourceOIDC prefixes the Source of users of an OpenID provider:
// "oidc:NAME".
const SourceOIDC = "oidc:"

// OIDCProvider configures one OpenID provider.
type OIDCProvider struct {
	Name, Label      string
	Issuer, ClientID string
	// ClientSecret returns the client secret; it is called at each code
	// exchange, so that an instance secret can change without a restart.
	// Its error must not contain the secret.
	ClientSecret func(context.Context) (string, error)
	// RedirectURL, if set, is the callback URL Begin's argument is not.
	RedirectURL string
	// Scopes requested; openid is added when missing. Empty: openid,
	// profile, email.
	Scopes []string
	// Claims of the ID token; defaults preferred_username, name, email.
	// GroupsClaim "" reads no groups.
	UsernameClaim, NameClaim, EmailClaim, GroupsClaim string
	// AllowedGroups, if set, refuses a user in none of them.
	AllowedGroups []string
	// CreateUsers creates a user at the first sign-in; otherwise only
	// users added with Users.AddOIDC sign in.
	CreateUsers bool
}

// OIDCTokenStore keeps, encrypted, what a provider handed out at a user's
// sign-in (secrets.Store does). Get answers "", "", nil when there is
// nothing.
type OIDCTokenStore interface {
	PutOIDCTokens(ctx context.Context, user, provider, refreshToken, idToken string) error
	OIDCTokens(ctx context.Context, user, provider string) (refreshToken, idToken string, err error)
	DeleteOIDCTokens(ctx context.Context, user, provider string) error
}

// OIDCOptions are NewOIDC's.
type OIDCOptions struct {
	Providers []OIDCProvider
	Tokens    OIDCTokenStore
	// Limiter counts refused sign-ins per client address (the
	// Authenticator's, so that both share the limit). nil: a new one.
	Limiter *Limiter
	// HTTPClient talks to the providers; default one with a 10 s timeout.
	HTTPClient *http.Client
}

// OIDC signs users in with OpenID providers. Safe for concurrent use.
type OIDC struct {
	users     *Users
	tokens    OIDCTokenStore
	limiter   *Limiter
	client    *http.Client
	providers []*oidcProvider
}

type oidcProvider struct {
	cfg OIDCProvider
	mu  sync.Mutex
	d   *discovered // nil until discovery succeeds
}

// discovered is what the provider's discovery document gave.
type discovered struct {
	provider   *oidc.Provider
	verifier   *oidc.IDTokenVerifier
	endSession string
}

// oidcLogin is a begun sign-in (table oidc_logins), keyed by the state's
// hash: the state itself is only in the browser's URL.
type oidcLogin struct {
	StateHash   string    `gorm:"primaryKey"`
	BindingHash string    `gorm:"not null"`
	Provider    string    `gorm:"not null"`
	Nonce       string    `gorm:"not null"`
	Verifier    string    `gorm:"not null"` // PKCE
	RedirectURL string    `gorm:"not null"`
	Next        string    `gorm:"not null"`
	Source      string    `gorm:"not null;index"` // the client's address
	Expires     time.Time `gorm:"not null;index"`
}

func (oidcLogin) TableName() string { return "oidc_logins" }

// oidcIdentity links a provider's subject to a user.
type oidcIdentity struct {
	Provider string    `gorm:"primaryKey"`
	Subject  string    `gorm:"primaryKey"`
	UserID   string    `gorm:"not null;index"`
	Created  time.Time `gorm:"not null"`
}

func (oidcIdentity) TableName() string { return "oidc_identities" }

// NewOIDC migrates the OIDC tables in users' database and returns the
// sign-in of o.Providers. Providers are contacted at their first use, not
// here: one that is down does not keep the server from starting.
func NewOIDC(users *Users, o OIDCOptions) (*OIDC, error) {
	if users == nil {
		return nil, errors.New("auth: NewOIDC needs the users table")
	}
	if err := users.db.AutoMigrate(&oidcLogin{}, &oidcIdentity{}); err != nil {
		return nil, fmt.Errorf("auth: migrating the OIDC tables: %w", err)
	}
	x := &OIDC{users: users, tokens: o.Tokens, limiter: o.Limiter, client: o.HTTPClient}
	if x.limiter == nil {
		var err error
		if x.limiter, err = NewLimiter(users.db, LimitOptions{}); err != nil {
			return nil, err
		}
	}
	if x.client == nil {
		x.client = &http.Client{Timeout: 10 * time.Second}
	}
	for _, p := range o.Providers {
		if p.Name == "" || p.Issuer == "" || p.ClientID == "" || p.ClientSecret == nil {
			return nil, fmt.Errorf("auth: OpenID provider %q needs a name, an issuer, a client ID and a client secret", p.Name)
		}
		if p.Label == "" {
			p.Label = p.Name
		}
		if len(p.Scopes) == 0 {
			p.Scopes = []string{oidc.ScopeOpenID, "profile", "email"}
		} else if !slices.Contains(p.Scopes, oidc.ScopeOpenID) {
			p.Scopes = append([]string{oidc.ScopeOpenID}, p.Scopes...)
		}
		p.UsernameClaim = cmpOr(p.UsernameClaim, "preferred_username")
		p.NameClaim = cmpOr(p.NameClaim, "name")
		p.EmailClaim = cmpOr(p.EmailClaim, "email")
		x.providers = append(x.providers, &oidcProvider{cfg: p})
	}
	return x, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// OIDCProviderInfo is what the sign-in page shows of a provider.
type OIDCProviderInfo struct {
	Name, Label string
}

// Providers lists the configured providers, in order.
func (o *OIDC) Providers() []OIDCProviderInfo {
	if o == nil {
		return nil
	}
	out := make([]OIDCProviderInfo, len(o.providers))
	for i, p := range o.providers {
		out[i] = OIDCProviderInfo{Name: p.cfg.Name, Label: p.cfg.Label}
	}
	return out
}

func (o *OIDC) provider(name string) (*oidcProvider, error) {
	if o != nil {
		for _, p := range o.providers {
			if p.cfg.Name == name {
				return p, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrOIDCUnknownProvider, clipName(name))
}

// discover fetches the provider's discovery document once (again after a
// failure).
func (o *OIDC) discover(ctx context.Context, p *oidcProvider) (*discovered, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.d != nil {
		return p.d, nil
	}
	// The key set's fetches outlive this request: they use the client
	// (and its timeout), not ctx's deadline.
	pr, err := oidc.NewProvider(oidc.ClientContext(ctx, o.client), p.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: discovery at %s: %w", ErrOIDCUnavailable, p.cfg.Name, p.cfg.Issuer, err)
	}
	var extra struct {
		EndSession string `json:"end_session_endpoint"`
	}
	if err := pr.Claims(&extra); err != nil {
		return nil, fmt.Errorf("%w: %s: discovery document: %w", ErrOIDCUnavailable, p.cfg.Name, err)
	}
	if u, err := url.Parse(extra.EndSession); err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		extra.EndSession = ""
	}
	p.d = &discovered{
		provider:   pr,
		verifier:   pr.Verifier(&oidc.Config{ClientID: p.cfg.ClientID}),
		endSession: extra.EndSession,
	}
	return p.d, nil
}

// OIDCStart is a begun sign-in: send the browser to URL, and keep Binding
// in a cookie (HttpOnly, SameSite=Lax: the callback is a top-level
// navigation from the provider's site) until the callback.
type OIDCStart struct {
	URL     string
	Binding string
	Expires time.Time
}

// Begin starts a sign-in with provider name for the client at address ip.
// redirectURL is the callback URL (unless the provider's configuration
// sets one), next the local path to go to afterwards.
func (o *OIDC) Begin(ctx context.Context, name, redirectURL, next, ip string) (OIDCStart, error) {
	p, err := o.provider(name)
	if err != nil {
		return OIDCStart{}, err
	}
	d, err := o.discover(ctx, p)
	if err != nil {
		return OIDCStart{}, err
	}
	if p.cfg.RedirectURL != "" {
		redirectURL = p.cfg.RedirectURL
	}
	if len(next) > 2048 {
		next = "/"
	}
	state, binding, nonce := randToken(), randToken(), randToken()
	verifier := oauth2.GenerateVerifier()
	now := store.Now()
	row := oidcLogin{StateHash: hash(state), BindingHash: hash(binding), Provider: name, Nonce: nonce, Verifier: verifier,
		RedirectURL: redirectURL, Next: next, Source: ip, Expires: now.Add(OIDCStateTTL)}
	err = o.users.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("expires < ?", now).Delete(&oidcLogin{}).Error; err != nil {
			return err
		}
		var n int64
		if err := tx.Model(&oidcLogin{}).Count(&n).Error; err != nil {
			return err
		}
		if n >= maxPendingOIDC {
			return fmt.Errorf("%w: %d OIDC sign-ins are under way", ErrBusy, n)
		}
		if err := tx.Model(&oidcLogin{}).Where("source = ?", ip).Count(&n).Error; err != nil {
			return err
		}
		if n >= maxPendingPerAddress {
			var first oidcLogin
			if err := tx.Where("source = ?", ip).Order("expires").Take(&first).Error; err != nil {
				return err
			}
			return &RateLimitedError{RetryAfter: max(time.Until(first.Expires), time.Second), limit: "address"}
		}
		return tx.Create(&row).Error
	})
	if errors.Is(err, ErrBusy) || errors.Is(err, ErrRateLimited) {
		return OIDCStart{}, err
	}
	if err != nil {
		return OIDCStart{}, fmt.Errorf("auth: recording an OIDC sign-in: %w", err)
	}
	conf := o.oauth2(p, d, redirectURL, "")
	return OIDCStart{
		URL:     conf.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)),
		Binding: binding,
		Expires: row.Expires,
	}, nil
}

func (o *OIDC) oauth2(p *oidcProvider, d *discovered, redirectURL, secret string) *oauth2.Config {
	return &oauth2.Config{ClientID: p.cfg.ClientID, ClientSecret: secret, Endpoint: d.provider.Endpoint(), RedirectURL: redirectURL, Scopes: p.cfg.Scopes}
}

func randToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// OIDCCallback is the provider's redirect back to the server.
type OIDCCallback struct {
	Provider string // the callback URL's provider name
	State    string // query parameters state, code, error
	Code     string
	Error    string
	Binding  string // the cookie Begin's Binding went into
	IP       string // the client's address, for the limit and the audit log
}

// Finish completes a sign-in and returns the user and the path to go to.
// A refusal wraps ErrOIDCRefused; see the type's comment.
func (o *OIDC) Finish(ctx context.Context, r OIDCCallback) (User, string, error) {
	p, err := o.provider(r.Provider)
	if err != nil {
		return User{}, "", err
	}
	res, err := o.limiter.Reserve(ctx, "", r.IP)
	if err != nil {
		var limited *RateLimitedError
		if errors.As(err, &limited) {
			if rec := o.limiter.noteRefusal(limited, "", r.IP); rec != nil {
				if aerr := audit.Write(ctx, o.users.db, rec.entry()); aerr != nil {
					return User{}, "", errors.Join(err, aerr)
				}
			}
		}
		return User{}, "", err
	}
	u, next, name, reason, err := o.finish(ctx, p, r)
	if err != nil {
		if !errors.Is(err, ErrOIDCRefused) {
			return User{}, "", errors.Join(err, res.Cancel(ctx))
		}
		if ferr := res.Failed(ctx); ferr != nil {
			return User{}, "", errors.Join(err, ferr)
		}
		data := oidcData(name, "refused", p.cfg.Name)
		data["reason"] = reason
		if aerr := audit.Write(ctx, o.users.db, audit.Entry{Kind: audit.KindLogin, Source: r.IP, Data: data}); aerr != nil {
			return User{}, "", errors.Join(err, aerr)
		}
		return User{}, "", err
	}
	if err := res.Succeeded(ctx); err != nil {
		return User{}, "", err
	}
	now := store.Now()
	err = o.users.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&User{}).Where("id = ?", u.ID).Update("last_login", now).Error; err != nil {
			return err
		}
		_, err := audit.Append(tx, audit.Entry{Kind: audit.KindLogin, User: u.ID, Source: r.IP, Data: oidcData(u.Name, "ok", p.cfg.Name)})
		return err
	})
	if err != nil {
		return User{}, "", fmt.Errorf("auth: recording the OIDC sign-in of %s: %w", u.Name, err)
	}
	u.LastLogin = &now
	return u, next, nil
}

func oidcData(name, result, provider string) map[string]string {
	return map[string]string{"name": name, "result": result, "method": "oidc", "provider": provider}
}

// refuse is a refusal for the log; reason is the audit record's.
func refuse(reason, format string, a ...any) (string, error) {
	return reason, fmt.Errorf("%w: %s", ErrOIDCRefused, fmt.Sprintf(format, a...))
}

// finish is Finish's work; reason and name are for the record of a
// refusal.
func (o *OIDC) finish(ctx context.Context, p *oidcProvider, r OIDCCallback) (u User, next, name, reason string, err error) {
	// The state is spent whatever comes next: a refused callback cannot
	// be tried again.
	login, err := o.consume(ctx, r.State)
	if err != nil {
		return User{}, "", "", "", err
	}
	switch {
	case login == nil:
		reason, err = refuse("state", "unknown, expired or already used state")
	case login.Provider != p.cfg.Name:
		reason, err = refuse("state", "state of provider %s came back to %s", login.Provider, p.cfg.Name)
	case r.Binding == "" || subtle.ConstantTimeCompare([]byte(hash(r.Binding)), []byte(login.BindingHash)) != 1:
		reason, err = refuse("state", "the state is not this browser's (no or another sign-in cookie)")
	case r.Error != "":
		reason, err = refuse("provider_error", "the provider answered error %q", clipName(r.Error))
	case r.Code == "":
		reason, err = refuse("provider_error", "no code")
	}
	if err != nil {
		return User{}, "", "", reason, err
	}
	d, err := o.discover(ctx, p)
	if err != nil {
		return User{}, "", "", "", err
	}
	secret, err := p.cfg.ClientSecret(ctx)
	if err != nil {
		return User{}, "", "", "", fmt.Errorf("auth: the client secret of OpenID provider %s: %w", p.cfg.Name, err)
	}
	tok, err := o.oauth2(p, d, login.RedirectURL, secret).Exchange(oidc.ClientContext(ctx, o.client), r.Code, oauth2.VerifierOption(login.Verifier))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.Response != nil {
			if re.Response.StatusCode < 500 {
				reason, err = refuse("exchange", "%s refused the code: %s %s", p.cfg.Name, clipName(re.ErrorCode), clipName(re.ErrorDescription))
				return User{}, "", "", reason, err
			}
			// Its status only: the body is the provider's, for no log.
			return User{}, "", "", "", fmt.Errorf("%w: %s: exchanging the code: %s", ErrOIDCUnavailable, p.cfg.Name, re.Response.Status)
		}
		return User{}, "", "", "", fmt.Errorf("%w: %s: exchanging the code: %w", ErrOIDCUnavailable, p.cfg.Name, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		reason, err = refuse("token", "no ID token in the token response")
		return User{}, "", "", reason, err
	}
	idt, err := d.verifier.Verify(ctx, raw)
	if err != nil {
		reason, err = refuse("token", "the ID token does not verify: %v", err)
		return User{}, "", "", reason, err
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(login.Nonce)) != 1 {
		reason, err = refuse("token", "the ID token's nonce is not the sign-in's")
		return User{}, "", "", reason, err
	}
	if idt.AccessTokenHash != "" {
		if err := idt.VerifyAccessToken(tok.AccessToken); err != nil {
			reason, err = refuse("token", "the ID token's at_hash: %v", err)
			return User{}, "", "", reason, err
		}
	}
	if idt.Subject == "" || len(idt.Subject) > 255 {
		reason, err = refuse("token", "the ID token's subject is empty or longer than 255 bytes")
		return User{}, "", "", reason, err
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		reason, err = refuse("token", "the ID token's claims: %v", err)
		return User{}, "", "", reason, err
	}
	claimed, _ := claims[p.cfg.UsernameClaim].(string)
	name = oidcName(claimed)
	if ValidateName(name) != nil {
		reason, err = refuse("name", "claim %s %q gives no valid user name", p.cfg.UsernameClaim, clipName(claimed))
		return User{}, "", "", reason, err
	}
	groups, ok := claimStrings(claims, p.cfg.GroupsClaim)
	if !ok {
		reason, err = refuse("groups", "claim %s is not a list of at most %d groups", p.cfg.GroupsClaim, maxGroups)
		return User{}, "", name, reason, err
	}
	if len(p.cfg.AllowedGroups) > 0 && !slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(p.cfg.AllowedGroups, g) }) {
		reason, err = refuse("groups", "%s is in none of the allowed groups", name)
		return User{}, "", name, reason, err
	}
	display, _ := claims[p.cfg.NameClaim].(string)
	email, _ := claims[p.cfg.EmailClaim].(string)
	u, reason, err = o.userFor(ctx, p.cfg, idt.Subject, name, clip(display, 256), clip(email, 256))
	if err != nil {
		return User{}, "", name, reason, err
	}
	// The provider's groups as of this sign-in, and the role
	// auth.admin_groups gives them.
	if err := o.users.SetGroups(ctx, u.ID, GroupSourceOIDC, groups); err != nil {
		if errors.Is(err, ErrInvalidGroup) {
			reason, err = refuse("groups", "claim %s: %v", p.cfg.GroupsClaim, err)
			return User{}, "", name, reason, err
		}
		return User{}, "", name, "", err
	}
	if u, err = o.users.ByID(ctx, u.ID); err != nil {
		return User{}, "", name, "", err
	}
	if o.tokens != nil {
		if err := o.tokens.PutOIDCTokens(ctx, u.ID, p.cfg.Name, tok.RefreshToken, raw); err != nil {
			return User{}, "", name, "", err
		}
	}
	return u, login.Next, name, "", nil
}

// consume takes the begun sign-in of state out of the table: nil if there
// is none, or it expired, or another request took it first.
func (o *OIDC) consume(ctx context.Context, state string) (*oidcLogin, error) {
	if state == "" || len(state) > 256 {
		return nil, nil
	}
	h := hash(state)
	var l oidcLogin
	db := o.users.db.WithContext(ctx)
	err := db.Where("state_hash = ?", h).Take(&l).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auth: reading an OIDC sign-in: %w", err)
	}
	res := db.Where("state_hash = ?", h).Delete(&oidcLogin{})
	if res.Error != nil {
		return nil, fmt.Errorf("auth: spending an OIDC state: %w", res.Error)
	}
	if res.RowsAffected != 1 || time.Now().After(l.Expires) {
		return nil, nil
	}
	return &l, nil
}

// maxGroups bounds the groups claim.
const maxGroups = 1000

// claimStrings reads a claim of strings (or one string); false for any
// other type or more than maxGroups.
func claimStrings(claims map[string]any, name string) ([]string, bool) {
	if name == "" {
		return nil, true
	}
	switch v := claims[name].(type) {
	case nil:
		return nil, true
	case string:
		return []string{v}, true
	case []any:
		if len(v) > maxGroups {
			return nil, false
		}
		out := make([]string, 0, len(v))
		for _, g := range v {
			s, ok := g.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// oidcName is the user name a claim gives: lower-cased, every character
// outside the naming rule replaced by '-', leading ones dropped, at most
// MaxNameLength bytes ("Alice@Example.org" is "alice-example.org").
func oidcName(claim string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(claim) {
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			b.WriteRune(c)
		case b.Len() == 0:
		case c == '.' || c == '_' || c == '-':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= MaxNameLength {
			break
		}
	}
	return b.String()
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// clipName is a value from outside for the log: at most 64 bytes, quoted
// by the caller.
func clipName(s string) string { return clip(s, 64) }

// userFor is the user of provider p's subject: the linked one; else one
// created beforehand for p with that name, now linked; else a new one if
// p creates users.
func (o *OIDC) userFor(ctx context.Context, p OIDCProvider, subject, name, display, email string) (User, string, error) {
	source := SourceOIDC + p.Name
	for range 2 {
		var id oidcIdentity
		err := o.users.db.WithContext(ctx).Where("provider = ? AND subject = ?", p.Name, subject).Take(&id).Error
		if err == nil {
			u, err := o.users.ByID(ctx, id.UserID)
			if err != nil {
				return User{}, "", err
			}
			if u.Disabled {
				reason, err := refuse("disabled", "%s: %s", ErrUserDisabled, u.Name)
				return User{}, reason, err
			}
			return o.refresh(ctx, u, display, email)
		}
		if !errors.Is(err, gorm.ErrRecordNotFound) {
			return User{}, "", fmt.Errorf("auth: looking up an OIDC identity: %w", err)
		}
		u, err := o.users.ByName(ctx, name)
		switch {
		case err == nil && u.Source != source:
			reason, err := refuse("name_taken", "%s is a %s user, not one of %s", name, u.Source, p.Name)
			return User{}, reason, err
		case err == nil:
			var n int64
			if err := o.users.db.WithContext(ctx).Model(&oidcIdentity{}).Where("user_id = ?", u.ID).Count(&n).Error; err != nil {
				return User{}, "", err
			}
			if n > 0 {
				reason, err := refuse("name_taken", "%s is linked to another subject of %s", name, p.Name)
				return User{}, reason, err
			}
			if u.Disabled {
				reason, err := refuse("disabled", "%s: %s", ErrUserDisabled, u.Name)
				return User{}, reason, err
			}
		case !errors.Is(err, ErrUserNotFound):
			return User{}, "", err
		case !p.CreateUsers:
			reason, err := refuse("not_created", "%s has no user here and %s does not create users", name, p.Name)
			return User{}, reason, err
		}
		created := err != nil
		now := time.Now().UTC()
		err = o.users.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if created {
				u = User{ID: randid.New("usr_"), Name: name, Role: RoleUser, Source: source, DisplayName: display, Email: email, Created: now, Updated: now}
				if err := tx.Create(&u).Error; err != nil {
					return err
				}
			}
			return tx.Create(&oidcIdentity{Provider: p.Name, Subject: subject, UserID: u.ID, Created: now}).Error
		})
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			continue // a concurrent first sign-in won: look again
		}
		if err != nil {
			return User{}, "", fmt.Errorf("auth: adding OIDC user %s: %w", name, err)
		}
		if created {
			return u, "", nil
		}
		return o.refresh(ctx, u, display, email)
	}
	reason, err := refuse("name_taken", "%s: concurrent sign-ins of another subject", name)
	return User{}, reason, err
}

// refresh copies the provider's display name and address into u's row.
func (o *OIDC) refresh(ctx context.Context, u User, display, email string) (User, string, error) {
	if u.DisplayName == display && u.Email == email {
		return u, "", nil
	}
	u.DisplayName, u.Email, u.Updated = display, email, time.Now().UTC()
	err := o.users.db.WithContext(ctx).Model(&User{}).Where("id = ?", u.ID).
		Updates(map[string]any{"display_name": u.DisplayName, "email": u.Email, "updated": u.Updated}).Error
	if err != nil {
		return User{}, "", fmt.Errorf("auth: updating OIDC user %s: %w", u.Name, err)
	}
	return u, "", nil
}

// SignOut forgets what u's provider handed out and returns where to send
// the browser to end the provider's session too ("" when u is not an OIDC
// user or the provider has no end_session_endpoint). postLogout is the
// URL the provider sends the browser back to (registered with it).
func (o *OIDC) SignOut(ctx context.Context, u User, postLogout string) (string, error) {
	name, ok := strings.CutPrefix(u.Source, SourceOIDC)
	if !ok {
		return "", nil
	}
	p, err := o.provider(name)
	if err != nil {
		return "", nil // no longer configured
	}
	var idToken string
	if o.tokens != nil {
		if _, idToken, err = o.tokens.OIDCTokens(ctx, u.ID, name); err != nil {
			return "", err
		}
		if err := o.tokens.DeleteOIDCTokens(ctx, u.ID, name); err != nil {
			return "", err
		}
	}
	d, err := o.discover(ctx, p)
	if err != nil || d.endSession == "" {
		// The local session is over; the provider's cannot be ended now.
		return "", nil
	}
	end, _ := url.Parse(d.endSession)
	q := end.Query()
	q.Set("client_id", p.cfg.ClientID)
	if idToken != "" {
		q.Set("id_token_hint", idToken)
	}
	if postLogout != "" {
		if p.cfg.RedirectURL != "" {
			if r, err := url.Parse(p.cfg.RedirectURL); err == nil {
				pl, _ := url.Parse(postLogout)
				pl.Scheme, pl.Host = r.Scheme, r.Host
				postLogout = pl.String()
			}
		}
		q.Set("post_logout_redirect_uri", postLogout)
	}
	end.RawQuery = q.Encode()
	return end.String(), nil
}

// AddOIDC adds a user of OpenID provider provider before their first
// sign-in (for a provider that does not create users). by is who does it,
// as for Add.
func (us *Users) AddOIDC(ctx context.Context, by, name, provider string, admin bool) (User, error) {
	if err := ValidateName(name); err != nil {
		return User{}, err
	}
	role := RoleUser
	if admin {
		role = RoleAdmin
	}
	return us.create(ctx, User{Name: name, Role: role, Source: SourceOIDC + provider}, &audit.Entry{Kind: audit.KindAdmin, User: by,
		Data: map[string]any{"action": "user_add", "name": name, "admin": admin, "source": SourceOIDC + provider}})
}
