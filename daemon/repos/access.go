package repos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/store"
)

// Level is what a user may do with a repository; each level includes the
// ones below it. Instance administrators have LevelAdmin on every
// repository.
type Level int

const (
	// LevelNone: the repository does not exist for the user; every
	// route answers as for an unknown one.
	LevelNone Level = iota
	// LevelRead: see it, search it, start conversations on it.
	LevelRead
	// LevelPush: push a conversation's workspace to an unprotected
	// branch.
	LevelPush
	// LevelAdmin: its settings, sync and access entries.
	LevelAdmin
)

var levelNames = []string{"none", "read", "push", "admin"}

func (l Level) String() string {
	if l < 0 || int(l) >= len(levelNames) {
		return fmt.Sprintf("Level(%d)", int(l))
	}
	return levelNames[l]
}

// ParseLevel parses "read", "push" or "admin"; anything else wraps
// ErrInvalid.
func ParseLevel(s string) (Level, error) {
	if i := slices.Index(levelNames, s); i > 0 {
		return Level(i), nil
	}
	return LevelNone, fmt.Errorf("%w: level %q is not read, push or admin", ErrInvalid, s)
}

func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

func (l *Level) UnmarshalText(b []byte) error {
	v, err := ParseLevel(string(b))
	*l = v
	return err
}

// Kinds of access entry: who an entry is for.
const (
	ForUser  = "user"  // one user, by ID
	ForGroup = "group" // the members of a group (auth.Group), by name
	ForAll   = "all"   // every signed-in user
)

// AccessEntry is a row of table repository_access: Kind/Principal may
// use the repository at Level.
type AccessEntry struct {
	Repository string `gorm:"column:repository_id;primaryKey" json:"-"`
	Kind       string `gorm:"primaryKey;index:repository_access_principal,priority:1" json:"kind"`
	// Principal is the user's ID, the group's name, or "" for ForAll.
	Principal string `gorm:"primaryKey;index:repository_access_principal,priority:2" json:"-"`
	Level     Level  `gorm:"not null" json:"level"`
	// Name is the user's name or the group's, as the API shows and
	// takes it.
	Name string `gorm:"-" json:"name,omitempty"`
}

func (AccessEntry) TableName() string { return "repository_access" }

// DefaultAccess values (repositories.default_access): the entries a new
// repository gets.
const (
	// DefaultAccessAll gives every signed-in user LevelPush, as before
	// repositories had access entries.
	DefaultAccessAll = "all"
	// DefaultAccessAdmins gives nobody an entry: only administrators see
	// the repository until they add some.
	DefaultAccessAdmins = "admins"
)

// maxAccessEntries bounds one repository's entries.
const maxAccessEntries = 1000

// migrateAccess creates table repository_access; when it did not exist
// yet (an instance upgraded from before access entries), every existing
// repository gets a ForAll LevelPush entry, so nobody loses what they
// could do.
func migrateAccess(db *gorm.DB) (upgraded int, err error) {
	had := db.Migrator().HasTable(&AccessEntry{})
	if err := db.AutoMigrate(&AccessEntry{}); err != nil {
		return 0, fmt.Errorf("repos: migrating table repository_access: %w", err)
	}
	if err := migrateGeneration(db); err != nil {
		return 0, fmt.Errorf("repos: creating the access generation: %w", err)
	}
	if had {
		// Entries go with their repository in one transaction; these
		// would be from a database edited by hand.
		if err := db.Exec(`DELETE FROM repository_access WHERE repository_id NOT IN (SELECT id FROM repositories)`).Error; err != nil {
			return 0, fmt.Errorf("repos: removing the access entries of deleted repositories: %w", err)
		}
		return 0, nil
	}
	res := db.Exec(`INSERT INTO repository_access (repository_id, kind, principal, level) SELECT id, ?, '', ? FROM repositories`, ForAll, LevelPush)
	if res.Error != nil {
		return 0, fmt.Errorf("repos: giving existing repositories access for all: %w", res.Error)
	}
	return int(res.RowsAffected), nil
}

// accessTriggers are the writes that count in the access generation
// (see migrateGeneration).
var accessTriggers = []struct{ name, event, table, when string }{
	{"access_insert", "INSERT", "repository_access", ""},
	{"access_update", "UPDATE", "repository_access", ""},
	{"access_delete", "DELETE", "repository_access", ""},
	{"members_insert", "INSERT", "group_members", ""},
	{"members_update", "UPDATE", "group_members", ""},
	{"members_delete", "DELETE", "group_members", ""},
	{"repositories_insert", "INSERT", "repositories", ""},
	{"repositories_delete", "DELETE", "repositories", ""},
	{"users_role", "UPDATE OF role", "users", "OLD.role IS DISTINCT FROM NEW.role"},
}

// migrateGeneration creates table access_generation, one row counting
// the changes that can change what a user may read, and the triggers
// that count them: any write to the access entries or the group
// memberships, a repository added or deleted, a user's role changed.
// Triggers, so that no writer (the API, codumentorctl, another replica,
// a hand-edit) can change access without a new generation; Readable's
// answers are kept under theirs. The table is the same on both
// backends; the triggers are each one's own dialect. They are created
// in one transaction, which on PostgreSQL serializes replicas starting
// together (concurrent CREATE OR REPLACE of one function can fail).
func migrateGeneration(db *gorm.DB) error {
	qs := []string{
		`CREATE TABLE IF NOT EXISTS access_generation (id INTEGER PRIMARY KEY CHECK (id = 1), n BIGINT NOT NULL)`,
		`INSERT INTO access_generation (id, n) VALUES (1, 0) ON CONFLICT DO NOTHING`,
	}
	if store.Backend(db) == store.BackendPostgres {
		qs = append(qs, postgresGenerationTriggers()...)
	} else {
		qs = append(qs, sqliteGenerationTriggers()...)
	}
	return db.Transaction(func(tx *gorm.DB) error {
		for _, q := range qs {
			if err := tx.Exec(q).Error; err != nil {
				return err
			}
		}
		return nil
	})
}

func sqliteGenerationTriggers() []string {
	var qs []string
	for _, t := range accessTriggers {
		when := ""
		if t.when != "" {
			when = " WHEN " + t.when
		}
		qs = append(qs, `CREATE TRIGGER IF NOT EXISTS access_generation_`+t.name+` AFTER `+t.event+` ON `+t.table+when+
			` BEGIN UPDATE access_generation SET n = n + 1 WHERE id = 1; END`)
	}
	return qs
}

// postgresGenerationTriggers counts once per statement where no row's
// values decide (a bulk insert of entries is one change), once per row
// where they do (the role).
func postgresGenerationTriggers() []string {
	qs := []string{`CREATE OR REPLACE FUNCTION access_generation_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE access_generation SET n = n + 1 WHERE id = 1;
	RETURN NULL;
END
$$`}
	for _, t := range accessTriggers {
		each := " FOR EACH STATEMENT"
		if t.when != "" {
			each = " FOR EACH ROW WHEN (" + t.when + ")"
		}
		qs = append(qs, `CREATE OR REPLACE TRIGGER access_generation_`+t.name+` AFTER `+t.event+` ON `+t.table+each+
			` EXECUTE FUNCTION access_generation_count()`)
	}
	return qs
}

// readableCache holds Readable's answers under the access generation
// they were read at; a new generation empties it.
type readableCache struct {
	mu    sync.Mutex
	gen   int64
	users map[string]readableSet
}

type readableSet struct {
	ids []string
	all bool
}

// maxReadableCache bounds the users a readableCache holds; past it, it
// starts over.
const maxReadableCache = 4096

func (c *readableCache) get(gen int64, user string) (readableSet, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return readableSet{}, false
	}
	r, ok := c.users[user]
	return r, ok
}

func (c *readableCache) put(gen int64, user string, r readableSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen > gen {
		return // read before a change another call has seen
	}
	if c.gen != gen || c.users == nil || len(c.users) >= maxReadableCache {
		c.gen, c.users = gen, map[string]readableSet{}
	}
	c.users[user] = r
}

// granted is the SQL condition that an access entry a applies to user ?
// (three times the user's ID).
const granted = `(a.kind = 'all' OR (a.kind = 'user' AND a.principal = ?) OR (a.kind = 'group' AND a.principal IN (SELECT group_name FROM group_members WHERE user_id = ?)))`

// Access is the one access check of repositories: repository id and the
// level u has on it. A repository u may not read answers ErrNotFound, as
// an unknown one does, so that callers cannot tell the two apart.
func (s *Service) Access(ctx context.Context, u auth.User, id string) (Repository, Level, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return Repository{}, LevelNone, err
	}
	l, err := s.level(ctx, u, id)
	if err != nil {
		return Repository{}, LevelNone, err
	}
	if l < LevelRead {
		return Repository{}, LevelNone, ErrNotFound
	}
	return r, l, nil
}

func (s *Service) level(ctx context.Context, u auth.User, id string) (Level, error) {
	if u.Role == auth.RoleAdmin {
		return LevelAdmin, nil
	}
	var l Level
	err := s.o.DB.WithContext(ctx).Raw(`SELECT COALESCE(MAX(a.level), 0) FROM repository_access a WHERE a.repository_id = ? AND `+granted,
		id, u.ID, u.ID).Scan(&l).Error
	if err != nil {
		return LevelNone, fmt.Errorf("repos: reading the access to %s: %w", id, err)
	}
	return l, nil
}

// readable is the SQL condition that repository r is readable by user
// ? (an administrator, or an entry applies; three times the user's ID).
const readable = `(EXISTS (SELECT 1 FROM users u WHERE u.id = ? AND u.role = 'admin') OR EXISTS (SELECT 1 FROM repository_access a WHERE a.repository_id = r.id AND ` + granted + `))`

// ListFor returns the repositories u may read, by name.
func (s *Service) ListFor(ctx context.Context, u auth.User) ([]Repository, error) {
	rs := []Repository{}
	if err := s.o.DB.WithContext(ctx).Table("repositories r").Where(readable, u.ID, u.ID, u.ID).Order("r.name").Find(&rs).Error; err != nil {
		return nil, fmt.Errorf("repos: listing: %w", err)
	}
	return rs, nil
}

// readableIDs selects the IDs of the repositories user $1 may read by
// their entries, each part by an index lookup. Raw SQL on database/sql
// has no placeholder both backends share but $N (SQLite binds $N to
// the Nth argument too).
const readableIDs = `SELECT repository_id FROM repository_access WHERE kind = 'all'
	UNION SELECT repository_id FROM repository_access WHERE kind = 'user' AND principal = $1
	UNION SELECT a.repository_id FROM group_members m JOIN repository_access a ON a.kind = 'group' AND a.principal = m.group_name WHERE m.user_id = $1`

// Readable returns the IDs of the repositories the user with ID userID
// may read, and whether that is every repository (for
// retrieval.Searcher.Readable: a search then needs no filter, and no
// list is read). It runs on every search: an answer is kept until the
// access generation changes, and read again in one transaction with it.
func (s *Service) Readable(ctx context.Context, userID string) (ids []string, all bool, err error) {
	db, err := s.o.DB.DB()
	if err != nil {
		return nil, false, err
	}
	var gen int64
	if err := db.QueryRowContext(ctx, `SELECT n FROM access_generation WHERE id = 1`).Scan(&gen); err != nil {
		return nil, false, fmt.Errorf("repos: reading the access generation: %w", err)
	}
	if r, ok := s.readable.get(gen, userID); ok {
		return slices.Clone(r.ids), r.all, nil
	}
	// One snapshot for the generation and the list: SQLite's read
	// transaction is one; PostgreSQL's needs REPEATABLE READ (SQLite
	// ignores the level). On database/sql, not gorm, so that no
	// serializing lock is taken for a read.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return nil, false, fmt.Errorf("repos: listing readable repositories: %w", err)
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, `SELECT n FROM access_generation WHERE id = 1`).Scan(&gen); err != nil {
		return nil, false, fmt.Errorf("repos: reading the access generation: %w", err)
	}
	r, err := listReadable(ctx, tx, userID)
	if err != nil {
		return nil, false, err
	}
	s.readable.put(gen, userID, r)
	return slices.Clone(r.ids), r.all, nil
}

// listReadable reads what Readable answers.
func listReadable(ctx context.Context, tx *sql.Tx, userID string) (readableSet, error) {
	var admin bool
	var total, forAll, forUser, forGroup int64
	// The common cases first, by counts over the entries' indexes: one
	// principal the user is (all, the user, one of their groups) with an
	// entry on every repository. A principal has one entry at most per
	// repository, and the entries go with their repository, in its
	// transaction: no entry outlives it (see Delete and migrateAccess).
	err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM users WHERE id = $1 AND role = 'admin'), (SELECT COUNT(*) FROM repositories),
		(SELECT COUNT(*) FROM repository_access WHERE kind = 'all'),
		(SELECT COUNT(*) FROM repository_access WHERE kind = 'user' AND principal = $1),
		(SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM group_members m JOIN repository_access a ON a.kind = 'group' AND a.principal = m.group_name WHERE m.user_id = $1 GROUP BY m.group_name) g)`,
		userID).Scan(&admin, &total, &forAll, &forUser, &forGroup)
	if err != nil {
		return readableSet{}, fmt.Errorf("repos: counting readable repositories: %w", err)
	}
	if admin || max(forAll, forUser, forGroup) == total {
		return readableSet{all: true}, nil
	}
	rows, err := tx.QueryContext(ctx, readableIDs, userID)
	if err != nil {
		return readableSet{}, fmt.Errorf("repos: listing readable repositories: %w", err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return readableSet{}, fmt.Errorf("repos: listing readable repositories: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return readableSet{}, fmt.Errorf("repos: listing readable repositories: %w", err)
	}
	if int64(len(ids)) == total {
		return readableSet{all: true}, nil
	}
	return readableSet{ids: ids}, nil
}

// AccessEntries returns repository id's access entries, with names.
func (s *Service) AccessEntries(ctx context.Context, id string) ([]AccessEntry, error) {
	return accessEntries(s.o.DB.WithContext(ctx), id)
}

func accessEntries(db *gorm.DB, id string) ([]AccessEntry, error) {
	var rows []struct {
		Kind, Principal, Name string
		Level                 Level
	}
	err := db.Table("repository_access a").Select("a.kind, a.principal, a.level, CASE a.kind WHEN 'user' THEN COALESCE(u.name, a.principal) ELSE a.principal END AS name").
		Joins("LEFT JOIN users u ON a.kind = 'user' AND u.id = a.principal").
		Where("a.repository_id = ?", id).Order("a.kind, name").Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("repos: reading the access entries of %s: %w", id, err)
	}
	es := make([]AccessEntry, len(rows))
	for i, r := range rows {
		es[i] = AccessEntry{Repository: id, Kind: r.Kind, Principal: r.Principal, Level: r.Level, Name: r.Name}
	}
	return es, nil
}

// SetAccess replaces repository id's access entries with es (Kind, Name
// and Level; a user is named by user name, a group by group name, which
// need not exist yet: a directory's group appears at its members' first
// sign-in). by is who does it, for the audit record that holds the old
// and new entries. It returns the entries as stored.
func (s *Service) SetAccess(ctx context.Context, by, id string, es []AccessEntry) ([]AccessEntry, error) {
	if len(es) > maxAccessEntries {
		return nil, fmt.Errorf("%w: %d access entries; at most %d", ErrInvalid, len(es), maxAccessEntries)
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []AccessEntry
	err = s.o.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		rows := make([]AccessEntry, 0, len(es))
		seen := map[[2]string]bool{}
		for _, e := range es {
			if e.Level < LevelRead || e.Level > LevelAdmin {
				return fmt.Errorf("%w: level must be read, push or admin", ErrInvalid)
			}
			row := AccessEntry{Repository: id, Kind: e.Kind, Level: e.Level}
			switch e.Kind {
			case ForAll:
				if e.Name != "" {
					return fmt.Errorf("%w: an entry for all names nobody (leave name out)", ErrInvalid)
				}
			case ForUser:
				var uid string
				if err := tx.Model(&auth.User{}).Where("name = ?", strings.ToLower(e.Name)).Limit(1).Pluck("id", &uid).Error; err != nil {
					return err
				}
				if uid == "" {
					return fmt.Errorf("%w: no user %q", ErrInvalid, clip(e.Name))
				}
				row.Principal = uid
			case ForGroup:
				n, err := auth.NormalizeGroup(e.Name)
				if err != nil {
					return fmt.Errorf("%w: %w", ErrInvalid, err)
				}
				row.Principal = n
			default:
				return fmt.Errorf("%w: kind %q is not user, group or all", ErrInvalid, clip(e.Kind))
			}
			k := [2]string{row.Kind, row.Principal}
			if seen[k] {
				return fmt.Errorf("%w: %s %q has two entries", ErrInvalid, row.Kind, clip(e.Name))
			}
			seen[k] = true
			rows = append(rows, row)
		}
		old, err := accessEntries(tx, id)
		if err != nil {
			return err
		}
		if err := tx.Where("repository_id = ?", id).Delete(&AccessEntry{}).Error; err != nil {
			return err
		}
		if len(rows) > 0 {
			if err := tx.CreateInBatches(rows, 100).Error; err != nil {
				return err
			}
		}
		if out, err = accessEntries(tx, id); err != nil {
			return err
		}
		_, err = audit.Append(tx, audit.Entry{Kind: audit.KindAdmin, User: by, Data: map[string]any{
			"action": "repository_access", "repository": id, "name": r.Name, "before": old, "after": out}})
		return err
	})
	if errors.Is(err, ErrInvalid) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("repos: setting the access entries of %s: %w", id, err)
	}
	return out, nil
}

// SyncRepository is the repository a sync job syncs, "" for a job of
// another kind.
func SyncRepository(j jobs.Job) string {
	if j.Kind != KindSync {
		return ""
	}
	var p syncPayload
	if json.Unmarshal(j.Payload, &p) != nil {
		return ""
	}
	return p.Repository
}

// clip shortens a name quoted back in an error.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
