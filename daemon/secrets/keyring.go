package secrets

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/fernet/fernet-go"
)

// PlaintextKeyID is the key ID of rows stored without encryption, by a
// Keyring built without a current secret.
const PlaintextKeyID = "plaintext"

// purpose separates the keys derived from one secret, so that a ciphertext
// made for one kind of row never decrypts as another kind.
type purpose string

const (
	purposeSecrets       purpose = "codumentor/v1/user-secrets"
	purposeModelProfiles purpose = "codumentor/v1/model-profiles"
	purposeOIDCTokens    purpose = "codumentor/v1/oidc-tokens"
	// purposeKeyID derives the public key ID. It is a separate HKDF output,
	// so publishing it says nothing about the encryption keys.
	purposeKeyID purpose = "codumentor/v1/key-id"
)

// Keyring holds the keys derived from the server's auth.jwt_secret (the
// current one, which encrypts) and auth.previous_jwt_secrets (which only
// decrypt, until every row has been re-encrypted). A Keyring is immutable
// and safe for concurrent use; to rotate, build a new one and hand it to
// Store.SetKeyring.
//
// Each secret gives one Fernet key per purpose (HKDF-SHA256 with the
// purpose as info) and one short key ID, stored next to every row so an
// operator can see which rows still depend on an old secret. The key ID is
// the same for every purpose, so it names the secret, not the kind of row.
type Keyring struct {
	current *key // nil: plaintext fallback
	keys    []*key
}

type key struct {
	id       string
	secrets  fernet.Key
	profiles fernet.Key
	oidc     fernet.Key
}

// NewKeyring builds the keyring of a current secret and the previous ones.
// Empty and repeated secrets are ignored. An empty current secret gives the
// plaintext fallback (see Plaintext), which can still read rows encrypted
// under the previous secrets.
func NewKeyring(current string, previous []string) *Keyring {
	kr := &Keyring{}
	seen := make(map[string]bool)
	for i, s := range append([]string{current}, previous...) {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		k := deriveKey(s)
		if i == 0 {
			kr.current = k
		}
		kr.keys = append(kr.keys, k)
	}
	return kr
}

func deriveKey(secret string) *key {
	k := &key{}
	copy(k.secrets[:], derive(secret, purposeSecrets, 32))
	copy(k.profiles[:], derive(secret, purposeModelProfiles, 32))
	copy(k.oidc[:], derive(secret, purposeOIDCTokens, 32))
	sum := sha256.Sum256(derive(secret, purposeKeyID, 32))
	k.id = hex.EncodeToString(sum[:4])
	return k
}

func derive(secret string, p purpose, n int) []byte {
	b, err := hkdf.Key(sha256.New, []byte(secret), nil, string(p), n)
	if err != nil {
		// Only a length beyond 255 hash sizes fails.
		panic("secrets: hkdf: " + err.Error())
	}
	return b
}

// Plaintext reports whether the keyring has no current secret, so that new
// values are stored unencrypted (key ID "plaintext"). The server must
// say so loudly: anyone who can read the database file reads the secrets.
func (kr *Keyring) Plaintext() bool { return kr.current == nil }

// KeyID returns the ID of the current key, or PlaintextKeyID.
func (kr *Keyring) KeyID() string {
	if kr.current == nil {
		return PlaintextKeyID
	}
	return kr.current.id
}

// KeyIDs returns the IDs of every key in the ring, the current one first.
func (kr *Keyring) KeyIDs() []string {
	ids := make([]string, len(kr.keys))
	for i, k := range kr.keys {
		ids[i] = k.id
	}
	return ids
}

func (k *key) fernet(p purpose) *fernet.Key {
	switch p {
	case purposeModelProfiles:
		return &k.profiles
	case purposeOIDCTokens:
		return &k.oidc
	}
	return &k.secrets
}

// seal encrypts plain under the current key, or returns it as it is with
// PlaintextKeyID when there is none.
func (kr *Keyring) seal(p purpose, plain []byte) (data []byte, keyID string, err error) {
	if kr.current == nil {
		return plain, PlaintextKeyID, nil
	}
	tok, err := fernet.EncryptAndSign(plain, kr.current.fernet(p))
	if err != nil {
		return nil, "", fmt.Errorf("secrets: encrypt: %w", err)
	}
	return tok, kr.current.id, nil
}

// errBadToken is open's error for a row its key does not decrypt; the
// Store adds which row it was.
var errBadToken = errors.New("does not decrypt under its key (the row is damaged, or it was written for another kind of row)")

// open decrypts data stored under keyID.
func (kr *Keyring) open(p purpose, data []byte, keyID string) ([]byte, error) {
	if keyID == PlaintextKeyID {
		return data, nil
	}
	var keys []*fernet.Key
	for _, k := range kr.keys {
		// Two secrets can share a 32-bit ID; try every key that has it.
		if k.id == keyID {
			keys = append(keys, k.fernet(p))
		}
	}
	if len(keys) == 0 {
		return nil, ErrUnknownKey
	}
	plain := fernet.VerifyAndDecrypt(data, 0, keys)
	if plain == nil {
		return nil, errBadToken
	}
	return plain, nil
}
