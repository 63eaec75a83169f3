package secrets

import (
	"bytes"
	"context"
	"slices"
	"testing"
)

// TestOIDCTokens: a provider's tokens are encrypted under a key of their
// own, re-encrypted on rotation like secrets, and never among the
// secrets the model may name.
func TestOIDCTokens(t *testing.T) {
	ctx := context.Background()
	db, c := openDB(t)
	s := newStore(t, db, NewKeyring("old-secret-0123456789-0123456789-0123", nil))
	if r, id, err := s.OIDCTokens(ctx, "usr_a", "corp"); r != "" || id != "" || err != nil {
		t.Fatalf("no tokens yet: %q %q %v", r, id, err)
	}
	if err := s.PutOIDCTokens(ctx, "usr_a", "corp", "refresh-token-value", "id-token-value"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "usr_a", "corp", "a secret of the same name")
	if names, _ := s.Names(ctx, "usr_a"); !slices.Equal(names, []string{"corp"}) {
		t.Errorf("the secrets the model sees: %v", names)
	}
	if v, _ := s.Value(ctx, "usr_a", "corp"); v != "a secret of the same name" {
		t.Errorf("the secret corp: %q", v)
	}
	raw := dbBytes(t, db, c)
	if !bytes.Contains(raw, []byte("oidc_tokens")) {
		t.Fatal("the database file does not hold the row's kind: the test reads the wrong file")
	}
	if bytes.Contains(raw, []byte("refresh-token-value")) || bytes.Contains(raw, []byte("id-token-value")) {
		t.Error("the refresh token is in the database file in the clear")
	}
	// Rotation: readable under the previous secret, then re-encrypted.
	s.SetKeyring(NewKeyring("new-secret-0123456789-0123456789-0123", []string{"old-secret-0123456789-0123456789-0123"}))
	if r, id, err := s.OIDCTokens(ctx, "usr_a", "corp"); r != "refresh-token-value" || id != "id-token-value" || err != nil {
		t.Fatalf("after rotation: %q %q %v", r, id, err)
	}
	if st, err := s.Reencrypt(ctx); err != nil || st.Reencrypted != 1 {
		t.Errorf("Reencrypt after the lazy one: %+v %v (the secret only)", st, err)
	}
	// Another kind's key does not open them.
	var r row
	if err := db.Where("kind = ?", kindOIDC).Take(&r).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Keyring().open(purposeOIDCTokens, r.Ciphertext, r.KeyID); err != nil {
		t.Fatalf("the row under its own key: %v", err)
	}
	if _, err := s.Keyring().open(purposeSecrets, r.Ciphertext, r.KeyID); err == nil {
		t.Error("OIDC tokens decrypt under the secrets' key")
	}
	if err := s.DeleteOIDCTokens(ctx, "usr_a", "corp"); err != nil {
		t.Fatal(err)
	}
	if r, _, err := s.OIDCTokens(ctx, "usr_a", "corp"); r != "" || err != nil {
		t.Errorf("after delete: %q %v", r, err)
	}
	if v, _ := s.Value(ctx, "usr_a", "corp"); v != "a secret of the same name" {
		t.Errorf("the secret corp after deleting the tokens: %q", v)
	}
}
