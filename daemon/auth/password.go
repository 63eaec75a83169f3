package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// MinPasswordLength is the fewest characters (not bytes) a new password
// may have.
const MinPasswordLength = 8

// argon2id parameters for new hashes: OWASP's minimum recommendation
// (19 MiB, 2 passes, 1 lane), which keeps a login near 20-30 ms and lets a
// burst of logins fit in memory. Existing hashes keep the parameters they
// were made with.
const (
	argonMemory  = 19456 // KiB
	argonTime    = 2
	argonThreads = 1
	argonSaltLen = 16
	argonKeyLen  = 32
)

// HashPassword hashes a new password with argon2id and a random salt into
// a PHC string: $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>. A password
// shorter than MinPasswordLength is refused with ErrWeakPassword.
func HashPassword(pw string) (string, error) {
	if n := utf8.RuneCountInString(pw); n < MinPasswordLength {
		return "", fmt.Errorf("%w: %d characters, at least %d needed", ErrWeakPassword, n, MinPasswordLength)
	}
	salt := make([]byte, argonSaltLen)
	rand.Read(salt)
	key := argon2.IDKey([]byte(pw), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)), nil
}

// CheckPassword reports whether pw matches hash, an argon2id PHC string
// or a bcrypt hash ($2a$, $2b$, $2y$, as other systems export them). A
// mismatch wraps ErrInvalidCredentials; a hash that cannot be read is a
// different error, since no password could ever match it.
func CheckPassword(hash, pw string) error {
	switch {
	case strings.HasPrefix(hash, "$argon2id$"):
		return checkArgon2id(hash, pw)
	case strings.HasPrefix(hash, "$2a$"), strings.HasPrefix(hash, "$2b$"), strings.HasPrefix(hash, "$2y$"):
		err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw))
		switch {
		case err == nil:
			return nil
		case errors.Is(err, bcrypt.ErrMismatchedHashAndPassword), errors.Is(err, bcrypt.ErrPasswordTooLong):
			return fmt.Errorf("%w: password does not match", ErrInvalidCredentials)
		default:
			return fmt.Errorf("auth: malformed bcrypt password hash: %w", err)
		}
	case hash == "":
		return errors.New("auth: no password hash")
	default:
		return errors.New("auth: malformed password hash: neither argon2id ($argon2id$) nor bcrypt ($2a$, $2b$, $2y$)")
	}
}

func checkArgon2id(hash, pw string) error {
	malformed := func(why string) error {
		return fmt.Errorf("auth: malformed argon2id password hash: %s", why)
	}
	parts := strings.Split(hash, "$")
	if len(parts) != 6 {
		return malformed("want $argon2id$v=19$m=…,t=…,p=…$salt$hash")
	}
	if parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return malformed(fmt.Sprintf("version %q, want v=%d", parts[2], argon2.Version))
	}
	var m, t, p uint64
	params := strings.Split(parts[3], ",")
	if len(params) != 3 {
		return malformed("want parameters m=…,t=…,p=…")
	}
	for i, dst := range []*uint64{&m, &t, &p} {
		name, val, ok := strings.Cut(params[i], "=")
		n, err := strconv.ParseUint(val, 10, 32)
		if !ok || name != "mtp"[i:i+1] || err != nil {
			return malformed(fmt.Sprintf("parameter %q, want %c=<number>", params[i], "mtp"[i]))
		}
		*dst = n
	}
	// Bounds keep a corrupted row from costing gigabytes or minutes.
	if p < 1 || p > 64 || t < 1 || t > 16 || m < 8*p || m > 1<<20 {
		return malformed(fmt.Sprintf("parameters m=%d,t=%d,p=%d out of range", m, t, p))
	}
	salt, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(parts[4], "="))
	if err != nil || len(salt) < 8 {
		return malformed("bad salt")
	}
	want, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(parts[5], "="))
	if err != nil || len(want) < 16 || len(want) > 64 {
		return malformed("bad hash")
	}
	got := argon2.IDKey([]byte(pw), salt, uint32(t), uint32(m), uint8(p), uint32(len(want)))
	if subtle.ConstantTimeCompare(got, want) != 1 {
		return fmt.Errorf("%w: password does not match", ErrInvalidCredentials)
	}
	return nil
}

// dummyHash is checked against when there is no hash to check (unknown
// user, a user that logs in elsewhere) so that such a login takes as long
// as a real one.
var dummyHash = sync.OnceValue(func() string {
	pw := make([]byte, 24)
	rand.Read(pw)
	h, err := HashPassword(base64.RawStdEncoding.EncodeToString(pw))
	if err != nil {
		panic(err) // 32 characters: never too short
	}
	return h
})

// spendHashTime checks pw against a hash no password matches.
func spendHashTime(pw string) {
	CheckPassword(dummyHash(), pw)
}
