package ctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/secrets"
)

// secretsStatus is the output of secrets status --json.
type secretsStatus struct {
	KeyID          string   `json:"key_id"`
	Source         string   `json:"source"`
	Previous       int      `json:"previous"`
	PreviousKeyIDs []string `json:"previous_key_ids"`
	Rows           []struct {
		KeyID string `json:"key_id"`
		Rows  int    `json:"rows"`
		Key   string `json:"key"`
	} `json:"rows"`
}

func status(t *testing.T, dir string) secretsStatus {
	t.Helper()
	r := ctl(t, "secrets", "status", "--instance", dir, "--json")
	var s secretsStatus
	if r.code != 0 {
		t.Fatalf("secrets status: %v", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("secrets status --json: %v\n%s", err, r.stdout)
	}
	return s
}

func load(t *testing.T, dir string) config.Config {
	t.Helper()
	cfg, err := config.Instance{Dir: dir}.Load("")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func keyID(secret string) string { return secrets.NewKeyring(secret, nil).KeyID() }

func TestSecretsRotateKeepsTheFile(t *testing.T) {
	dir := initInstance(t)
	file := config.Instance{Dir: dir}.ConfigFile()
	if err := os.WriteFile(file, []byte("# the operator's note\nlisten: 127.0.0.1:9999\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	r := ctl(t, "secrets", "rotate", "--instance", dir)
	first := load(t, dir).Auth
	if r.code != 0 || first.JWTSecret == "" || len(first.PreviousJWTSecrets) != 0 {
		t.Fatalf("first rotate: %v\nauth: %+v", r, first)
	}
	for _, want := range []string{"key ID " + keyID(first.JWTSecret), "auth.previous_jwt_secrets: 0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("first rotate does not say %q:\n%s", want, r.stdout)
		}
	}

	r = ctl(t, "secrets", "rotate", "--instance", dir)
	second := load(t, dir)
	if r.code != 0 || second.Auth.JWTSecret == first.JWTSecret || len(second.Auth.PreviousJWTSecrets) != 1 || second.Auth.PreviousJWTSecrets[0] != first.JWTSecret {
		t.Fatalf("second rotate: %v\nauth: %+v", r, second.Auth)
	}
	for _, want := range []string{"key ID " + keyID(second.Auth.JWTSecret) + ", was " + keyID(first.JWTSecret), "auth.previous_jwt_secrets: 1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("second rotate does not say %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout+r.stderr, second.Auth.JWTSecret) || strings.Contains(r.stdout+r.stderr, first.JWTSecret) {
		t.Errorf("rotate printed a secret:\n%v", r)
	}

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "# the operator's note") || second.Listen != "127.0.0.1:9999" {
		t.Errorf("rotate lost the rest of the file:\n%s", b)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("config.yaml mode: %v %v", st.Mode(), err)
	}

	s := status(t, dir)
	if s.KeyID != keyID(second.Auth.JWTSecret) || s.Source != "config.yaml" || s.Previous != 1 ||
		len(s.PreviousKeyIDs) != 1 || s.PreviousKeyIDs[0] != keyID(first.JWTSecret) || len(s.Rows) != 0 {
		t.Errorf("status: %+v", s)
	}
}

func TestSecretsRotateCreatesTheInstance(t *testing.T) {
	dir := newInstance(t)
	r := ctl(t, "secrets", "rotate", "--instance", dir)
	if r.code != 0 || load(t, dir).Auth.JWTSecret == "" {
		t.Fatalf("rotate on a new instance: %v", r)
	}
	if err := (config.Instance{Dir: dir}).CheckModes(); err != nil {
		t.Error(err)
	}
}

func TestSecretsRotateRefusesEnvSecret(t *testing.T) {
	dir := newInstance(t)
	r := run{args: []string{"secrets", "rotate", "--instance", dir}, env: []string{config.EnvJWTSecret + "=" + strings.Repeat("s", 40)}}.do(t)
	if r.code != 1 || !strings.Contains(r.stderr, config.EnvJWTSecret+" is set") {
		t.Errorf("want exit 1 naming %s, got %v", config.EnvJWTSecret, r)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the refused rotate created %s (stat: %v)", dir, err)
	}
}

// putRows stores each value of values (user -> secret value) under kr,
// the way the server does.
func putRows(t *testing.T, dir string, kr *secrets.Keyring, values map[string]string) {
	t.Helper()
	ctx := context.Background()
	st, err := secrets.New(openDB(t, dir), kr)
	if err != nil {
		t.Fatal(err)
	}
	for user, v := range values {
		if _, err := st.Put(ctx, user, "TOKEN", v); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSecretsRotateReencrypt(t *testing.T) {
	dir := initInstance(t)
	if r := ctl(t, "secrets", "rotate", "--instance", dir); r.code != 0 {
		t.Fatalf("rotate: %v", r)
	}
	old := load(t, dir).Auth.JWTSecret
	values := map[string]string{"usr_a": "value a", "usr_b": "value b", "usr_p": "stored before any secret"}
	putRows(t, dir, secrets.NewKeyring("", nil), map[string]string{"usr_p": values["usr_p"]})
	putRows(t, dir, secrets.NewKeyring(old, nil), map[string]string{"usr_a": values["usr_a"], "usr_b": values["usr_b"]})

	s := status(t, dir)
	if fmt.Sprint(s.Rows) != fmt.Sprintf("[{%s 2 current} {plaintext 1 plaintext}]", keyID(old)) {
		t.Errorf("status before: %+v", s.Rows)
	}

	r := ctl(t, "secrets", "rotate", "--instance", dir, "--reencrypt")
	cfg := load(t, dir)
	newID := keyID(cfg.Auth.JWTSecret)
	if r.code != 0 || !strings.Contains(r.stdout, "re-encrypted 3 of 3 rows under key ID "+newID) || !strings.Contains(r.stdout, "no rows remain under old keys") {
		t.Fatalf("rotate --reencrypt: %v", r)
	}

	ctx := context.Background()
	// The new secret alone reads every row: none needs an old one.
	st, err := secrets.New(openDB(t, dir), secrets.NewKeyring(cfg.Auth.JWTSecret, nil))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.KeyIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || ids[newID] != 3 {
		t.Errorf("rows per key after --reencrypt: %v, want all 3 under %s", ids, newID)
	}
	for user, want := range values {
		if got, err := st.Value(ctx, user, "TOKEN"); err != nil || got != want {
			t.Errorf("%s's TOKEN: %q, %v; want %q", user, got, err, want)
		}
	}
	if s := status(t, dir); fmt.Sprint(s.Rows) != fmt.Sprintf("[{%s 3 current}]", newID) {
		t.Errorf("status after: %+v", s.Rows)
	}
}

func TestSecretsUnknownKey(t *testing.T) {
	dir := initInstance(t)
	if r := ctl(t, "secrets", "rotate", "--instance", dir); r.code != 0 {
		t.Fatalf("rotate: %v", r)
	}
	lost := strings.Repeat("l", 40)
	putRows(t, dir, secrets.NewKeyring(lost, nil), map[string]string{"usr_a": "value a"})

	s := status(t, dir)
	if fmt.Sprint(s.Rows) != fmt.Sprintf("[{%s 1 unknown}]", keyID(lost)) {
		t.Errorf("status: %+v", s.Rows)
	}
	r := ctl(t, "secrets", "status", "--instance", dir)
	if !strings.Contains(r.stdout, "UNREADABLE") {
		t.Errorf("status does not flag the row under an unknown key:\n%s", r.stdout)
	}

	r = ctl(t, "secrets", "rotate", "--instance", dir, "--reencrypt")
	if r.code != 1 || !strings.Contains(r.stderr, "re-encryption incomplete") || !strings.Contains(r.stderr, keyID(lost)) {
		t.Errorf("want exit 1 naming the unknown key, got %v", r)
	}
}
