package auth

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/sandboxkit/randid"
)

// Role is what a user may do: RoleAdmin also manages users.
type Role string

const (
	RoleUser  Role = "user"
	RoleAdmin Role = "admin"
)

// A user's Source says who checks their password.
const (
	SourceLocal = "local" // the hash in the users table
	SourceLDAP  = "ldap"  // the directory, by a bind; no hash is stored
)

// User is a row of the users table. PasswordHash never leaves the server:
// it is not marshalled to JSON.
type User struct {
	ID           string     `gorm:"primaryKey" json:"id"`
	Name         string     `gorm:"uniqueIndex;not null" json:"name"`
	Role         Role       `gorm:"not null" json:"role"`
	Source       string     `gorm:"not null" json:"source"`
	Disabled     bool       `gorm:"not null" json:"disabled"`
	PasswordHash string     `json:"-"`
	DisplayName  string     `json:"display_name"`
	Email        string     `json:"email"`
	Created      time.Time  `gorm:"not null" json:"created"`
	Updated      time.Time  `gorm:"not null" json:"updated"`
	LastLogin    *time.Time `json:"last_login"`
	// TokenVersion is in every token issued to the user; raising it
	// (password change, disabling, sign-out) revokes them all.
	TokenVersion int64 `gorm:"not null;default:0" json:"-"`
	// AdminByGroup: the role is the admin_groups' (see SetAdminGroups),
	// and goes when the user leaves them.
	AdminByGroup bool `gorm:"not null;default:false" json:"-"`
}

// MaxNameLength is the longest user name.
const MaxNameLength = 64

// ValidateName checks the naming rule: 1 to 64 characters of a-z, 0-9,
// '.', '_' and '-', starting with a letter or digit. Names are lower-case
// so that "Alice" and "alice" cannot be two users (LDAP compares names
// without case, and so do people). The error wraps ErrInvalidName.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLength {
		return fmt.Errorf("%w: %q must be 1 to %d characters", ErrInvalidName, name, MaxNameLength)
	}
	for i, c := range []byte(name) {
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		case i == 0 && (c == '.' || c == '_' || c == '-'):
			return fmt.Errorf("%w: %q must start with a letter or a digit", ErrInvalidName, name)
		default:
			return fmt.Errorf("%w: %q may contain only lower-case letters, digits, '.', '_' and '-'", ErrInvalidName, name)
		}
	}
	return nil
}

// Users is the users table. Its methods are safe for concurrent use.
type Users struct {
	db          *gorm.DB
	adminGroups atomic.Pointer[[]string]
}

// NewUsers migrates the users table in db and returns it.
func NewUsers(db *gorm.DB) (*Users, error) {
	if err := db.AutoMigrate(&User{}, &Group{}, &GroupMember{}); err != nil {
		return nil, fmt.Errorf("auth: migrating the users table: %w", err)
	}
	if err := audit.Migrate(db); err != nil {
		return nil, err
	}
	return &Users{db: db}, nil
}

// AddUser is a new local user.
type AddUser struct {
	Name     string
	Password string // at least MinPasswordLength characters
	Admin    bool
	// By is who adds the user, for the audit log: an administrator's ID,
	// or CommandLine.
	By string
}

// CommandLine is the actor of administrative actions taken with
// codumentorctl, in the audit log.
const CommandLine = "codumentorctl"

// Add creates a local user with a hashed password.
func (us *Users) Add(ctx context.Context, a AddUser) (User, error) {
	if err := ValidateName(a.Name); err != nil {
		return User{}, err
	}
	hash, err := HashPassword(a.Password)
	if err != nil {
		return User{}, err
	}
	role := RoleUser
	if a.Admin {
		role = RoleAdmin
	}
	return us.create(ctx, User{Name: a.Name, Role: role, Source: SourceLocal, PasswordHash: hash}, &audit.Entry{Kind: audit.KindAdmin, User: a.By,
		Data: map[string]any{"action": "user_add", "name": a.Name, "admin": a.Admin}})
}

// create adds u, recording rec (if not nil) in the same transaction.
func (us *Users) create(ctx context.Context, u User, rec *audit.Entry) (User, error) {
	now := time.Now().UTC()
	u.ID, u.Created, u.Updated = randid.New("usr_"), now, now
	err := us.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		// As update: an administrator adds a user only while still an
		// enabled administrator. The transaction holds SQLite's write
		// lock from BEGIN (_txlock=immediate), so nothing disables them
		// between this check and the insert.
		if rec != nil && rec.User != "" && rec.User != CommandLine {
			var n int64
			if err := tx.Model(&User{}).Where("id = ? AND role = ? AND disabled = ?", rec.User, RoleAdmin, false).Count(&n).Error; err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("%w: %s cannot add user %s", ErrNotAdmin, rec.User, u.Name)
			}
		}
		if err := tx.Create(&u).Error; err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		_, err := audit.Append(tx, *rec)
		return err
	})
	if err != nil {
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return User{}, fmt.Errorf("%w: %s", ErrUserExists, u.Name)
		}
		if errors.Is(err, ErrNotAdmin) {
			return User{}, err
		}
		return User{}, fmt.Errorf("auth: adding user %s: %w", u.Name, err)
	}
	return u, nil
}

// ByName returns the user called name, or ErrUserNotFound.
func (us *Users) ByName(ctx context.Context, name string) (User, error) {
	return us.first(ctx, "name = ?", name)
}

// ByID returns the user with the given ID, or ErrUserNotFound.
func (us *Users) ByID(ctx context.Context, id string) (User, error) {
	return us.first(ctx, "id = ?", id)
}

func (us *Users) first(ctx context.Context, query string, arg string) (User, error) {
	var u User
	err := us.db.WithContext(ctx).Where(query, arg).Take(&u).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return User{}, fmt.Errorf("%w: %s", ErrUserNotFound, arg)
	}
	if err != nil {
		return User{}, fmt.Errorf("auth: looking up user %s: %w", arg, err)
	}
	return u, nil
}

// List returns all users ordered by name.
func (us *Users) List(ctx context.Context) ([]User, error) {
	var list []User
	if err := us.db.WithContext(ctx).Order("name").Find(&list).Error; err != nil {
		return nil, fmt.Errorf("auth: listing users: %w", err)
	}
	return list, nil
}

// Count returns the number of users (0: the server has no admin yet).
func (us *Users) Count(ctx context.Context) (int64, error) {
	var n int64
	if err := us.db.WithContext(ctx).Model(&User{}).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("auth: counting users: %w", err)
	}
	return n, nil
}

// SetDisabled disables or re-enables a user. A disabled user cannot log
// in, and disabling revokes the tokens issued so far (re-enabling does
// not bring them back).
// by is who does it (an administrator's ID, or CommandLine), for the
// audit log.
func (us *Users) SetDisabled(ctx context.Context, by, name string, disabled bool) error {
	cols := map[string]any{"disabled": disabled}
	if disabled {
		cols["token_version"] = gorm.Expr("token_version + 1")
	}
	action := "user_enable"
	if disabled {
		action = "user_disable"
	}
	return us.update(ctx, "name", name, cols, &audit.Entry{Kind: audit.KindAdmin, User: by, Data: map[string]string{"action": action, "name": name}})
}

// SetPassword replaces a local user's password and revokes the tokens
// issued so far. An LDAP user's password is the directory's: setting one
// here would let it log in with either. by is who does it, as for
// SetDisabled.
func (us *Users) SetPassword(ctx context.Context, by, name, pw string) error {
	u, err := us.ByName(ctx, name)
	if err != nil {
		return err
	}
	if u.Source != SourceLocal {
		return fmt.Errorf("auth: user %s is managed by %s; change the password there", name, u.Source)
	}
	hash, err := HashPassword(pw)
	if err != nil {
		return err
	}
	return us.update(ctx, "name", name, map[string]any{"password_hash": hash, "token_version": gorm.Expr("token_version + 1")},
		&audit.Entry{Kind: audit.KindAdmin, User: by, Data: map[string]string{"action": "user_password", "name": name}})
}

// Revoke ends every token issued so far to the user with the given ID
// (sign-out: all of the user's sessions end, since a token is not
// tracked on its own).
func (us *Users) Revoke(ctx context.Context, id string) error {
	return us.update(ctx, "id", id, map[string]any{"token_version": gorm.Expr("token_version + 1")}, nil)
}

// ForToken returns the user a verified token speaks for, if the token
// still does: the user exists, is not disabled, and has not had its
// tokens revoked since (see TokenVersion). Those refusals wrap
// ErrInvalidToken; a failing database is another error.
func (us *Users) ForToken(ctx context.Context, c Claims) (User, error) {
	u, err := us.ByID(ctx, c.UserID)
	switch {
	case errors.Is(err, ErrUserNotFound):
		return User{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	case err != nil:
		return User{}, err
	case u.Disabled:
		return User{}, fmt.Errorf("%w: %w: %s", ErrInvalidToken, ErrUserDisabled, u.Name)
	case u.TokenVersion != c.Version:
		return User{}, fmt.Errorf("%w: revoked (version %d, the user's is %d)", ErrInvalidToken, c.Version, u.TokenVersion)
	}
	return u, nil
}

// update sets cols of the user whose column by ("name" or "id") is key,
// recording rec (if not nil) in the same transaction.
func (us *Users) update(ctx context.Context, by, key string, cols map[string]any, rec *audit.Entry) error {
	cols["updated"] = time.Now().UTC()
	// An administrator's change is written only while they are still an
	// enabled administrator, in the same statement: two admins disabling
	// each other at once cannot both succeed.
	byAdmin := rec != nil && rec.User != CommandLine
	return us.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		q := tx.Model(&User{}).Where(by+" = ?", key)
		if byAdmin {
			q = q.Where("EXISTS (SELECT 1 FROM users a WHERE a.id = ? AND a.role = ? AND a.disabled = ?)", rec.User, RoleAdmin, false)
		}
		res := q.Updates(cols)
		if res.Error != nil {
			return fmt.Errorf("auth: updating user %s: %w", key, res.Error)
		}
		if res.RowsAffected == 0 {
			var n int64
			if byAdmin && tx.Model(&User{}).Where(by+" = ?", key).Count(&n).Error == nil && n > 0 {
				return fmt.Errorf("%w: %s cannot change user %s", ErrNotAdmin, rec.User, key)
			}
			return fmt.Errorf("%w: %s", ErrUserNotFound, key)
		}
		if rec == nil {
			return nil
		}
		_, err := audit.Append(tx, *rec)
		return err
	})
}
