// Package auth decides who is calling the server: local users with
// argon2id (or imported bcrypt) password hashes, LDAP users checked by a
// bind against the directory, and the HS256 JWTs the server hands out
// after a login.
//
// Login answers every failed attempt with an error that wraps
// ErrInvalidCredentials, whatever the cause (unknown user, wrong password,
// disabled account, a local name tried against LDAP), and spends the time
// of a password check on each, so neither the answer nor its timing tells
// a caller which names exist. The cause stays in the error for the log:
// errors.Is(err, ErrUserDisabled).
//
// The pieces:
//
//	users, err := auth.NewUsers(db)                 // the users table, migrated
//	a, err := auth.NewAuthenticator(users, ldapCfg, nil)
//	u, err := a.Login(ctx, auth.LoginRequest{Username: "alice", Password: pw, IP: ip})
//	tokens, err := auth.NewTokens(cfg.JWTSecret, cfg.PreviousJWTSecrets, 0)
//	tok, exp, err := tokens.Issue(u)
//	claims, err := tokens.Verify(tok)               // on every request
//	u, err := users.ForToken(ctx, claims)           // the user exists, is enabled, the token is not revoked
package auth

import "errors"

var (
	// ErrInvalidCredentials is wrapped by every refused login. Show the
	// caller only that a login failed (401), never the wrapped detail.
	ErrInvalidCredentials = errors.New("auth: invalid user name or password")
	// ErrUserDisabled is wrapped, together with ErrInvalidCredentials, when
	// the password was right but the account is disabled.
	ErrUserDisabled = errors.New("auth: user disabled")
	// ErrWeakPassword refuses a new password shorter than
	// MinPasswordLength.
	ErrWeakPassword = errors.New("auth: password too short")
	// ErrInvalidName refuses a user name that breaks the naming rule (see
	// ValidateName).
	ErrInvalidName = errors.New("auth: invalid user name")
	// ErrUserExists refuses to add a user whose name is taken.
	ErrUserExists = errors.New("auth: user exists")
	// ErrUserNotFound is returned by lookups and updates of a user that
	// does not exist.
	ErrUserNotFound = errors.New("auth: user not found")
	// ErrNotAdmin refuses an administrator's change when, by the time it
	// is written, they are no longer an enabled administrator (another
	// admin disabled them meanwhile).
	ErrNotAdmin = errors.New("auth: no longer an enabled administrator")
	// ErrInvalidToken is wrapped by every token Verify refuses; the
	// wrapped detail is for logs.
	ErrInvalidToken = errors.New("auth: invalid token")
	// ErrRateLimited is matched by *RateLimitedError.
	ErrRateLimited = errors.New("auth: too many failed logins")
	// ErrBusy refuses a login because too many password checks are
	// running (see LimitOptions.Checks): the server's problem, not the
	// caller's (503, retry in a moment).
	ErrBusy = errors.New("auth: too many logins at once")
)
