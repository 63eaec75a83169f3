package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/ldap"
)

// Authenticator checks logins against the users table and, if configured,
// an LDAP directory. It holds no state of its own besides its Limiter: to
// change the LDAP configuration, build a new one with the same Limiter.
type Authenticator struct {
	users   *Users
	ldap    *ldap.Config
	limiter *Limiter
}

// NewAuthenticator returns an Authenticator over users. ldapConfig nil
// turns LDAP off; otherwise it is validated here. limiter nil means a
// Limiter with the default limits on users' database.
func NewAuthenticator(users *Users, ldapConfig *ldap.Config, limiter *Limiter) (*Authenticator, error) {
	if users == nil {
		return nil, errors.New("auth: NewAuthenticator needs the users table")
	}
	if ldapConfig != nil {
		if err := ldapConfig.Validate(); err != nil {
			return nil, err
		}
		c := *ldapConfig
		ldapConfig = &c
	}
	if limiter == nil {
		var err error
		if limiter, err = NewLimiter(users.db, LimitOptions{}); err != nil {
			return nil, err
		}
	}
	return &Authenticator{users: users, ldap: ldapConfig, limiter: limiter}, nil
}

// LoginRequest is one login attempt.
type LoginRequest struct {
	Username string // lower-cased before use
	Password string
	IP       string // the client's address, for the per-address limit; may be empty
}

// Login checks a user name and password and returns the user, with
// LastLogin set to now.
//
// In order: a name longer than MaxNameLength is refused with
// ErrInvalidName (no user can have it; it is not counted); then the rate
// limits for the name and the address (a *RateLimitedError, before any
// password is looked at); then a free password check (ErrBusy after a
// short wait); then a local user's password hash; or, for a name that is
// not a local user, the LDAP directory, whose users are created here on
// their first login and have their name and address refreshed on every
// later one. A local user is never checked against LDAP, so a directory
// entry with the same name cannot take the account over, and an LDAP
// user's login never looks at a local hash.
//
// Every refusal wraps ErrInvalidCredentials and counts against the
// limits; see the package comment. An error that wraps none of
// ErrInvalidCredentials, ErrRateLimited, ErrBusy and ErrInvalidName (the
// directory unreachable: ldap.ErrUnavailable; the database failing) is
// the server's problem, not the caller's, and does not count.
func (a *Authenticator) Login(ctx context.Context, r LoginRequest) (User, error) {
	if len(r.Username) > MaxNameLength {
		return User{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalidName, MaxNameLength)
	}
	name := strings.ToLower(r.Username)
	res, err := a.limiter.Reserve(ctx, name, r.IP)
	if err != nil {
		// Recorded per refusing key at most once per RecordEvery, with a
		// count (the rest by Sweep): a flood cannot flood the log. A log
		// that cannot be written refuses nothing more.
		var limited *RateLimitedError
		if errors.As(err, &limited) {
			if rec := a.limiter.noteRefusal(limited, name, r.IP); rec != nil {
				if aerr := audit.Write(ctx, a.users.db, rec.entry()); aerr != nil {
					return User{}, errors.Join(err, aerr)
				}
			}
		}
		return User{}, err
	}
	if err := a.limiter.acquireCheck(ctx); err != nil {
		return User{}, errors.Join(err, res.Cancel(ctx))
	}
	u, err := a.login(ctx, name, r.Password)
	a.limiter.releaseCheck()
	if err != nil {
		if errors.Is(err, ErrInvalidCredentials) {
			if ferr := res.Failed(ctx); ferr != nil {
				return User{}, errors.Join(err, ferr)
			}
			// Refusals are bounded by the limiter (rate-limited attempts
			// are not checked, so not recorded). A log that cannot be
			// written refuses nothing more: the login is refused anyway.
			if aerr := audit.Write(ctx, a.users.db, audit.Entry{Kind: audit.KindLogin, Source: r.IP, Data: loginData(name, "refused")}); aerr != nil {
				return User{}, errors.Join(err, aerr)
			}
		} else if cerr := res.Cancel(ctx); cerr != nil {
			return User{}, errors.Join(err, cerr)
		}
		return User{}, err
	}
	if err := res.Succeeded(ctx); err != nil {
		return User{}, err
	}
	now := store.Now()
	err = a.users.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&User{}).Where("id = ?", u.ID).Update("last_login", now).Error; err != nil {
			return err
		}
		_, err := audit.Append(tx, audit.Entry{Kind: audit.KindLogin, User: u.ID, Source: r.IP, Data: loginData(name, "ok")})
		return err
	})
	if err != nil {
		return User{}, fmt.Errorf("auth: recording the login of %s: %w", u.Name, err)
	}
	u.LastLogin = &now
	return u, nil
}

// loginData is an audit record's data for a login attempt; name is at
// most MaxNameLength bytes (Login checked).
func loginData(name, result string) map[string]string {
	return map[string]string{"name": name, "result": result}
}

func (a *Authenticator) login(ctx context.Context, name, pw string) (User, error) {
	if err := ValidateName(name); err != nil {
		// Not a name any user can have: refuse without asking anyone, but
		// take as long as if we had.
		spendHashTime(pw)
		return User{}, fmt.Errorf("%w: %w", ErrInvalidCredentials, err)
	}
	u, err := a.users.ByName(ctx, name)
	switch {
	case err == nil && u.Source == SourceLocal:
		if u.PasswordHash == "" {
			spendHashTime(pw)
			return User{}, fmt.Errorf("%w: local user %s has no password", ErrInvalidCredentials, name)
		}
		if err := CheckPassword(u.PasswordHash, pw); err != nil {
			return User{}, err
		}
		if u.Disabled {
			return User{}, fmt.Errorf("%w: %w: %s", ErrInvalidCredentials, ErrUserDisabled, name)
		}
		return u, nil
	case err == nil && u.Source != SourceLDAP:
		spendHashTime(pw)
		return User{}, fmt.Errorf("%w: user %s has unknown source %q", ErrInvalidCredentials, name, u.Source)
	case err != nil && !errors.Is(err, ErrUserNotFound):
		return User{}, err
	}
	// An LDAP user, or nobody yet.
	if a.ldap == nil {
		spendHashTime(pw)
		if err == nil {
			return User{}, fmt.Errorf("%w: %s is an LDAP user and LDAP is not configured", ErrInvalidCredentials, name)
		}
		return User{}, fmt.Errorf("%w: no user %s", ErrInvalidCredentials, name)
	}
	e, lerr := ldap.Authenticate(ctx, *a.ldap, name, pw)
	if errors.Is(lerr, ldap.ErrInvalidCredentials) {
		return User{}, fmt.Errorf("%w: %w", ErrInvalidCredentials, lerr)
	}
	if lerr != nil {
		return User{}, fmt.Errorf("auth: LDAP login of %s: %w", name, lerr)
	}
	if err == nil { // known LDAP user
		if u.Disabled {
			return User{}, fmt.Errorf("%w: %w: %s", ErrInvalidCredentials, ErrUserDisabled, name)
		}
		if u, err = a.refreshLDAPUser(ctx, u, e); err != nil {
			return User{}, err
		}
	} else {
		u, err = a.users.create(ctx, User{Name: name, Role: RoleUser, Source: SourceLDAP, DisplayName: e.Name, Email: e.Email}, nil)
		if errors.Is(err, ErrUserExists) {
			// A concurrent first login created it; the winner's row decides,
			// local or LDAP.
			return a.login(ctx, name, pw)
		}
		if err != nil {
			return User{}, err
		}
	}
	// The directory's groups as of this sign-in, and the role
	// auth.admin_groups gives them.
	if err := a.users.SetGroups(ctx, u.ID, GroupSourceLDAP, e.Groups); err != nil {
		return User{}, fmt.Errorf("auth: the LDAP groups of %s: %w", name, err)
	}
	return a.users.ByID(ctx, u.ID)
}

// refreshLDAPUser copies the directory's name and address into u's row.
func (a *Authenticator) refreshLDAPUser(ctx context.Context, u User, e ldap.Entry) (User, error) {
	if u.DisplayName == e.Name && u.Email == e.Email {
		return u, nil
	}
	u.DisplayName, u.Email, u.Updated = e.Name, e.Email, time.Now().UTC()
	err := a.users.db.WithContext(ctx).Model(&User{}).Where("id = ?", u.ID).
		Updates(map[string]any{"display_name": u.DisplayName, "email": u.Email, "updated": u.Updated}).Error
	if err != nil {
		return User{}, fmt.Errorf("auth: updating LDAP user %s: %w", u.Name, err)
	}
	return u, nil
}
