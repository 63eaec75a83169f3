package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

// configs maps each database openDB opened to its configuration, for
// other to open it again.
var configs sync.Map

// openDB opens a fresh database of the backend under test, with the
// audit log migrated.
func openDB(t *testing.T) *gorm.DB {
	t.Helper()
	c := storetest.Config(t)
	db := storetest.OpenConfig(t, c)
	configs.Store(db, c)
	t.Cleanup(func() { configs.Delete(db) })
	if err := audit.Migrate(db); err != nil {
		t.Fatal(err)
	}
	return db
}

// List selects by user and kind, on either backend (PostgreSQL reads an
// unquoted user column as CURRENT_USER).
func TestListFilters(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	for _, e := range []audit.Entry{
		{Kind: audit.KindLogin, User: "usr_a"},
		{Kind: audit.KindAdmin, User: "usr_b"},
		{Kind: audit.KindAdmin, User: "usr_a"},
	} {
		if err := audit.Write(ctx, db, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		f    audit.Filter
		want []int64
	}{
		{audit.Filter{User: "usr_a"}, []int64{1, 3}},
		{audit.Filter{Kind: audit.KindAdmin}, []int64{2, 3}},
		{audit.Filter{User: "usr_b", Kind: audit.KindAdmin}, []int64{2}},
		{audit.Filter{User: "nobody"}, nil},
	} {
		rs, err := audit.List(ctx, db, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, r := range rs {
			got = append(got, r.Seq)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%+v) = records %v; want %v", tc.f, got, tc.want)
		}
	}
}

// Concurrent writers each get their own place in one chain.
func TestConcurrentAppendsKeepOneChain(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				errs <- audit.Write(ctx, db, audit.Entry{Kind: audit.KindLogin, User: "u", Data: map[string]any{"w": w, "i": i}})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n, err := audit.Verify(ctx, db)
	if err != nil || n != writers*each {
		t.Fatalf("Verify = %d, %v; want %d records, nil", n, err, writers*each)
	}
}

// The action and its record commit together: a failed action leaves no
// record.
func TestAppendIsPartOfTheAction(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	boom := errors.New("the action failed")
	err := db.Transaction(func(tx *gorm.DB) error {
		if _, err := audit.Append(tx, audit.Entry{Kind: audit.KindAdmin, User: "admin", Data: map[string]string{"action": "x"}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	rs, err := audit.List(ctx, db, audit.Filter{})
	if err != nil || len(rs) != 0 {
		t.Fatalf("List = %v, %v; want no record", rs, err)
	}
}

func TestVerifyNamesTheTamperedRecord(t *testing.T) {
	tests := []struct {
		name    string
		tamper  string // SQL
		wantSeq int64
		want    string
	}{
		{"edited data", `UPDATE audit_log SET data = '{"name":"mallory"}' WHERE seq = 3`, 3, "edited"},
		{"edited user", `UPDATE audit_log SET "user" = 'someone' WHERE seq = 4`, 4, "edited"},
		{"deleted", `DELETE FROM audit_log WHERE seq = 2`, 3, "missing"},
		{"reordered", `UPDATE audit_log SET seq = -seq WHERE seq IN (2, 3); UPDATE audit_log SET seq = CASE seq WHEN -2 THEN 3 ELSE 2 END WHERE seq < 0`, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openDB(t)
			ctx := context.Background()
			for i := range 5 {
				if err := audit.Write(ctx, db, audit.Entry{Kind: audit.KindLogin, User: "u", Source: "127.0.0.1", Data: map[string]any{"name": "alice", "i": i}}); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := audit.Verify(ctx, db); err != nil || n != 5 {
				t.Fatalf("before: Verify = %d, %v", n, err)
			}
			if err := db.Exec(tt.tamper).Error; err != nil {
				t.Fatal(err)
			}
			_, err := audit.Verify(ctx, db)
			var be *audit.BrokenError
			if !errors.As(err, &be) || !errors.Is(err, audit.ErrBroken) {
				t.Fatalf("Verify after %s = %v; want a *BrokenError", tt.name, err)
			}
			if be.Seq != tt.wantSeq || !strings.Contains(be.Problem, tt.want) {
				t.Fatalf("Verify after %s: record %d, %q; want record %d, %q", tt.name, be.Seq, be.Problem, tt.wantSeq, tt.want)
			}
			// The export of the same table fails the same way.
			rs, err := audit.List(ctx, db, audit.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if err := audit.VerifyRecords(rs, nil); !errors.As(err, &be) || be.Seq != tt.wantSeq {
				t.Fatalf("VerifyRecords = %v, want record %d", err, tt.wantSeq)
			}
		})
	}
}

func TestMask(t *testing.T) {
	type ldap struct {
		URL             string `yaml:"url"`
		ServicePassword string `yaml:"service_password"`
	}
	type authc struct {
		JWTSecret          string   `yaml:"jwt_secret"`
		PreviousJWTSecrets []string `yaml:"previous_jwt_secrets"`
		TokenTTL           string   `yaml:"token_ttl"`
		LDAP               ldap     `yaml:"ldap"`
	}
	cfg := struct {
		Listen string `yaml:"listen"`
		Auth   authc  `yaml:"auth"`
		LLM    struct {
			APIKey string `yaml:"api_key"`
		} `yaml:"llm"`
	}{Listen: "127.0.0.1:8080", Auth: authc{JWTSecret: "s3cr3t-value", PreviousJWTSecrets: []string{"old-value"}, TokenTTL: "12h", LDAP: ldap{URL: "ldap://x", ServicePassword: "pw-value"}}}
	cfg.LLM.APIKey = "key-value"
	m, err := audit.Mask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := m["auth"].(map[string]any)
	if a["jwt_secret"] != "***" || a["previous_jwt_secrets"] != "***" || a["token_ttl"] != "12h" {
		t.Fatalf("auth masked as %v", a)
	}
	if l := a["ldap"].(map[string]any); l["service_password"] != "***" || l["url"] != "ldap://x" {
		t.Fatalf("ldap masked as %v", l)
	}
	if m["llm"].(map[string]any)["api_key"] != "***" || m["listen"] != "127.0.0.1:8080" {
		t.Fatalf("masked: %v", m)
	}
}

// since= selects by time, not by the text of it: a whole second selects
// the records within it, and fractions of any length compare as numbers
// (RFC 3339 text with its trailing zeros cut sorts "…:05Z" after
// "…:05.5Z", and ".1Z" after ".123Z").
func TestListSince(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	for i := range 5 {
		if err := audit.Write(ctx, db, audit.Entry{Kind: audit.KindLogin, Data: map[string]any{"i": i}}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := audit.List(ctx, db, audit.Filter{})
	if err != nil || len(all) != 5 {
		t.Fatalf("List = %d records, %v", len(all), err)
	}
	for _, r := range all {
		at, err := time.Parse(time.RFC3339Nano, r.Time)
		if err != nil {
			t.Fatalf("record %d: time %q: %v", r.Seq, r.Time, err)
		}
		for _, since := range []time.Time{at.Truncate(time.Second), at.Truncate(100 * time.Millisecond), at} {
			rs, err := audit.List(ctx, db, audit.Filter{Since: since})
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 || rs[0].Seq > r.Seq {
				t.Errorf("since %s: record %d (at %s) left out; got %d records", since.Format(time.RFC3339Nano), r.Seq, r.Time, len(rs))
			}
		}
		rs, err := audit.List(ctx, db, audit.Filter{Since: at.Add(time.Nanosecond)})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range rs {
			if x.Seq <= r.Seq {
				t.Errorf("since just after record %d (at %s): record %d selected", r.Seq, r.Time, x.Seq)
			}
		}
	}
}

// An environment given to an MCP server or an external agent is where
// their credentials go, under any name (GITHUB_TOKEN, NPM_TOKEN, …):
// every value of an env mapping is masked, and keys naming a token.
func TestMaskEnvironments(t *testing.T) {
	type server struct {
		Name string            `yaml:"name"`
		Env  map[string]string `yaml:"env"`
	}
	cfg := struct {
		MCP struct {
			Servers []server `yaml:"servers"`
		} `yaml:"mcp"`
		Agents   []server `yaml:"external_agents"`
		Token    string   `yaml:"access_token"`
		TokenTTL string   `yaml:"token_ttl"`
	}{Token: "tok-value", TokenTTL: "12h"}
	cfg.MCP.Servers = []server{{Name: "github", Env: map[string]string{"GITHUB_TOKEN": "ghp-value", "LOG_LEVEL": "debug"}}}
	cfg.Agents = []server{{Name: "coder", Env: map[string]string{"NPM_TOKEN": "npm-value"}}, {Name: "plain"}}
	m, err := audit.Mask(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"ghp-value", "npm-value", "tok-value", "debug"} {
		if strings.Contains(string(b), v) {
			t.Errorf("masked configuration holds %q: %s", v, b)
		}
	}
	for _, want := range []string{`"GITHUB_TOKEN":"***"`, `"NPM_TOKEN":"***"`, `"access_token":"***"`, `"token_ttl":"12h"`, `"name":"github"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("masked configuration lacks %s: %s", want, b)
		}
	}
}
