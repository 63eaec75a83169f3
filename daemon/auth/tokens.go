package auth

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MinSecretLength is the fewest bytes auth.jwt_secret (and each previous
// secret) may have.
const MinSecretLength = 32

// DefaultTokenTTL is how long a token lives when NewTokens gets ttl 0.
const DefaultTokenTTL = 12 * time.Hour

// issuer is the iss claim; Verify refuses tokens without it.
const issuer = "codumentor"

// Tokens issues and verifies the server's HS256 JWTs.
//
// A Tokens is immutable and safe for concurrent use. When the secrets
// change (config reload), build a new one with NewTokens and swap the
// pointer the server reads (an atomic.Pointer[Tokens]); tokens in flight
// verify against whichever one they meet.
type Tokens struct {
	keys      [][]byte // keys[0] signs; all verify
	csrfKeys  [][]byte // CSRF's HMAC keys: csrfKeys[0] makes tokens, all verify
	ttl       time.Duration
	ephemeral bool
}

// Claims is what a verified token says.
type Claims struct {
	UserID    string // sub
	Name      string
	Role      Role
	ID        string // jti
	IssuedAt  time.Time
	ExpiresAt time.Time
	// Version is the user's TokenVersion when the token was issued
	// (ver); Users.ForToken refuses a token whose version is not the
	// user's current one.
	Version int64
}

// claims is the token's JSON payload.
type claims struct {
	jwt.RegisteredClaims
	Name    string `json:"name"`
	Role    Role   `json:"role"`
	Version int64  `json:"ver,omitempty"`
}

// NewTokens builds the signer from auth.jwt_secret and verifiers from it
// and auth.previous_jwt_secrets (during a rotation, tokens signed with a
// previous secret stay valid until they expire). Each secret must have at
// least MinSecretLength bytes. ttl 0 means DefaultTokenTTL.
//
// An empty secret does not stop the server: tokens are then signed with a
// random key made for this process (Ephemeral reports it), so they stop
// verifying when the server restarts and everyone logs in again. The
// server should log that prominently, as it does for the secrets that
// fall back to plaintext without a jwt_secret.
//
// The HMAC key is derived from each secret with HKDF-SHA256 rather than
// being the secret itself, because the same secret also derives the key
// that encrypts stored secrets: one purpose's key reveals nothing about
// the other's.
func NewTokens(secret string, previous []string, ttl time.Duration) (*Tokens, error) {
	if ttl < 0 {
		return nil, fmt.Errorf("auth: token lifetime is negative (%v)", ttl)
	}
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	t := &Tokens{ttl: ttl}
	if secret == "" {
		k := make([]byte, 32)
		rand.Read(k)
		t.keys = append(t.keys, k)
		k = make([]byte, 32)
		rand.Read(k)
		t.csrfKeys = append(t.csrfKeys, k)
		t.ephemeral = true
	} else {
		if len(secret) < MinSecretLength {
			return nil, fmt.Errorf("auth: auth.jwt_secret has %d bytes, at least %d needed", len(secret), MinSecretLength)
		}
		t.keys = append(t.keys, signingKey(secret))
		t.csrfKeys = append(t.csrfKeys, csrfKey(secret))
	}
	for i, p := range previous {
		if len(p) < MinSecretLength {
			return nil, fmt.Errorf("auth: auth.previous_jwt_secrets[%d] has %d bytes, at least %d needed", i, len(p), MinSecretLength)
		}
		t.keys = append(t.keys, signingKey(p))
		t.csrfKeys = append(t.csrfKeys, csrfKey(p))
	}
	return t, nil
}

func signingKey(secret string) []byte { return derive(secret, "codumentor jwt hs256 v1") }

func csrfKey(secret string) []byte { return derive(secret, "codumentor csrf v1") }

func derive(secret, purpose string) []byte {
	k, err := hkdf.Key(sha256.New, []byte(secret), nil, purpose, 32)
	if err != nil {
		panic(err) // only for lengths beyond 255*32
	}
	return k
}

// CSRF is the anti-forgery token of the browser session whose token ID
// (jti, Claims.ID) is session: an HMAC-SHA256 of it with a key derived
// from auth.jwt_secret for this purpose alone. A page embeds it; a
// cookie-authenticated request that changes state must send it back
// (header X-CSRF-Token or form field csrf_token), which another origin
// cannot read. A page loaded before a rotation of the secret keeps
// working: its token verifies under the previous secrets too.
func (t *Tokens) CSRF(session string) string {
	return csrfToken(t.csrfKeys[0], session)
}

func csrfToken(key []byte, session string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(session))
	return hex.EncodeToString(m.Sum(nil))
}

// CheckCSRF reports whether token is session's CSRF token under the
// current secret or a previous one, in constant time.
func (t *Tokens) CheckCSRF(session, token string) bool {
	if session == "" {
		return false
	}
	ok := false
	for _, k := range t.csrfKeys {
		ok = hmac.Equal([]byte(csrfToken(k, session)), []byte(token)) || ok
	}
	return ok
}

// Ephemeral reports whether the signing key is random for this process
// (no auth.jwt_secret): tokens do not survive a restart.
func (t *Tokens) Ephemeral() bool { return t.ephemeral }

// TTL is how long an issued token is valid.
func (t *Tokens) TTL() time.Duration { return t.ttl }

// Issue signs a token for u with the current secret.
func (t *Tokens) Issue(u User) (token string, expires time.Time, err error) {
	if u.ID == "" {
		return "", time.Time{}, fmt.Errorf("auth: issuing a token: user %q has no ID", u.Name)
	}
	now := time.Now().Truncate(time.Second)
	expires = now.Add(t.ttl)
	jti := make([]byte, 16)
	rand.Read(jti)
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    issuer,
			Subject:   u.ID,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(expires),
			ID:        hex.EncodeToString(jti),
		},
		Name:    u.Name,
		Role:    u.Role,
		Version: u.TokenVersion,
	}
	token, err = jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(t.keys[0])
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: signing a token: %w", err)
	}
	return token, expires, nil
}

// Verify checks a token's signature (current or previous secret), its
// algorithm (HS256 only: never "none", never another HMAC size or a
// public-key algorithm whose key could be confused with the secret), its
// issuer and its expiry, which must be present. Any failure wraps
// ErrInvalidToken.
func (t *Tokens) Verify(token string) (Claims, error) {
	keys := make([]jwt.VerificationKey, len(t.keys))
	for i, k := range t.keys {
		keys[i] = k
	}
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) {
		return jwt.VerificationKeySet{Keys: keys}, nil
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithIssuer(issuer),
	)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if c.Subject == "" {
		return Claims{}, fmt.Errorf("%w: no subject", ErrInvalidToken)
	}
	out := Claims{UserID: c.Subject, Name: c.Name, Role: c.Role, ID: c.ID, ExpiresAt: c.ExpiresAt.Time, Version: c.Version}
	if c.IssuedAt != nil {
		out.IssuedAt = c.IssuedAt.Time
	}
	return out, nil
}
