package audit

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"gorm.io/gorm"
)

// Key purposes of auth.jwt_secret (HKDF-SHA256 info), apart from those
// of package secrets, so that the MAC key is never an encryption key.
const (
	purposeMAC = "codumentor/v1/audit-mac"
	// purposeKeyID is the key ID's, the same as package secrets' so that
	// a record names its secret by the ID codumentorctl check shows.
	purposeKeyID = "codumentor/v1/key-id"
)

// ErrUnknownKey is wrapped by Verify's error for a record MACed under a
// key that is neither auth.jwt_secret's nor one of
// auth.previous_jwt_secrets' (or with no keys at all): it cannot be
// checked.
var ErrUnknownKey = errors.New("audit: record MACed under an unknown key")

// ErrNoKey refuses to append to a keyed chain without a key: the
// writer has no auth.jwt_secret (codumentorctl without
// CODUMENTOR_JWT_SECRET, where the server has it from there).
var ErrNoKey = errors.New("audit: the audit log is MACed with a key derived from auth.jwt_secret, and this program has no auth.jwt_secret (set it in config.yaml or $CODUMENTOR_JWT_SECRET as the server has it)")

// Keys are the MAC keys of the audit chain, derived from auth.jwt_secret
// (which MACs new records) and auth.previous_jwt_secrets (which still
// verify the records MACed under them). Immutable; safe for concurrent
// use.
type Keys struct {
	current *macKey // nil: new records are chained unkeyed (SHA-256)
	all     []*macKey
}

type macKey struct {
	id  string
	key []byte
}

// NewKeys derives the keys of a current secret and the previous ones.
// Empty and repeated secrets are ignored; an empty current secret
// chains new records unkeyed.
func NewKeys(current string, previous []string) *Keys {
	k := &Keys{}
	seen := map[string]bool{}
	for i, s := range append([]string{current}, previous...) {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		id := sha256.Sum256(derive(s, purposeKeyID))
		mk := &macKey{id: hex.EncodeToString(id[:4]), key: derive(s, purposeMAC)}
		if i == 0 {
			k.current = mk
		}
		k.all = append(k.all, mk)
	}
	return k
}

func derive(secret, purpose string) []byte {
	b, err := hkdf.Key(sha256.New, []byte(secret), nil, purpose, 32)
	if err != nil {
		panic("audit: hkdf: " + err.Error()) // only for lengths beyond 255 hashes
	}
	return b
}

// pluginName is the gorm plugin that carries a database's Keys.
const pluginName = "codumentor:audit-keys"

// keysPlugin hangs Keys on a *gorm.DB, so that every Append on it and
// on its transactions MACs, whichever package calls it.
type keysPlugin struct{ keys atomic.Pointer[Keys] }

func (*keysPlugin) Name() string              { return pluginName }
func (*keysPlugin) Initialize(*gorm.DB) error { return nil }

// UseKeys makes Append on db (and its sessions and transactions) MAC
// new records with k's current key, and Verify on db check with all of
// k's. Call it once right after opening db, before it is shared; later
// calls (a rotation) swap the keys at once.
func UseKeys(db *gorm.DB, k *Keys) error {
	if p, ok := db.Config.Plugins[pluginName].(*keysPlugin); ok {
		p.keys.Store(k)
		return nil
	}
	p := &keysPlugin{}
	p.keys.Store(k)
	if err := db.Use(p); err != nil {
		return fmt.Errorf("audit: setting the MAC keys: %w", err)
	}
	return nil
}

// keysOf is the Keys UseKeys gave db; nil if none.
func keysOf(db *gorm.DB) *Keys {
	if p, ok := db.Config.Plugins[pluginName].(*keysPlugin); ok {
		return p.keys.Load()
	}
	return nil
}

// mac is the record's MAC under key: HMAC-SHA256 of the fields hash
// covers and the key ID.
func (r *Record) mac(key []byte) string {
	h := hmac.New(sha256.New, key)
	r.writeFields(h, r.KeyID)
	return hex.EncodeToString(h.Sum(nil))
}

// Head is a record's sequence number and MAC (for records chained
// unkeyed, their hash): the newest record's pins the log up to it. Keep
// one where the server cannot write (codumentorctl audit head; the
// server logs its head), and Verify fails when the log no longer
// reaches it.
type Head struct {
	Seq int64
	MAC string
}

// String is the head as ParseHead reads it: SEQ:MAC.
func (h Head) String() string { return fmt.Sprintf("%d:%s", h.Seq, h.MAC) }

// ParseHead reads SEQ:MAC.
func ParseHead(s string) (Head, error) {
	seq, mac, ok := strings.Cut(strings.TrimSpace(s), ":")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || err != nil || n < 1 || len(mac) != 64 {
		return Head{}, fmt.Errorf("audit: %q is not a head SEQ:MAC (a record number, a colon and 64 hex digits, as codumentorctl audit head prints)", s)
	}
	if _, err := hex.DecodeString(mac); err != nil {
		return Head{}, fmt.Errorf("audit: %q is not a head SEQ:MAC: the MAC is not hex", s)
	}
	return Head{Seq: n, MAC: strings.ToLower(mac)}, nil
}

// LastHead is the newest record's head; the zero Head for an empty log.
func LastHead(ctx context.Context, db *gorm.DB) (Head, error) {
	var r Record
	err := db.WithContext(ctx).Select("seq", "hash").Order("seq DESC").Limit(1).Take(&r).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return Head{}, nil
	case err != nil:
		return Head{}, fmt.Errorf("audit: reading the newest record: %w", err)
	}
	return Head{Seq: r.Seq, MAC: r.Hash}, nil
}
