package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

// schema is every table of db with its columns.
func schema(t *testing.T, db *gorm.DB) map[string][]string {
	t.Helper()
	q := `SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, p.name`
	if store.Backend(db) == store.BackendPostgres {
		q = `SELECT table_name, column_name FROM information_schema.columns
			WHERE table_schema = current_schema() ORDER BY table_name, column_name`
	}
	rows, err := db.Raw(q).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var table, col string
		if err := rows.Scan(&table, &col); err != nil {
			t.Fatal(err)
		}
		out[table] = append(out[table], col)
	}
	return out
}

// Every table, and column, a server makes is made by daemon.Migrate:
// what codumentorctl migrate and restore make before they copy rows.
func TestMigrateSchema(t *testing.T) {
	in := newInstance(t, "")
	p := in.start()
	p.stop()
	served := schema(t, in.openDB())
	db := storetest.Open(t)
	if err := daemon.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	migrated := schema(t, db)
	for _, table := range slices.Sorted(maps.Keys(served)) {
		if !slices.Equal(served[table], migrated[table]) {
			t.Errorf("table %s: the server makes columns %v, daemon.Migrate %v", table, served[table], migrated[table])
		}
	}
	if len(served) < 20 {
		t.Fatalf("the server made only %d tables: %v", len(served), slices.Sorted(maps.Keys(served)))
	}
}

// An instance served on SQLite, migrated (codumentorctl migrate) and
// served on PostgreSQL keeps its users, secrets, conversations and
// events, and goes on: a new turn, on the copy.
func TestMigrateThenServe(t *testing.T) {
	in := newInstance(t, llm(t, llmtest.Step{Text: "answered before"}, llmtest.Step{Text: "answered after"})+"store:\n  backend: sqlite\n")
	alice := in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	a.must(http.StatusOK, "PUT", "/api/v1/secrets/OLD", map[string]string{"value": "migrated-canary"}, nil)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "before")
	s.until(agentcore.EventTurnFinished, 30*time.Second)
	s.close()
	p.stop()
	before := readState(t, in.config(), conv, alice.ID)

	target := storetest.Postgres(t)
	if code, out := codumentorctl(t, "", "migrate", "--instance", in.dir, "--to", target.DSN); code != 0 || !strings.Contains(out, "chain intact") {
		t.Fatalf("migrate: %d %s", code, out)
	}
	cfgFile := filepath.Join(in.dir, "config.yaml")
	b, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	pg := strings.Replace(string(b), "store:\n  backend: sqlite\n", fmt.Sprintf("store:\n  backend: postgres\n  postgres:\n    dsn: %q\n", target.DSN), 1)
	if err := os.WriteFile(cfgFile, []byte(pg), 0o600); err != nil {
		t.Fatal(err)
	}

	p = in.start()
	a = p.login("alice", pw)
	var c struct {
		ID, Title string
	}
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv, nil, &c)
	if c.ID != conv || c.Title != "test" {
		t.Fatalf("conversation after the migration: %+v", c)
	}
	s = a.follow(conv, "")
	evs := s.until(agentcore.EventTurnFinished, 30*time.Second)
	if len(evs) != len(before.events) {
		t.Fatalf("%d events replayed after the migration, %d before", len(evs), len(before.events))
	}
	a.send(conv, "after")
	evs = s.until(agentcore.EventTurnFinished, 30*time.Second)
	var text strings.Builder
	for _, ev := range evs {
		var d struct{ Text string }
		json.Unmarshal(eventData(t, ev), &d)
		text.WriteString(d.Text)
	}
	if !strings.Contains(text.String(), "answered after") {
		t.Fatalf("the turn after the migration: %s", text.String())
	}
	s.close()
	p.stop()

	db := in.openDB()
	if store.Backend(db) != store.BackendPostgres {
		t.Fatal("the instance is not on PostgreSQL")
	}
	cfg, err := in.config().Load("")
	if err != nil {
		t.Fatal(err)
	}
	if v := secretValue(t, db, cfg, alice.ID); v != "migrated-canary" {
		t.Fatalf("secret OLD after the migration: %q", v)
	}
	convs, err := store.NewConversations(db)
	if err != nil {
		t.Fatal(err)
	}
	after, err := convs.Events(context.Background(), conv, 0, 100000)
	if err != nil || len(after) <= len(before.events) {
		t.Fatalf("events on PostgreSQL: %d, %v; %d before", len(after), err, len(before.events))
	}
	for i, e := range before.events {
		if after[i].Seq != e.Seq || after[i].Type != e.Type || string(after[i].Data) != string(e.Data) {
			t.Fatalf("event %d after the migration %+v, was %+v", i, after[i], e)
		}
	}
	if err := audit.UseKeys(db, audit.NewKeys(cfg.Auth.JWTSecret, nil)); err != nil {
		t.Fatal(err)
	}
	if n, err := audit.Verify(context.Background(), db); err != nil || n <= int64(len(before.audit)) {
		t.Fatalf("audit log on PostgreSQL: %d records, %v; %d before", n, err, len(before.audit))
	}
}
