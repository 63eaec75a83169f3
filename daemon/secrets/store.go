// Package secrets keeps users' secrets and model profiles in the server's
// SQLite database, encrypted at rest with keys derived from the server's
// auth.jwt_secret.
//
// Values are Fernet tokens (AES-128-CBC + HMAC-SHA256) under a key derived
// by HKDF-SHA256 from the secret, one key per kind of row, so a model
// profile's ciphertext never decrypts as a secret. Each row records the ID
// of the key it is under. Rotation is: move the old auth.jwt_secret into
// auth.previous_jwt_secrets, set a new one, and reload the Keyring
// (Store.SetKeyring). Rows are re-encrypted under the new key when they are
// next read, or all at once by Store.Reencrypt (codumentorctl secrets
// rotate --reencrypt); Store.KeyIDs shows which rows still need an old
// secret. A row whose key is not in the keyring fails with ErrUnknownKey.
//
// Without an auth.jwt_secret the Keyring is in plaintext mode: values are
// stored unencrypted, under key ID "plaintext", and encrypted as soon as a
// secret is configured and they are read (or Reencrypt runs). That mode
// exists so a first start works; the server reports it as an error.
//
// Encryption protects the database file, its backups and copies; it does
// not protect against someone who can read the server's configuration.
package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/integrations/llm"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// MaxValueSize is the largest value Put accepts, in bytes.
const MaxValueSize = 64 << 10

// maxNameLen is the longest name.
const maxNameLen = 64

var (
	// ErrNotFound is wrapped by errors about a secret or profile that does
	// not exist, or that belongs to another user (the two answer the same).
	// It wraps agentcore.ErrNotFound.
	ErrNotFound = fmt.Errorf("secrets: %w", agentcore.ErrNotFound)
	// ErrBadName is wrapped by errors about a name outside
	// [A-Za-z_][A-Za-z0-9_]{0,63}.
	ErrBadName = errors.New("secrets: invalid name")
	// ErrBadValue is wrapped by errors about an empty or too large value.
	ErrBadValue = errors.New("secrets: invalid value")
	// ErrUnknownKey is wrapped by errors about a row encrypted under a key
	// that is not in the keyring: its secret must go back into
	// auth.previous_jwt_secrets.
	ErrUnknownKey = errors.New("secrets: encrypted under a key that is not in the keyring")
	// ErrPlaintext is returned by Reencrypt when the keyring has no
	// current secret to encrypt under.
	ErrPlaintext = errors.New("secrets: no auth.jwt_secret is set, so there is no key to encrypt under; set auth.jwt_secret (or CODUMENTOR_JWT_SECRET) first")
)

// Kinds of rows in the secrets table.
const (
	kindSecret  = "secret"
	kindProfile = "model_profile"
	kindOIDC    = "oidc_tokens" // oidc.go
)

func purposeOf(kind string) purpose {
	switch kind {
	case kindProfile:
		return purposeModelProfiles
	case kindOIDC:
		return purposeOIDCTokens
	}
	return purposeSecrets
}

func label(kind string) string {
	switch kind {
	case kindProfile:
		return "model profile"
	case kindOIDC:
		return "OIDC tokens"
	}
	return "secret"
}

// row is one secret or model profile in table secrets.
type row struct {
	ID         int64     `gorm:"primaryKey"`
	UserID     string    `gorm:"not null;uniqueIndex:secrets_user_kind_name,priority:1"`
	Kind       string    `gorm:"not null;uniqueIndex:secrets_user_kind_name,priority:2"`
	Name       string    `gorm:"not null;uniqueIndex:secrets_user_kind_name,priority:3"`
	Ciphertext []byte    `gorm:"not null"` // a Fernet token, or the value itself under key ID "plaintext"
	KeyID      string    `gorm:"not null;index"`
	Created    time.Time `gorm:"not null"`
	Updated    time.Time `gorm:"not null"`
}

func (row) TableName() string { return "secrets" }

// Meta describes a stored secret or profile, never its value.
type Meta struct {
	Name    string    `json:"name"`
	KeyID   string    `json:"key_id"` // the key it is encrypted under, or "plaintext"
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"` // when the value last changed
}

// ModelProfile is a user's LLM endpoint, stored encrypted as a whole
// because the API key is in it.
type ModelProfile struct {
	BaseURL string `json:"base_url"`
	Model   string `json:"model"`
	APIKey  string `json:"api_key"`
	// Sampling replaces the server's llm sampling settings that it sets.
	llm.Sampling
	// ToolCalls, if set, replaces llm.tool_calls.
	ToolCalls agentcore.ToolCallMode `json:"tool_calls,omitempty"`
	// ContextWindow, when set, replaces llm.context_window.
	ContextWindow int `json:"context_window,omitempty"`
	// SystemPrompt, if set, is the template that replaces the server's
	// system prompt (llm.system_prompt).
	SystemPrompt string `json:"system_prompt,omitempty"`
}

// Stats is what Reencrypt did.
type Stats struct {
	Rows        int `json:"rows"`        // rows in the table
	Reencrypted int `json:"reencrypted"` // rows this call moved to the current key
}

var _ agentcore.SecretResolver = (*Store)(nil)

// Store keeps secrets and model profiles in table secrets. It is safe for
// concurrent use, and several processes may share the database: every
// re-encryption is conditional on the row being unchanged, so it never
// overwrites a concurrent Put.
type Store struct {
	db *gorm.DB
	kr atomic.Pointer[Keyring]
}

// New migrates table secrets in db and returns a Store that encrypts with
// kr.
func New(db *gorm.DB, kr *Keyring) (*Store, error) {
	if kr == nil {
		return nil, errors.New("secrets: no keyring (use NewKeyring(\"\", nil) for the plaintext fallback)")
	}
	if err := db.AutoMigrate(&row{}); err != nil {
		return nil, fmt.Errorf("secrets: migrating table secrets: %w", err)
	}
	if err := audit.Migrate(db); err != nil {
		return nil, err
	}
	s := &Store{db: db}
	s.kr.Store(kr)
	return s, nil
}

// SetKeyring replaces the keyring, for instance after the configuration
// changed. Calls in flight finish with the keyring they started with.
func (s *Store) SetKeyring(kr *Keyring) {
	if kr == nil {
		panic("secrets: SetKeyring(nil)")
	}
	s.kr.Store(kr)
}

// Keyring returns the current keyring.
func (s *Store) Keyring() *Keyring { return s.kr.Load() }

// Put stores user's secret name, replacing any value it had.
func (s *Store) Put(ctx context.Context, user, name, value string) (Meta, error) {
	if value == "" {
		return Meta{}, fmt.Errorf("%w: the value of secret %q is empty", ErrBadValue, name)
	}
	return s.put(ctx, user, kindSecret, name, []byte(value))
}

// Delete removes user's secret name.
func (s *Store) Delete(ctx context.Context, user, name string) error {
	return s.delete(ctx, user, kindSecret, name)
}

// List describes user's secrets, sorted by name.
func (s *Store) List(ctx context.Context, user string) ([]Meta, error) {
	return s.list(ctx, user, kindSecret)
}

// Meta describes user's secret name (never its value).
func (s *Store) Meta(ctx context.Context, user, name string) (Meta, error) {
	r, err := s.get(ctx, user, kindSecret, name)
	if err != nil {
		return Meta{}, err
	}
	return r.meta(), nil
}

// Names lists the names of user's secrets, sorted (agentcore.SecretResolver).
func (s *Store) Names(ctx context.Context, user string) ([]string, error) {
	metas, err := s.list(ctx, user, kindSecret)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(metas))
	for i, m := range metas {
		names[i] = m.Name
	}
	return names, nil
}

// Value returns the value of user's secret name (agentcore.SecretResolver).
// A row that is not under the current key is re-encrypted under it on the
// way; if that fails the value is still returned, and the next read tries
// again.
//
// Reading a value is not its use: the engine reads them all to redact
// them; the audit log records a use where a command substitutes it
// (agentcore.Launch.Secrets).
func (s *Store) Value(ctx context.Context, user, name string) (string, error) {
	b, err := s.read(ctx, user, kindSecret, name)
	return string(b), err
}

// PutProfile stores user's model profile name, replacing any it had.
func (s *Store) PutProfile(ctx context.Context, user, name string, p ModelProfile) (Meta, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return Meta{}, fmt.Errorf("secrets: encoding model profile %q: %w", name, err)
	}
	return s.put(ctx, user, kindProfile, name, b)
}

// Profile returns user's model profile name, re-encrypting it like Value.
func (s *Store) Profile(ctx context.Context, user, name string) (ModelProfile, error) {
	b, err := s.read(ctx, user, kindProfile, name)
	if err != nil {
		return ModelProfile{}, err
	}
	var p ModelProfile
	if err := json.Unmarshal(b, &p); err != nil {
		return ModelProfile{}, fmt.Errorf("secrets: decoding model profile %q of user %q: %w", name, user, err)
	}
	return p, nil
}

// ProfileMeta describes user's model profile name, without decrypting it.
func (s *Store) ProfileMeta(ctx context.Context, user, name string) (Meta, error) {
	r, err := s.get(ctx, user, kindProfile, name)
	if err != nil {
		return Meta{}, err
	}
	return r.meta(), nil
}

// Profiles describes user's model profiles, sorted by name.
func (s *Store) Profiles(ctx context.Context, user string) ([]Meta, error) {
	return s.list(ctx, user, kindProfile)
}

// DeleteProfile removes user's model profile name.
func (s *Store) DeleteProfile(ctx context.Context, user, name string) error {
	return s.delete(ctx, user, kindProfile, name)
}

// Reencrypt re-encrypts every row that is not under the current key:
// plaintext rows and rows under previous secrets. It may run while a
// server uses the same database. Rows it cannot decrypt are left as they
// are and reported in the error (wrapping ErrUnknownKey when their key is
// missing) after the others are done. With a plaintext keyring it fails
// with ErrPlaintext.
func (s *Store) Reencrypt(ctx context.Context) (Stats, error) {
	kr := s.kr.Load()
	if kr.Plaintext() {
		return Stats{}, ErrPlaintext
	}
	var st Stats
	var total int64
	if err := s.db.WithContext(ctx).Model(&row{}).Count(&total).Error; err != nil {
		return st, fmt.Errorf("secrets: counting rows: %w", err)
	}
	st.Rows = int(total)
	unknown := make(map[string]int)
	var errs []error
	for after := int64(0); ; {
		var batch []row
		err := s.db.WithContext(ctx).Where("key_id <> ? AND id > ?", kr.KeyID(), after).
			Order("id").Limit(100).Find(&batch).Error
		if err != nil {
			return st, fmt.Errorf("secrets: reading rows to re-encrypt: %w", err)
		}
		if len(batch) == 0 {
			break
		}
		for _, r := range batch {
			after = r.ID
			plain, err := kr.open(purposeOf(r.Kind), r.Ciphertext, r.KeyID)
			if errors.Is(err, ErrUnknownKey) {
				unknown[r.KeyID]++
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("secrets: %s %q of user %q under key %s %w", label(r.Kind), r.Name, r.UserID, r.KeyID, err))
				continue
			}
			ok, err := s.rewrap(ctx, kr, r, plain)
			if err != nil {
				return st, err
			}
			if ok {
				st.Reencrypted++
			}
		}
	}
	if len(unknown) > 0 {
		ids := slices.Sorted(maps.Keys(unknown))
		n := 0
		for _, c := range unknown {
			n += c
		}
		errs = append(errs, fmt.Errorf("%w: %d rows are under keys %v, which no secret in the keyring (keys %v) gives; put the auth.jwt_secret they were written under into auth.previous_jwt_secrets and run again",
			ErrUnknownKey, n, ids, kr.KeyIDs()))
	}
	return st, errors.Join(errs...)
}

// KeyIDs counts the rows under each key ID ("plaintext" included), for
// seeing what a rotation still depends on.
func (s *Store) KeyIDs(ctx context.Context) (map[string]int, error) {
	var counts []struct {
		KeyID string
		N     int
	}
	err := s.db.WithContext(ctx).Model(&row{}).Select("key_id, count(*) AS n").Group("key_id").Scan(&counts).Error
	if err != nil {
		return nil, fmt.Errorf("secrets: counting rows per key: %w", err)
	}
	m := make(map[string]int, len(counts))
	for _, c := range counts {
		m[c.KeyID] = c.N
	}
	return m, nil
}

func checkName(kind, name string) error {
	ok := len(name) >= 1 && len(name) <= maxNameLen && !(name[0] >= '0' && name[0] <= '9')
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
	}
	if !ok {
		return fmt.Errorf("%w: %s name %q: use 1 to %d characters of A-Z, a-z, 0-9 and _, not starting with a digit (a secret's name becomes part of an environment variable's name)",
			ErrBadName, label(kind), name, maxNameLen)
	}
	return nil
}

func checkUser(user string) error {
	if user == "" {
		return errors.New("secrets: no user")
	}
	return nil
}

func (s *Store) put(ctx context.Context, user, kind, name string, plain []byte) (Meta, error) {
	if err := checkUser(user); err != nil {
		return Meta{}, err
	}
	if err := checkName(kind, name); err != nil {
		return Meta{}, err
	}
	if len(plain) > MaxValueSize {
		return Meta{}, fmt.Errorf("%w: %s %q is %d bytes, more than the limit of %d", ErrBadValue, label(kind), name, len(plain), MaxValueSize)
	}
	data, keyID, err := s.kr.Load().seal(purposeOf(kind), plain)
	if err != nil {
		return Meta{}, err
	}
	now := time.Now().UTC()
	r := row{UserID: user, Kind: kind, Name: name, Ciphertext: data, KeyID: keyID, Created: now, Updated: now}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var replaced int64
		if err := tx.Model(&row{}).Where("user_id = ? AND kind = ? AND name = ?", user, kind, name).Count(&replaced).Error; err != nil {
			return err
		}
		err := tx.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "user_id"}, {Name: "kind"}, {Name: "name"}},
			DoUpdates: clause.AssignmentColumns([]string{"ciphertext", "key_id", "updated"}),
		}).Create(&r).Error
		if err != nil {
			return err
		}
		switch kind {
		case kindSecret:
			e := audit.Entry{Kind: audit.KindSecretCreate, User: user, Data: map[string]any{"name": name, "replaced": replaced > 0}}
			// Someone else's (an administrator's, for the instance):
			// the record names who acted, and the owner.
			if by, _ := audit.ConversationOf(ctx); by != "" && by != user {
				e.User, e.Data = by, map[string]any{"name": name, "replaced": replaced > 0, "owner": user}
			}
			if _, err := audit.Append(tx, e); err != nil {
				return err
			}
		case kindProfile:
			// Where the user's key will be sent, never the key.
			if _, err := audit.Append(tx, audit.Entry{Kind: audit.KindModelProfilePut, User: user, Data: map[string]any{
				"name": name, "endpoint": profileEndpoint(plain), "replaced": replaced > 0,
			}}); err != nil {
				return err
			}
		}
		return tx.Where("user_id = ? AND kind = ? AND name = ?", user, kind, name).Take(&r).Error
	})
	if err != nil {
		return Meta{}, fmt.Errorf("secrets: storing %s %q of user %q: %w", label(kind), name, user, err)
	}
	return r.meta(), nil
}

func (r *row) meta() Meta {
	return Meta{Name: r.Name, KeyID: r.KeyID, Created: r.Created, Updated: r.Updated}
}

func (s *Store) get(ctx context.Context, user, kind, name string) (row, error) {
	if err := checkUser(user); err != nil {
		return row{}, err
	}
	if err := checkName(kind, name); err != nil {
		return row{}, err
	}
	var r row
	err := s.db.WithContext(ctx).Where("user_id = ? AND kind = ? AND name = ?", user, kind, name).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return row{}, fmt.Errorf("%w: no %s %q", ErrNotFound, label(kind), name)
	}
	if err != nil {
		return row{}, fmt.Errorf("secrets: reading %s %q of user %q: %w", label(kind), name, user, err)
	}
	return r, nil
}

func (s *Store) read(ctx context.Context, user, kind, name string) ([]byte, error) {
	r, err := s.get(ctx, user, kind, name)
	if err != nil {
		return nil, err
	}
	kr := s.kr.Load()
	plain, err := kr.open(purposeOf(kind), r.Ciphertext, r.KeyID)
	if errors.Is(err, ErrUnknownKey) {
		return nil, fmt.Errorf("%w: %s %q of user %q is under key %s, and the keyring has keys %v; put the auth.jwt_secret it was written under back into auth.previous_jwt_secrets, or store the value again",
			ErrUnknownKey, label(kind), name, user, r.KeyID, kr.KeyIDs())
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: %s %q of user %q under key %s %w", label(kind), name, user, r.KeyID, err)
	}
	if !kr.Plaintext() && r.KeyID != kr.KeyID() {
		// Lazy re-encryption; a failure leaves the row readable as it was.
		_, _ = s.rewrap(ctx, kr, r, plain)
	}
	return plain, nil
}

// rewrap stores plain under kr's current key in place of r, unless the row
// changed since r was read (a concurrent Put or re-encryption wins). It
// reports whether it replaced the row. The row's Updated time stays: the
// value did not change.
func (s *Store) rewrap(ctx context.Context, kr *Keyring, r row, plain []byte) (bool, error) {
	data, keyID, err := kr.seal(purposeOf(r.Kind), plain)
	if err != nil {
		return false, err
	}
	res := s.db.WithContext(ctx).Model(&row{}).
		Where("id = ? AND key_id = ? AND ciphertext = ?", r.ID, r.KeyID, r.Ciphertext).
		Updates(map[string]any{"ciphertext": data, "key_id": keyID})
	if res.Error != nil {
		return false, fmt.Errorf("secrets: re-encrypting %s %q of user %q: %w", label(r.Kind), r.Name, r.UserID, res.Error)
	}
	return res.RowsAffected == 1, nil
}

func (s *Store) delete(ctx context.Context, user, kind, name string) error {
	if err := checkUser(user); err != nil {
		return err
	}
	if err := checkName(kind, name); err != nil {
		return err
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var endpoint string
		if kind == kindProfile {
			// The record names the endpoint the profile pointed at, if
			// the row can still be decrypted.
			var r row
			if err := tx.Where("user_id = ? AND kind = ? AND name = ?", user, kind, name).Take(&r).Error; err == nil {
				if plain, err := s.kr.Load().open(purposeOf(kind), r.Ciphertext, r.KeyID); err == nil {
					endpoint = profileEndpoint(plain)
				}
			}
		}
		res := tx.Where("user_id = ? AND kind = ? AND name = ?", user, kind, name).Delete(&row{})
		if res.Error != nil {
			return fmt.Errorf("secrets: deleting %s %q of user %q: %w", label(kind), name, user, res.Error)
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%w: no %s %q", ErrNotFound, label(kind), name)
		}
		e := audit.Entry{Kind: audit.KindSecretDelete, User: user, Data: map[string]string{"name": name}}
		if kind == kindProfile {
			e = audit.Entry{Kind: audit.KindModelProfileDelete, User: user, Data: map[string]string{"name": name, "endpoint": endpoint}}
		}
		_, err := audit.Append(tx, e)
		return err
	})
}

// profileEndpoint is the endpoint of a stored model profile ("" if it
// does not decode).
func profileEndpoint(plain []byte) string {
	var p ModelProfile
	_ = json.Unmarshal(plain, &p)
	return p.BaseURL
}

func (s *Store) list(ctx context.Context, user, kind string) ([]Meta, error) {
	if err := checkUser(user); err != nil {
		return nil, err
	}
	var rows []row
	err := s.db.WithContext(ctx).Select("name, key_id, created, updated").
		Where("user_id = ? AND kind = ?", user, kind).Order("name").Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("secrets: listing %ss of user %q: %w", label(kind), user, err)
	}
	metas := make([]Meta, len(rows))
	for i := range rows {
		metas[i] = rows[i].meta()
	}
	return metas, nil
}
