package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
	"gorm.io/gorm"
)

// openDB opens a fresh database of the backend under test and returns
// its configuration, to open it again as another process would.
func openDB(t *testing.T) (*gorm.DB, store.Config) {
	t.Helper()
	c := storetest.Config(t)
	return storetest.OpenConfig(t, c), c
}

func newStore(t *testing.T, db *gorm.DB, kr *Keyring) *Store {
	t.Helper()
	s, err := New(db, kr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustPut(t *testing.T, s *Store, user, name, value string) Meta {
	t.Helper()
	m, err := s.Put(context.Background(), user, name, value)
	if err != nil {
		t.Fatalf("Put(%s, %s): %v", user, name, err)
	}
	return m
}

func wantValue(t *testing.T, s *Store, user, name, want string) {
	t.Helper()
	got, err := s.Value(context.Background(), user, name)
	if err != nil || got != want {
		t.Fatalf("Value(%s, %s) = %q, %v; want %q", user, name, got, err, want)
	}
}

func keyIDs(t *testing.T, s *Store) map[string]int {
	t.Helper()
	m, err := s.KeyIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestKeyring(t *testing.T) {
	a, b := NewKeyring("secret-a", nil), NewKeyring("secret-b", []string{"secret-a", "", "secret-a", "secret-b"})
	if a.Plaintext() || b.Plaintext() {
		t.Fatal("keyring with a secret reports Plaintext")
	}
	if id := a.KeyID(); len(id) != 8 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Errorf("key ID %q, want 8 hex digits", id)
	}
	if a.KeyID() != NewKeyring("secret-a", nil).KeyID() {
		t.Error("key ID of one secret differs between keyrings")
	}
	if got := b.KeyIDs(); len(got) != 2 || got[0] != b.KeyID() || got[1] != a.KeyID() {
		t.Errorf("KeyIDs = %v, want [%s %s]", got, b.KeyID(), a.KeyID())
	}
	p := NewKeyring("", []string{"secret-a"})
	if !p.Plaintext() || p.KeyID() != PlaintextKeyID {
		t.Errorf("keyring without current secret: Plaintext %v, KeyID %q", p.Plaintext(), p.KeyID())
	}
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t)
	kr := NewKeyring("jwt-secret", nil)
	s := newStore(t, db, kr)

	m1 := mustPut(t, s, "alice", "GITHUB_TOKEN", "ghp_first")
	if m1.Name != "GITHUB_TOKEN" || m1.KeyID != kr.KeyID() || m1.Created.IsZero() || !m1.Updated.Equal(m1.Created) {
		t.Fatalf("Put meta = %+v", m1)
	}
	wantValue(t, s, "alice", "GITHUB_TOKEN", "ghp_first")
	m2 := mustPut(t, s, "alice", "GITHUB_TOKEN", "ghp_second")
	if !m2.Created.Equal(m1.Created) || !m2.Updated.After(m1.Updated) {
		t.Errorf("replacing: created %v → %v, updated %v → %v; want created kept, updated later", m1.Created, m2.Created, m1.Updated, m2.Updated)
	}
	wantValue(t, s, "alice", "GITHUB_TOKEN", "ghp_second")
	mustPut(t, s, "alice", "A_FIRST", "x")

	list, err := s.List(ctx, "alice")
	if err != nil || len(list) != 2 || list[0].Name != "A_FIRST" || list[1].Name != "GITHUB_TOKEN" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	names, err := s.Names(ctx, "alice")
	if err != nil || fmt.Sprint(names) != "[A_FIRST GITHUB_TOKEN]" {
		t.Fatalf("Names = %v, %v", names, err)
	}

	if err := s.Delete(ctx, "alice", "GITHUB_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Value(ctx, "alice", "GITHUB_TOKEN"); !errors.Is(err, ErrNotFound) || !errors.Is(err, agentcore.ErrNotFound) {
		t.Errorf("Value after Delete: %v, want ErrNotFound wrapping agentcore.ErrNotFound", err)
	}
	if err := s.Delete(ctx, "alice", "GITHUB_TOKEN"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if list, _ := s.List(ctx, "nobody"); list == nil || len(list) != 0 {
		t.Errorf("List of a user without secrets = %#v, want an empty slice", list)
	}
}

// dbBytes returns the database file and its WAL after a checkpoint, which
// is everything SQLite has written.
// dbBytes is what someone who reads the database's storage sees: the
// SQLite file and its WAL, or every column of every table of the
// PostgreSQL database (bytea as its bytes, the rest as text), which
// there is no single file to read.
func dbBytes(t *testing.T, db *gorm.DB, c store.Config) []byte {
	t.Helper()
	if store.Backend(db) == store.BackendPostgres {
		return postgresBytes(t, db)
	}
	if err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)").Error; err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, p := range []string{c.Path, c.Path + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

func postgresBytes(t *testing.T, db *gorm.DB) []byte {
	t.Helper()
	var cols []struct{ TableName, ColumnName, DataType string }
	err := db.Raw("SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position").Scan(&cols).Error
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, c := range cols {
		expr := db.Statement.Quote(c.ColumnName)
		if c.DataType != "bytea" {
			expr += "::text"
		}
		var vals [][]byte
		if err := db.Raw("SELECT " + expr + " FROM " + db.Statement.Quote(c.TableName)).Scan(&vals).Error; err != nil {
			t.Fatalf("reading %s.%s: %v", c.TableName, c.ColumnName, err)
		}
		for _, v := range vals {
			all = append(all, v...)
			all = append(all, 0)
		}
	}
	return all
}

func TestFileHoldsNoPlaintext(t *testing.T) {
	ctx := context.Background()
	const value, apiKey = "very-secret-value-0f1e2d3c", "sk-api-key-9a8b7c6d"

	db, c := openDB(t)
	s := newStore(t, db, NewKeyring("jwt-secret", nil))
	mustPut(t, s, "alice", "TOKEN", value)
	if _, err := s.PutProfile(ctx, "alice", "default", ModelProfile{BaseURL: "http://llm", Model: "m", APIKey: apiKey}); err != nil {
		t.Fatal(err)
	}
	raw := dbBytes(t, db, c)
	if !bytes.Contains(raw, []byte("TOKEN")) {
		t.Fatal("the database does not even hold the secret's name: the test reads the wrong one")
	}
	for _, v := range []string{value, apiKey} {
		if bytes.Contains(raw, []byte(v)) {
			t.Errorf("the database holds %q in plaintext", v)
		}
	}

	// The same check catches the plaintext fallback, so it can see a value.
	db2, c2 := openDB(t)
	s2 := newStore(t, db2, NewKeyring("", nil))
	mustPut(t, s2, "alice", "TOKEN", value)
	if !bytes.Contains(dbBytes(t, db2, c2), []byte(value)) {
		t.Error("the plaintext fallback's value is not in the file: the check above proves nothing")
	}
}

func TestRotation(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t)
	krA := NewKeyring("secret-a", nil)
	krB := NewKeyring("secret-b", []string{"secret-a"})
	idA, idB := krA.KeyID(), krB.KeyID()

	s := newStore(t, db, krA)
	mustPut(t, s, "alice", "ONE", "value-one")
	mustPut(t, s, "alice", "TWO", "value-two")
	mustPut(t, s, "bob", "THREE", "value-three")
	if _, err := s.PutProfile(ctx, "bob", "p", ModelProfile{Model: "m", APIKey: "k"}); err != nil {
		t.Fatal(err)
	}
	if got := keyIDs(t, s); got[idA] != 4 || len(got) != 1 {
		t.Fatalf("KeyIDs after Put under A = %v, want {%s: 4}", got, idA)
	}

	// The server reloads its configuration: B is current, A previous.
	s.SetKeyring(krB)
	wantValue(t, s, "alice", "ONE", "value-one")
	if got := keyIDs(t, s); got[idB] != 1 || got[idA] != 3 {
		t.Fatalf("KeyIDs after one read under (B, [A]) = %v, want %s: 1, %s: 3", got, idB, idA)
	}
	wantValue(t, s, "alice", "ONE", "value-one") // now under B

	// A forgotten previous secret: the rows still under A cannot be read.
	s.SetKeyring(NewKeyring("secret-b", nil))
	wantValue(t, s, "alice", "ONE", "value-one")
	_, err := s.Value(ctx, "alice", "TWO")
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), idA) || !strings.Contains(err.Error(), "previous_jwt_secrets") {
		t.Fatalf("Value of a row under a missing key: %v; want ErrUnknownKey naming key %s and previous_jwt_secrets", err, idA)
	}
	st, err := s.Reencrypt(ctx)
	if !errors.Is(err, ErrUnknownKey) || st.Reencrypted != 0 || st.Rows != 4 {
		t.Fatalf("Reencrypt without A = %+v, %v; want 4 rows, 0 re-encrypted, ErrUnknownKey", st, err)
	}

	// With A back as a previous secret, Reencrypt moves every row to B.
	s.SetKeyring(krB)
	st, err = s.Reencrypt(ctx)
	if err != nil || st != (Stats{Rows: 4, Reencrypted: 3}) {
		t.Fatalf("Reencrypt = %+v, %v; want 4 rows, 3 re-encrypted", st, err)
	}
	if got := keyIDs(t, s); got[idA] != 0 || got[idB] != 4 {
		t.Fatalf("KeyIDs after Reencrypt = %v, want every row under %s", got, idB)
	}
	s.SetKeyring(NewKeyring("secret-b", nil))
	wantValue(t, s, "alice", "TWO", "value-two")
	wantValue(t, s, "bob", "THREE", "value-three")
	if p, err := s.Profile(ctx, "bob", "p"); err != nil || p.APIKey != "k" {
		t.Fatalf("Profile after Reencrypt = %+v, %v", p, err)
	}
	if st, err := s.Reencrypt(ctx); err != nil || st.Reencrypted != 0 {
		t.Errorf("second Reencrypt = %+v, %v; want nothing to do", st, err)
	}
}

func TestPlaintextFallback(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t)
	s := newStore(t, db, NewKeyring("", nil))
	if !s.Keyring().Plaintext() {
		t.Fatal("Plaintext() = false for an empty secret")
	}
	if m := mustPut(t, s, "alice", "TOKEN", "plain"); m.KeyID != PlaintextKeyID {
		t.Fatalf("Put under the fallback: key ID %q, want %q", m.KeyID, PlaintextKeyID)
	}
	var stored []byte
	if err := db.Raw("SELECT ciphertext FROM secrets WHERE name = 'TOKEN'").Row().Scan(&stored); err != nil || string(stored) != "plain" {
		t.Fatalf("stored %q, %v; want the value itself", stored, err)
	}
	wantValue(t, s, "alice", "TOKEN", "plain")
	if _, err := s.Reencrypt(ctx); !errors.Is(err, ErrPlaintext) {
		t.Errorf("Reencrypt with a plaintext keyring: %v, want ErrPlaintext", err)
	}

	// A secret is configured: the next read encrypts the row.
	kr := NewKeyring("now-a-secret", nil)
	s.SetKeyring(kr)
	wantValue(t, s, "alice", "TOKEN", "plain")
	if got := keyIDs(t, s); got[kr.KeyID()] != 1 || got[PlaintextKeyID] != 0 {
		t.Fatalf("KeyIDs after reading a plaintext row with a secret = %v, want it under %s", got, kr.KeyID())
	}
	if err := db.Raw("SELECT ciphertext FROM secrets WHERE name = 'TOKEN'").Row().Scan(&stored); err != nil || bytes.Contains(stored, []byte("plain")) {
		t.Fatalf("stored %q, %v; want a token", stored, err)
	}
}

// A lazy re-encryption that read a row before a Put must not bring the old
// value back.
func TestLazyReencryptKeepsConcurrentPut(t *testing.T) {
	ctx := context.Background()
	db, c := openDB(t)
	s := newStore(t, db, NewKeyring("secret-a", nil))
	mustPut(t, s, "alice", "TOKEN", "old")

	krB := NewKeyring("secret-b", []string{"secret-a"})
	s.SetKeyring(krB)
	r, err := s.get(ctx, "alice", kindSecret, "TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "alice", "TOKEN", "new") // between the read and the re-encryption
	if ok, err := s.rewrap(ctx, krB, r, []byte("old")); ok || err != nil {
		t.Fatalf("rewrap of a row changed meanwhile = %v, %v; want false, nil", ok, err)
	}
	wantValue(t, s, "alice", "TOKEN", "new")

	// The same race for real: one process still writes under A while
	// another reads, and so re-encrypts, under (B, [A]).
	db2 := storetest.OpenConfig(t, c)
	writer := newStore(t, db2, NewKeyring("secret-a", nil))
	const n = 100
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Value(ctx, "alice", "TOKEN"); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range n {
		if _, err := writer.Put(ctx, "alice", "TOKEN", fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	wantValue(t, s, "alice", "TOKEN", fmt.Sprint("v", n-1))
}

func TestBadNamesAndValues(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t)
	s := newStore(t, db, NewKeyring("k", nil))
	for _, name := range []string{"", "1ABC", "A-B", "A B", "A.B", "Ä", "A=B", strings.Repeat("A", 65)} {
		if _, err := s.Put(ctx, "alice", name, "v"); !errors.Is(err, ErrBadName) || !strings.Contains(err.Error(), "A-Z, a-z, 0-9 and _") {
			t.Errorf("Put(%q): %v, want ErrBadName stating the rule", name, err)
		}
		if _, err := s.Value(ctx, "alice", name); !errors.Is(err, ErrBadName) {
			t.Errorf("Value(%q): %v, want ErrBadName", name, err)
		}
		if _, err := s.PutProfile(ctx, "alice", name, ModelProfile{}); !errors.Is(err, ErrBadName) {
			t.Errorf("PutProfile(%q): %v, want ErrBadName", name, err)
		}
	}
	for _, name := range []string{"_", "a", "Z9", "_x_1", strings.Repeat("A", 64)} {
		mustPut(t, s, "alice", name, "v")
	}
	if _, err := s.Put(ctx, "alice", "EMPTY", ""); !errors.Is(err, ErrBadValue) {
		t.Errorf("Put of an empty value: %v, want ErrBadValue", err)
	}
	if _, err := s.Put(ctx, "alice", "BIG", strings.Repeat("x", MaxValueSize+1)); !errors.Is(err, ErrBadValue) {
		t.Errorf("Put of %d bytes: %v, want ErrBadValue", MaxValueSize+1, err)
	}
	big := strings.Repeat("x", MaxValueSize)
	mustPut(t, s, "alice", "BIG", big)
	wantValue(t, s, "alice", "BIG", big)
}

func TestForeignUser(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t)
	s := newStore(t, db, NewKeyring("k", nil))
	mustPut(t, s, "alice", "TOKEN", "alice's")
	if _, err := s.PutProfile(ctx, "alice", "p", ModelProfile{APIKey: "alice's key"}); err != nil {
		t.Fatal(err)
	}

	if v, err := s.Value(ctx, "bob", "TOKEN"); !errors.Is(err, ErrNotFound) || v != "" {
		t.Errorf("bob's Value of alice's secret = %q, %v; want ErrNotFound", v, err)
	}
	if p, err := s.Profile(ctx, "bob", "p"); !errors.Is(err, ErrNotFound) || !reflect.DeepEqual(p, ModelProfile{}) {
		t.Errorf("bob's Profile of alice's = %+v, %v; want ErrNotFound", p, err)
	}
	if err := s.Delete(ctx, "bob", "TOKEN"); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob's Delete of alice's secret: %v, want ErrNotFound", err)
	}
	if names, err := s.Names(ctx, "bob"); err != nil || len(names) != 0 {
		t.Errorf("bob's Names = %v, %v; want none", names, err)
	}
	if _, err := s.Value(ctx, "", "TOKEN"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Value without a user: %v, want a plain error", err)
	}
	wantValue(t, s, "alice", "TOKEN", "alice's")
}

func TestPurposesSeparate(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t)
	kr := NewKeyring("k", nil)
	s := newStore(t, db, kr)
	want := ModelProfile{BaseURL: "https://llm.example/v1", Model: "m-large", APIKey: "sk-123"}
	m, err := s.PutProfile(ctx, "alice", "work", want)
	if err != nil || m.KeyID != kr.KeyID() {
		t.Fatalf("PutProfile = %+v, %v", m, err)
	}
	if got, err := s.Profile(ctx, "alice", "work"); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Profile = %+v, %v; want %+v", got, err, want)
	}
	// A profile and a secret share the name space of the table but not
	// its rows.
	if _, err := s.Value(ctx, "alice", "work"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Value of a profile's name: %v, want ErrNotFound", err)
	}
	if list, err := s.Profiles(ctx, "alice"); err != nil || len(list) != 1 || list[0].Name != "work" {
		t.Fatalf("Profiles = %+v, %v", list, err)
	}

	// Copy the profile's ciphertext into a secret row: it must not decrypt.
	err = db.Exec(`INSERT INTO secrets (user_id, kind, name, ciphertext, key_id, created, updated)
		SELECT user_id, 'secret', 'STOLEN', ciphertext, key_id, created, updated FROM secrets WHERE kind = 'model_profile'`).Error
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Value(ctx, "alice", "STOLEN")
	if err == nil || errors.Is(err, ErrUnknownKey) || strings.Contains(v, "sk-123") {
		t.Fatalf("a profile's ciphertext read as a secret = %q, %v; want a decryption error", v, err)
	}

	if err := s.DeleteProfile(ctx, "alice", "work"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Profile(ctx, "alice", "work"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Profile after DeleteProfile: %v, want ErrNotFound", err)
	}
}
