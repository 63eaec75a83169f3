// Package audit is the server's tamper-evident audit log: an
// append-only table in the instance database where each record carries
// a MAC (HMAC-SHA256 under a key derived from auth.jwt_secret, see
// Keys) of its content and of the MAC of the one before it, so that an
// edited, deleted or reordered record breaks the chain at a place Verify
// names, and someone who can write the database but does not know the
// secret cannot recompute the chain after an edit. Records MACed under
// a previous secret verify with auth.previous_jwt_secrets.
//
// Records written before keyed MACs (or by a server without
// auth.jwt_secret) carry the plain SHA-256 of the same content instead
// and an empty KeyID; they still verify, and the first keyed record
// pins them. An unkeyed record after a keyed one breaks the chain.
//
// A record is written in the same transaction as the action it records
// (Append with the action's *gorm.DB transaction): the action and its
// record are stored together or not at all. Actions that write nothing
// else (a failed login, the use of a secret, a sandbox launch) use
// Write, which opens a transaction of its own.
//
// Appends are serialized by SQLite's write lock: the database is opened
// with _txlock=immediate (store.Open), so a transaction takes the write
// lock at BEGIN, and reading the last record and inserting the next are
// never interleaved with another writer. The sequence number is the
// primary key besides, so a caller that forgot the transaction gets a
// constraint error, never a fork in the chain.
//
// Records hold names and digests, never a secret's value or a password.
//
// What the chain alone cannot show is the removal of the newest records
// (the chain that is left is intact), nor a rewrite by someone who has
// the key. A Head kept elsewhere shows both: codumentorctl audit head
// prints it, the server writes it to its log every audit.head_interval
// and at shutdown, and Verify with a head fails when the log no longer
// reaches it unchanged.
package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Kinds of records. A kind names what happened; its Data is described
// next to it. Add, never rename: exports and alerts match on them.
const (
	// KindLogin is a login attempt: {"name","result":"ok"|"refused"}.
	// User is the user's ID when the login succeeded; Source the client's
	// address (behind trusted_proxies, the forwarded one).
	KindLogin = "login"
	// KindLoginRateLimited is logins that the rate limits refused
	// unchecked: {"limit":"address"|"name"|"overflow","name","count"};
	// count is how many since the previous record of the same limit and
	// key (the address, or the name), which comes at most once a minute;
	// Source and name are the latest attempt's. Keys beyond the limiter's
	// bound share one "overflow" record.
	KindLoginRateLimited = "login_rate_limited"
	// KindApproval is an approval's decision (or its expiry or
	// withdrawal): {"id","conversation","tool","command","cwd",
	// "background","status","decision","decided_by","rule"}. Command is
	// exactly what runs, with secret placeholders, never their values;
	// rule, only for a decision of the server's approval rules, names
	// the rule (or rules, one per command of a pipeline) that allowed it.
	KindApproval = "approval"
	// KindSandboxLaunch is a sandbox or a command in one, recorded
	// before it starts: {"conversation","profile","argv_sha256","cwd",
	// "seccomp","filter_sha256","launch"}; launch is run (a one-shot
	// sandbox), session (a conversation's sandbox, argv_sha256 empty) or
	// session-command. Conversation is empty for the server's own (an
	// MCP server serves every conversation).
	KindSandboxLaunch = "sandbox_launch"
	// KindSecretCreate is a secret stored or replaced: {"name","replaced"}.
	KindSecretCreate = "secret_create"
	// KindSecretUse is a secret substituted into a sandboxed command:
	// {"name","conversation"}, with the command's sandbox_launch record.
	KindSecretUse = "secret_use"
	// KindSecretDelete is a secret deleted: {"name"}.
	KindSecretDelete = "secret_delete"
	// KindModelProfilePut is a user's model profile stored or replaced:
	// {"name","endpoint","replaced"}, never its API key.
	KindModelProfilePut = "model_profile_put"
	// KindModelProfileDelete is a model profile deleted:
	// {"name","endpoint"}; endpoint is empty if the profile could no
	// longer be decrypted.
	KindModelProfileDelete = "model_profile_delete"
	// KindRepositorySync is a repository's sync: {"repository","name",
	// "job","result"}; result is started (User: who started it, an ID or
	// "codumentorctl"; recorded with the job), fetched (with "head", the
	// fetched commit, recorded with it), or failed (with "error" and
	// "attempt"; the job may retry).
	KindRepositorySync = "repository_sync"
	// KindBrowserLaunch is a start of the headless browser (fetch_urls,
	// render_diagram), recorded before it runs: {"conversation",
	// "binary","sandbox":"on"|"off","detail"}; detail says why Chrome's
	// sandbox is off. It runs in Chrome's own sandbox, not bwrap: a start
	// with it that fails and falls back to --no-sandbox is two records.
	KindBrowserLaunch = "browser_launch"
	// KindAdmin is an administrator's action: {"action", ...}; User is the
	// administrator ("codumentorctl" for the command line).
	KindAdmin = "admin"
	// KindConfig is the configuration a server started with, every
	// secret in it masked: {"config":{...}}.
	KindConfig = "config"
	// KindPush is a push of a reviewed diff: {"conversation","repository",
	// "branch","commit"}. Record it in the transaction that stores the
	// push's result.
	KindPush = "push"
	// KindAttachment is a file attached to a conversation:
	// {"conversation","name","size","sha256"}. Record it in the
	// transaction that stores the attachment.
	KindAttachment = "attachment"
	// KindWorkspaceDiscard is a conversation's workspace changes
	// discarded by its owner: {"conversation"}, recorded before they
	// are removed.
	KindWorkspaceDiscard = "workspace_discard"
	// KindApprovalRule is a user's approval rule added or deleted:
	// {"action":"add"|"delete","id","rule"}; rule is its description
	// (approvalrule.Rule.String).
	KindApprovalRule = "approval_rule"
)

// Entry is what a caller records.
type Entry struct {
	Kind string
	// User is the acting user's ID (or, where there is none, who acted:
	// "server", "codumentorctl"); may be empty for a failed login.
	User string
	// Source is the client's address, when a client acted.
	Source string
	// Data describes the action; it is stored as JSON (a map's keys
	// sorted). Never put a secret value or a password in it.
	Data any
}

// Record is one stored record.
type Record struct {
	// Seq numbers the records 1, 2, 3, … without gaps.
	Seq    int64  `gorm:"primaryKey;autoIncrement:false" json:"seq"`
	Time   string `gorm:"not null;index" json:"time"` // RFC 3339, UTC, nanoseconds (timeFormat)
	Kind   string `gorm:"not null;index" json:"kind"`
	User   string `gorm:"index" json:"user,omitempty"`
	Source string `json:"source,omitempty"`
	Data   []byte `gorm:"not null" json:"-"`
	// Prev is the Hash of record Seq-1 (for record 1: 64 zeros).
	Prev string `gorm:"not null" json:"prev"`
	// Hash is the MAC of this record's fields, Prev and KeyID under the
	// key KeyID names (see mac); for a record with no KeyID, their
	// SHA-256 (see hash).
	Hash string `gorm:"not null" json:"hash"`
	// KeyID names the secret whose key MACed the record (as codumentorctl
	// check names auth.jwt_secret); empty: chained unkeyed.
	KeyID string `gorm:"not null;default:''" json:"key_id,omitempty"`
}

// TableName is the audit table.
func (Record) TableName() string { return "audit_log" }

// MarshalJSON writes Data as the JSON object it is.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record
	return json.Marshal(struct {
		plain
		Data json.RawMessage `json:"data"`
	}{plain(r), json.RawMessage(r.Data)})
}

// UnmarshalJSON reads a record as MarshalJSON writes it (an export).
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record
	var v struct {
		plain
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Record(v.plain)
	r.Data = []byte(v.Data)
	return nil
}

// timeFormat is RFC 3339 with all nine digits of the nanoseconds, so
// that the text sorts as the time does and since= compares in SQL
// (time.RFC3339Nano cuts trailing zeros: "…:05Z" sorted after
// "…:05.5Z").
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// genesis is the Prev of the first record.
var genesis = strings.Repeat("0", 64)

// Migrate creates the audit table in db.
func Migrate(db *gorm.DB) error {
	if err := db.AutoMigrate(&Record{}); err != nil {
		return fmt.Errorf("audit: migrating: %w", err)
	}
	return nil
}

// Append records e in tx, which must be the transaction of the action it
// records (db.Transaction(func(tx *gorm.DB) error { ...; _, err :=
// audit.Append(tx, e); return err })). An error must fail the
// transaction: the action is then not done either.
func Append(tx *gorm.DB, e Entry) (Record, error) {
	if e.Kind == "" {
		return Record{}, errors.New("audit: an entry needs a kind")
	}
	data, err := json.Marshal(e.Data)
	if err != nil {
		return Record{}, fmt.Errorf("audit: encoding the data of a %s record: %w", e.Kind, err)
	}
	if e.Data == nil || string(data) == "null" {
		data = []byte("{}")
	}
	var last Record
	prev, seq := genesis, int64(1)
	err = tx.Select("seq", "hash", "key_id").Order("seq DESC").Limit(1).Take(&last).Error
	switch {
	case err == nil:
		prev, seq = last.Hash, last.Seq+1
	case !errors.Is(err, gorm.ErrRecordNotFound):
		return Record{}, fmt.Errorf("audit: reading the last record: %w", err)
	}
	r := Record{Seq: seq, Time: time.Now().UTC().Format(timeFormat), Kind: e.Kind, User: e.User, Source: e.Source, Data: data, Prev: prev}
	switch k := keysOf(tx); {
	case k != nil && k.current != nil:
		r.KeyID = k.current.id
		r.Hash = r.mac(k.current.key)
	case last.KeyID != "":
		// An unkeyed record would break a keyed chain.
		return Record{}, fmt.Errorf("%w: recording a %s record", ErrNoKey, e.Kind)
	default:
		r.Hash = r.hash()
	}
	if err := tx.Create(&r).Error; err != nil {
		return Record{}, fmt.Errorf("audit: appending a %s record: %w", e.Kind, err)
	}
	return r, nil
}

// Write records e in a transaction of its own, for an action that
// writes nothing else.
func Write(ctx context.Context, db *gorm.DB, e Entry) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		_, err := Append(tx, e)
		return err
	})
}

// hash is the SHA-256 of the record's fields and Prev, each
// length-prefixed so that no two records share an input: an unkeyed
// record's Hash.
func (r *Record) hash() string {
	h := sha256.New()
	r.writeFields(h)
	return hex.EncodeToString(h.Sum(nil))
}

// writeFields writes the record's fields, Prev and extra to w, each
// length-prefixed.
func (r *Record) writeFields(w io.Writer, extra ...string) {
	for _, f := range append([]string{fmt.Sprint(r.Seq), r.Time, r.Kind, r.User, r.Source, string(r.Data), r.Prev}, extra...) {
		fmt.Fprintf(w, "%d:%s\n", len(f), f)
	}
}

// Filter selects records; zero fields select all.
type Filter struct {
	Since time.Time // records at or after
	User  string
	Kind  string
	After int64 // records with a greater Seq
	Limit int   // at most this many (0: no limit)
}

// List returns the records f selects, oldest first.
func List(ctx context.Context, db *gorm.DB, f Filter) ([]Record, error) {
	q := db.WithContext(ctx).Order("seq")
	if !f.Since.IsZero() {
		q = q.Where("time >= ?", f.Since.UTC().Format(timeFormat))
	}
	if f.User != "" {
		// Quoted: PostgreSQL reads a bare user as CURRENT_USER.
		q = q.Where(clause.Eq{Column: clause.Column{Name: "user"}, Value: f.User})
	}
	if f.Kind != "" {
		q = q.Where("kind = ?", f.Kind)
	}
	if f.After > 0 {
		q = q.Where("seq > ?", f.After)
	}
	if f.Limit > 0 {
		q = q.Limit(f.Limit)
	}
	var rs []Record
	if err := q.Find(&rs).Error; err != nil {
		return nil, fmt.Errorf("audit: listing records: %w", err)
	}
	return rs, nil
}

// ErrBroken is wrapped by Verify's error when the chain does not hold.
var ErrBroken = errors.New("audit log chain is broken")

// BrokenError says where the chain breaks and how.
type BrokenError struct {
	// Seq is the record where the break shows.
	Seq int64
	// Problem says what is wrong there.
	Problem string
}

func (e *BrokenError) Error() string {
	return fmt.Sprintf("%v at record %d: %s", ErrBroken, e.Seq, e.Problem)
}

func (e *BrokenError) Unwrap() error { return ErrBroken }

// Verify reads the whole log in order and checks the chain: sequence
// numbers 1, 2, 3, … without gaps, each record's MAC (or, for unkeyed
// records, hash) matching its content and each Prev the MAC of the
// record before, with the keys UseKeys gave db. With heads (kept
// elsewhere, see Head), it also checks that the log still reaches each
// one unchanged. It returns the number of records checked, and a
// *BrokenError naming the first record where an edit, deletion,
// reordering, re-chaining or truncation shows (an error wrapping
// ErrUnknownKey for a record whose key it does not have).
func Verify(ctx context.Context, db *gorm.DB, heads ...Head) (int64, error) {
	v := verifier{keys: keysOf(db), heads: heads}
	v.start(genesis, 1)
	var batch []Record
	err := db.WithContext(ctx).Order("seq").FindInBatches(&batch, 500, func(tx *gorm.DB, _ int) error {
		for i := range batch {
			if err := v.check(&batch[i]); err != nil {
				return err
			}
		}
		return nil
	}).Error
	if err != nil {
		return v.n, err
	}
	return v.n, v.end()
}

// VerifyRecords checks records as Verify checks the table, for an
// export read back, with keys (nil: none, only unkeyed records verify).
// An export that starts after record 1 (--since) is checked from its
// first record on, trusting that record's Prev.
func VerifyRecords(rs []Record, keys *Keys, heads ...Head) error {
	v := verifier{keys: keys, heads: heads}
	v.start(genesis, 1)
	if len(rs) > 0 && rs[0].Seq > 1 {
		v.start(rs[0].Prev, rs[0].Seq)
		// An export from the middle cannot show a head before it.
		v.heads = slices.DeleteFunc(slices.Clone(heads), func(h Head) bool { return h.Seq < rs[0].Seq })
	}
	for i := range rs {
		if err := v.check(&rs[i]); err != nil {
			return err
		}
	}
	return v.end()
}

// verifier walks a chain in order.
type verifier struct {
	keys  *Keys
	heads []Head
	want  int64  // the next sequence number
	prev  string // the MAC the next record must follow
	keyed int64  // the first keyed record seen, 0 before
	n     int64  // records checked
}

func (v *verifier) start(prev string, seq int64) { v.prev, v.want = prev, seq }

func (v *verifier) check(r *Record) error {
	switch {
	case r.Seq == v.want+1:
		return &BrokenError{Seq: r.Seq, Problem: fmt.Sprintf("record %d before it is missing (deleted)", v.want)}
	case r.Seq > v.want:
		return &BrokenError{Seq: r.Seq, Problem: fmt.Sprintf("records %d to %d before it are missing (deleted)", v.want, r.Seq-1)}
	case r.Seq < v.want:
		return &BrokenError{Seq: r.Seq, Problem: "out of order"}
	}
	if r.KeyID == "" {
		if v.keyed > 0 {
			return &BrokenError{Seq: r.Seq, Problem: fmt.Sprintf("it is chained without a key after keyed record %d (re-chained without the key)", v.keyed)}
		}
		if r.Hash != r.hash() {
			return &BrokenError{Seq: r.Seq, Problem: "its content does not match its hash (edited)"}
		}
	} else {
		if err := v.checkMAC(r); err != nil {
			return err
		}
		if v.keyed == 0 {
			v.keyed = r.Seq
		}
	}
	if r.Prev != v.prev {
		return &BrokenError{Seq: r.Seq, Problem: fmt.Sprintf("it does not follow record %d (a record was replaced or the records were reordered)", r.Seq-1)}
	}
	for _, h := range v.heads {
		if h.Seq == r.Seq && !hmac.Equal([]byte(h.MAC), []byte(r.Hash)) {
			return &BrokenError{Seq: r.Seq, Problem: fmt.Sprintf("it is not the record of the head %v taken earlier (the log was rewritten up to here)", h)}
		}
	}
	v.want, v.prev = r.Seq+1, r.Hash
	v.n++
	return nil
}

// checkMAC checks a keyed record's MAC with every key of its ID (two
// secrets can share a 32-bit ID).
func (v *verifier) checkMAC(r *Record) error {
	found := false
	if v.keys != nil {
		for _, k := range v.keys.all {
			if k.id != r.KeyID {
				continue
			}
			found = true
			if hmac.Equal([]byte(r.mac(k.key)), []byte(r.Hash)) {
				return nil
			}
		}
	}
	if !found {
		return fmt.Errorf("%w: record %d is MACed under key ID %s, which is neither auth.jwt_secret's nor one of auth.previous_jwt_secrets' (put the secret back in previous_jwt_secrets to verify it; if it never was yours, the log was re-chained under another key)", ErrUnknownKey, r.Seq, r.KeyID)
	}
	return &BrokenError{Seq: r.Seq, Problem: "its content does not match its MAC (edited, or re-chained without the key)"}
}

// end checks that the chain reached every head.
func (v *verifier) end() error {
	for _, h := range v.heads {
		if h.Seq >= v.want {
			last := fmt.Sprintf("the log ends at record %d", v.want-1)
			if v.want == 1 {
				last = "the log is empty"
			}
			return &BrokenError{Seq: h.Seq, Problem: fmt.Sprintf("it is missing: %s, but the head %v taken earlier is record %d (the newest records were deleted)", last, h, h.Seq)}
		}
	}
	return nil
}

// Mask returns v (a configuration, as its YAML keys name it) with the
// value of every key that names a secret (jwt_secret, api_key,
// service_password, access_token, …) replaced by "***" when set, and
// every value of an env mapping (an MCP server's or an external agent's
// environment, where their credentials go under any name).
func Mask(v any) (map[string]any, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("audit: masking: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("audit: masking: want a mapping: %w", err)
	}
	mask(m)
	return m, nil
}

func mask(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if env, ok := x.(map[string]any); ok && strings.EqualFold(k, "env") {
				for name, val := range env {
					if val != nil && val != "" {
						env[name] = "***"
					}
				}
				continue
			}
			if secretKey(k) {
				if x != nil && x != "" && !isEmpty(x) {
					v[k] = "***"
				}
				continue
			}
			mask(x)
		}
	case []any:
		for _, x := range v {
			mask(x)
		}
	}
}

func isEmpty(x any) bool {
	a, ok := x.([]any)
	return ok && len(a) == 0
}

// secretKey reports a configuration key (JSON name, any case) that holds
// a secret.
func secretKey(k string) bool {
	k = strings.ToLower(k)
	if strings.HasSuffix(k, "_ttl") {
		return false // token_ttl: how long, not what
	}
	for _, s := range []string{"secret", "password", "api_key", "passphrase", "credential", "token"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}
