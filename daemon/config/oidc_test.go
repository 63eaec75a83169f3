package config

import (
	"strings"
	"testing"
)

func TestOIDCKeys(t *testing.T) {
	t.Setenv("CODUMENTOR_TEST_OIDC", "s3cret-value")
	const good = "auth:\n  oidc:\n    - name: corp\n      issuer: https://sso.example.org/\n      client_id: codumentor\n      client_secret_env: CODUMENTOR_TEST_OIDC\n      groups_claim: groups\n      allowed_groups: [dev]\n      create_users: true\n"
	c, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Auth.OIDC; len(p) != 1 || p[0].Name != "corp" || p[0].ClientSecretEnv != "CODUMENTOR_TEST_OIDC" || !p[0].CreateUsers || p[0].AllowedGroups[0] != "dev" {
		t.Errorf("parsed %+v", p)
	}
	entry := func(lines ...string) string {
		return "auth:\n  oidc:\n    - " + strings.Join(lines, "\n      ") + "\n"
	}
	base := []string{"name: corp", "issuer: https://sso.example.org/", "client_id: codumentor"}
	for _, bad := range []struct{ yaml, want string }{
		{entry(append(base, "client_secret_name: x", "client_secret_env: CODUMENTOR_TEST_OIDC")...), "set one of client_secret_env"},
		{entry(base...), "set one of client_secret_env"},
		{entry(append(base, "client_secret_env: CODUMENTOR_TEST_OIDC_UNSET")...), "the environment variable CODUMENTOR_TEST_OIDC_UNSET is not set"},
		{entry("name: Corp", "issuer: https://sso.example.org/", "client_id: c", "client_secret_name: x"), `auth.oidc[0].name "Corp"`},
		{entry("name: corp", "issuer: http://sso.example.org/", "client_id: c", "client_secret_name: x"), "auth.oidc[0].issuer: use https (http only on loopback)"},
		{entry("name: corp", "issuer: https://u:p@sso.example.org/", "client_id: c", "client_secret_name: x"), "without user, query or fragment"},
		{entry("name: corp", "issuer: https://sso.example.org/", "client_secret_name: x"), "auth.oidc[0].client_id is empty"},
		{entry(append(base, "client_secret_name: x", "allowed_groups: [dev]")...), "allowed_groups needs groups_claim"},
		{entry(append(base, "client_secret_name: x", "redirect_url: ftp://x/")...), "auth.oidc[0].redirect_url"},
		{entry(append(base, "client_secret_name: x")...) + "    - name: corp\n      issuer: https://b.example.org/\n      client_id: c\n      client_secret_name: y\n", `auth.oidc[1].name "corp" is used twice`},
		{entry(append(base, "client_secret: inline")...), "client_secret"},
	} {
		_, err := Parse([]byte(bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.yaml, err, bad.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret-value") {
			t.Errorf("an error shows the client secret: %v", err)
		}
	}
	// http on loopback: a provider on the same machine.
	if _, err := Parse([]byte(entry("name: corp", "issuer: http://127.0.0.1:9998/", "client_id: c", "client_secret_name: x"))); err != nil {
		t.Errorf("a loopback issuer: %v", err)
	}
}
