package auth

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// ErrSecretMismatch is CheckSharedSecret's error for a server whose
// auth.jwt_secret is not the one the other servers of its database use:
// its tokens, sessions and CSRF tokens would not verify on them, nor
// theirs on it, and its secrets and audit records would be keyed apart.
var ErrSecretMismatch = errors.New("auth.jwt_secret is not the one the other servers on this database use (neither it nor one of auth.previous_jwt_secrets matches): every server of a deployment needs the same auth.jwt_secret and auth.previous_jwt_secrets; copy them from a running server's configuration")

// ErrSharedNeedsSecret refuses a server on a shared database without
// auth.jwt_secret: its tokens would die with it and verify nowhere else.
var ErrSharedNeedsSecret = errors.New("store.backend postgres needs auth.jwt_secret (the same on every server): without it each server's tokens verify on that server only")

// sharedSecret holds one value: what the deployment's current
// auth.jwt_secret proves, never the secret.
type sharedSecret struct {
	ID      int    `gorm:"primaryKey;autoIncrement:false"`
	Digest  string `gorm:"not null"`
	Updated time.Time
}

func (sharedSecret) TableName() string { return "shared_secret" }

// purposeShared is the HKDF info of the check's key.
const purposeShared = "codumentor/v1/shared-secret-check"

// secretCheck is a value that shows the secret without revealing it.
func secretCheck(secret string) string {
	k, err := hkdf.Key(sha256.New, []byte(secret), nil, purposeShared, 32)
	if err != nil {
		panic("auth: hkdf: " + err.Error())
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte("codumentor deployment"))
	return hex.EncodeToString(m.Sum(nil))
}

// CheckSharedSecret checks, at a server's start, that current is the
// auth.jwt_secret of every server on db: the first server records it;
// one whose current secret is among the others' previous ones records
// the new secret (a rotation, server by server); any other refuses with
// ErrSecretMismatch, unless it is alone (no other server runs on db),
// when its secret is the deployment's from now on, as a single server's
// secret is whatever its configuration says.
func CheckSharedSecret(ctx context.Context, db *gorm.DB, current string, previous []string, alone bool) error {
	if current == "" {
		return ErrSharedNeedsSecret
	}
	if err := MigrateSharedSecret(db); err != nil {
		return err
	}
	want := secretCheck(current)
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var row sharedSecret
		err := tx.Where("id = 1").Take(&row).Error
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
			return tx.Create(&sharedSecret{ID: 1, Digest: want, Updated: time.Now().UTC()}).Error
		case err != nil:
			return fmt.Errorf("auth: reading the shared secret's check: %w", err)
		case hmac.Equal([]byte(row.Digest), []byte(want)):
			return nil
		}
		rotated := alone
		for _, p := range previous {
			rotated = rotated || hmac.Equal([]byte(row.Digest), []byte(secretCheck(p)))
		}
		if !rotated {
			return ErrSecretMismatch
		}
		return tx.Model(&sharedSecret{}).Where("id = 1").Updates(map[string]any{"digest": want, "updated": time.Now().UTC()}).Error
	})
}

// MigrateSharedSecret creates the table of CheckSharedSecret's record
// in db.
func MigrateSharedSecret(db *gorm.DB) error {
	if err := db.AutoMigrate(&sharedSecret{}); err != nil {
		return fmt.Errorf("auth: migrating the shared secret's check: %w", err)
	}
	return nil
}
