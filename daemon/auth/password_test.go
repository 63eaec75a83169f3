package auth_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"

	"github.com/codumentor/codumentor/daemon/auth"
)

func TestHashPassword(t *testing.T) {
	h, err := auth.HashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not an argon2id PHC string with the expected parameters", h)
	}
	if err := auth.CheckPassword(h, "correct horse"); err != nil {
		t.Fatalf("CheckPassword(right password): %v", err)
	}
	if err := auth.CheckPassword(h, "correct horsE"); !errors.Is(err, auth.ErrInvalidCredentials) {
		t.Fatalf("CheckPassword(wrong password) = %v, want ErrInvalidCredentials", err)
	}
	h2, _ := auth.HashPassword("correct horse")
	if h2 == h {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
}

func TestHashPasswordTooShort(t *testing.T) {
	for _, pw := range []string{"", "1234567", "äöüßäöü"} { // the last: 7 characters, 14 bytes
		if _, err := auth.HashPassword(pw); !errors.Is(err, auth.ErrWeakPassword) {
			t.Errorf("HashPassword(%q) = %v, want ErrWeakPassword", pw, err)
		}
	}
	if _, err := auth.HashPassword("äöüßäöüx"); err != nil {
		t.Errorf("HashPassword(8 characters): %v", err)
	}
}

// Hashes made elsewhere: other argon2id parameters, and bcrypt in its
// three prefixes.
func TestCheckPasswordForeignHashes(t *testing.T) {
	salt := []byte("0123456789abcdef")
	key := argon2.IDKey([]byte("hunter22"), salt, 3, 65536, 2, 32)
	argonOther := fmt.Sprintf("$argon2id$v=19$m=65536,t=3,p=2$%s$%s",
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
	b, err := bcrypt.GenerateFromPassword([]byte("hunter22"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	bcrypt2a := string(b)
	for _, h := range []string{
		argonOther,
		bcrypt2a,
		strings.Replace(bcrypt2a, "$2a$", "$2b$", 1),
		strings.Replace(bcrypt2a, "$2a$", "$2y$", 1),
	} {
		if err := auth.CheckPassword(h, "hunter22"); err != nil {
			t.Errorf("CheckPassword(%.12s…, right): %v", h, err)
		}
		if err := auth.CheckPassword(h, "hunter23"); !errors.Is(err, auth.ErrInvalidCredentials) {
			t.Errorf("CheckPassword(%.12s…, wrong) = %v, want ErrInvalidCredentials", h, err)
		}
	}
}

func TestCheckPasswordMalformed(t *testing.T) {
	good, _ := auth.HashPassword("hunter22")
	parts := strings.Split(good, "$")
	for name, h := range map[string]string{
		"empty":            "",
		"plaintext":        "hunter22",
		"md5crypt":         "$1$salt$hash",
		"argon2i":          strings.Replace(good, "$argon2id$", "$argon2i$", 1),
		"missing field":    strings.Join(parts[:5], "$"),
		"version 16":       strings.Replace(good, "v=19", "v=16", 1),
		"params reordered": strings.Replace(good, "m=19456,t=2,p=1", "t=2,m=19456,p=1", 1),
		"huge memory":      strings.Replace(good, "m=19456", "m=99999999", 1),
		"zero time":        strings.Replace(good, "t=2", "t=0", 1),
		"bad salt":         strings.Replace(good, parts[4], "!!!", 1),
		"short hash":       strings.Replace(good, parts[5], "AAAA", 1),
		"bcrypt truncated": "$2a$10$abc",
	} {
		err := auth.CheckPassword(h, "hunter22")
		if err == nil || errors.Is(err, auth.ErrInvalidCredentials) {
			t.Errorf("%s: CheckPassword = %v, want an error other than ErrInvalidCredentials", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "hash") {
			t.Errorf("%s: error %q does not say the hash is the problem", name, err)
		}
	}
}
