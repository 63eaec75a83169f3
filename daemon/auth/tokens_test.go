package auth_test

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/codumentor/codumentor/daemon/auth"
)

const (
	secretA = "secret-A-0123456789abcdef0123456789abcdef"
	secretB = "secret-B-0123456789abcdef0123456789abcdef"
	secretC = "secret-C-0123456789abcdef0123456789abcdef"
)

var alice = auth.User{ID: "usr_a11ce", Name: "alice", Role: auth.RoleAdmin}

// hmacKey is the key Tokens derives from a secret, so tests can forge
// tokens a server with that secret would sign.
func hmacKey(t *testing.T, secret string) []byte {
	k, err := hkdf.Key(sha256.New, []byte(secret), nil, "codumentor jwt hs256 v1", 32)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func validClaims() jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": "codumentor", "sub": alice.ID, "name": alice.Name, "role": "admin",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "jti": "j1",
	}
}

func sign(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestTokensIssueVerify(t *testing.T) {
	tk, err := auth.NewTokens(secretA, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Ephemeral() {
		t.Fatal("Ephemeral with a secret")
	}
	tok, exp, err := tk.Issue(alice)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(exp); d < 59*time.Minute || d > time.Hour {
		t.Fatalf("expires in %v, want 1h", d)
	}
	c, err := tk.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.UserID != alice.ID || c.Name != "alice" || c.Role != auth.RoleAdmin || c.ID == "" || !c.ExpiresAt.Equal(exp) || c.IssuedAt.IsZero() {
		t.Fatalf("Verify = %+v", c)
	}
	tok2, _, _ := tk.Issue(alice)
	if c2, _ := tk.Verify(tok2); c2.ID == c.ID {
		t.Fatal("two tokens share a jti")
	}
	// The header says HS256 and the payload has what the API needs.
	parts := strings.Split(tok, ".")
	hdr, _ := base64.RawURLEncoding.DecodeString(parts[0])
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var h, p map[string]any
	json.Unmarshal(hdr, &h)
	json.Unmarshal(payload, &p)
	if h["alg"] != "HS256" || p["iss"] != "codumentor" || p["sub"] != alice.ID || p["role"] != "admin" || p["exp"] == nil || p["iat"] == nil || p["jti"] == nil {
		t.Fatalf("header %s, payload %s", hdr, payload)
	}
	// The user's token version travels in ver; a token without it (made
	// before versions existed) has version 0.
	v7 := alice
	v7.TokenVersion = 7
	tok7, _, _ := tk.Issue(v7)
	if c7, err := tk.Verify(tok7); err != nil || c7.Version != 7 {
		t.Fatalf("Verify of a version-7 token = %+v, %v", c7, err)
	}
	if c0, err := tk.Verify(sign(t, jwt.SigningMethodHS256, hmacKey(t, secretA), validClaims())); err != nil || c0.Version != 0 {
		t.Fatalf("Verify of a token without ver = %+v, %v", c0, err)
	}
}

func TestTokensRefused(t *testing.T) {
	tk, err := auth.NewTokens(secretA, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	good, _, _ := tk.Issue(alice)
	parts := strings.Split(good, ".")
	key := hmacKey(t, secretA)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	expired := validClaims()
	expired["iat"], expired["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
	noExp := validClaims()
	delete(noExp, "exp")
	noSub := validClaims()
	delete(noSub, "sub")
	otherIss := validClaims()
	otherIss["iss"] = "someone-else"
	future := validClaims()
	future["iat"] = time.Now().Add(time.Hour).Unix()
	// The payload of good with the role changed, the signature kept.
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	tampered := parts[0] + "." + b64(strings.Replace(string(payload), `"role":"admin"`, `"role":"superuser"`, 1)) + "." + parts[2]

	for name, tok := range map[string]string{
		"alg none":             b64(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + ".",
		"alg none signed":      b64(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + "." + parts[2],
		"wrong key":            sign(t, jwt.SigningMethodHS256, hmacKey(t, secretB), validClaims()),
		"raw secret as key":    sign(t, jwt.SigningMethodHS256, []byte(secretA), validClaims()),
		"expired":              sign(t, jwt.SigningMethodHS256, key, expired),
		"no exp":               sign(t, jwt.SigningMethodHS256, key, noExp),
		"no sub":               sign(t, jwt.SigningMethodHS256, key, noSub),
		"other issuer":         sign(t, jwt.SigningMethodHS256, key, otherIss),
		"issued in future":     sign(t, jwt.SigningMethodHS256, key, future),
		"HS384 with right key": sign(t, jwt.SigningMethodHS384, key, validClaims()),
		"RS256":                sign(t, jwt.SigningMethodRS256, rsaKey, validClaims()),
		"tampered payload":     tampered,
		"truncated signature":  good[:len(good)-4],
		"garbage":              "not.a.token",
		"empty":                "",
	} {
		c, err := tk.Verify(tok)
		if !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("%s: Verify = %+v, %v; want ErrInvalidToken", name, c, err)
		}
	}
}

func TestTokensRotation(t *testing.T) {
	oldTk, _ := auth.NewTokens(secretA, nil, time.Hour)
	oldTok, _, _ := oldTk.Issue(alice)
	otherTk, _ := auth.NewTokens(secretC, nil, time.Hour)
	otherTok, _, _ := otherTk.Issue(alice)

	// B is the new secret, A the previous one.
	rotated, err := auth.NewTokens(secretB, []string{secretA}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rotated.Verify(oldTok); err != nil {
		t.Fatalf("a token of the previous secret: %v", err)
	}
	if _, err := rotated.Verify(otherTok); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("a token of an unrelated secret = %v, want ErrInvalidToken", err)
	}
	newTok, _, _ := rotated.Issue(alice)
	if _, err := oldTk.Verify(newTok); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("new tokens are signed with the previous secret: %v", err)
	}

	// The rotation done: A removed.
	done, _ := auth.NewTokens(secretB, nil, time.Hour)
	if _, err := done.Verify(oldTok); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("a token of a removed previous secret = %v, want ErrInvalidToken", err)
	}
	if _, err := done.Verify(newTok); err != nil {
		t.Fatalf("a token of the current secret: %v", err)
	}
}

func TestTokensEphemeral(t *testing.T) {
	a, err := auth.NewTokens("", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Ephemeral() || a.TTL() != auth.DefaultTokenTTL {
		t.Fatalf("Ephemeral = %v, TTL = %v", a.Ephemeral(), a.TTL())
	}
	tok, _, err := a.Issue(alice)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Verify(tok); err != nil {
		t.Fatalf("the same process: %v", err)
	}
	// A restart: a new random key.
	b, _ := auth.NewTokens("", nil, 0)
	if _, err := b.Verify(tok); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("after a restart = %v, want ErrInvalidToken", err)
	}
}

func TestNewTokensErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		secret   string
		previous []string
		ttl      time.Duration
		want     string
	}{
		"short secret":   {"too-short", nil, 0, "auth.jwt_secret"},
		"short previous": {secretA, []string{secretB, "short"}, 0, "auth.previous_jwt_secrets[1]"},
		"negative ttl":   {secretA, nil, -time.Second, "negative"},
	} {
		if _, err := auth.NewTokens(tc.secret, tc.previous, tc.ttl); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewTokens = %v, want an error naming %s", name, err, tc.want)
		}
	}
}

func TestCSRF(t *testing.T) {
	a, err := auth.NewTokens(secretA, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := auth.NewTokens(secretA, []string{secretB}, 0)
	b, _ := auth.NewTokens(secretB, nil, 0)
	// After a rotation from A to B, with A among the previous secrets.
	rotated, _ := auth.NewTokens(secretB, []string{secretA}, 0)
	tok := a.CSRF("session-1")
	if len(tok) != 64 || tok != a2.CSRF("session-1") || rotated.CSRF("session-1") != b.CSRF("session-1") {
		t.Fatalf("CSRF is not a stable function of secret and session: %q %q", tok, a2.CSRF("session-1"))
	}
	for _, tc := range []struct {
		name    string
		t       *auth.Tokens
		session string
		token   string
		want    bool
	}{
		{"its own", a, "session-1", tok, true},
		{"another session's", a, "session-2", tok, false},
		{"another secret's", b, "session-1", tok, false},
		{"a previous secret's (a page loaded before a rotation)", rotated, "session-1", tok, true},
		{"a previous secret's, another session", rotated, "session-2", tok, false},
		{"the new secret's after the rotation", rotated, "session-1", rotated.CSRF("session-1"), true},
		{"empty", a, "session-1", "", false},
		{"no session", a, "", a.CSRF(""), false},
		{"upper case", a, "session-1", strings.ToUpper(tok), false},
	} {
		if got := tc.t.CheckCSRF(tc.session, tc.token); got != tc.want {
			t.Errorf("%s: CheckCSRF = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Not the JWT key: a CSRF token says nothing about the signing key.
	if tok == hex.EncodeToString(hmacKey(t, secretA)) {
		t.Fatal("the CSRF key is the signing key")
	}
	e1, _ := auth.NewTokens("", nil, 0)
	e2, _ := auth.NewTokens("", nil, 0)
	if e1.CSRF("s") == e2.CSRF("s") {
		t.Fatal("ephemeral instances share a CSRF key")
	}
}
