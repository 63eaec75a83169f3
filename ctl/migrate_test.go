package ctl_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

const migrateSecret = "migrate-secret-0123456789-abcdefghijklmnop"

// migrateInstance is an SQLite instance with a jwt_secret, a user, a
// repository (access entries, triggers), a secret and a conversation
// with messages and events; it returns the instance and the
// conversation.
func migrateInstance(t *testing.T) (dir string, conv store.Conversation) {
	t.Helper()
	dir = initInstance(t)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("auth:\n  jwt_secret: "+migrateSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := ctl(t, "users", "add", "--instance", dir, "--password", "alice password", "--admin", "alice"); r.code != 0 {
		t.Fatal(r)
	}
	if r := ctl(t, "repos", "add", "--instance", dir, "demo", "https://example.com/demo.git"); r.code != 0 {
		t.Fatal(r)
	}
	ctx := context.Background()
	db := openDB(t, dir)
	if err := audit.UseKeys(db, audit.NewKeys(migrateSecret, nil)); err != nil {
		t.Fatal(err)
	}
	alice := userID(t, db, "alice")
	sec, err := secrets.New(db, secrets.NewKeyring(migrateSecret, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sec.Put(ctx, alice, "TOKEN", "migrated-canary"); err != nil {
		t.Fatal(err)
	}
	convs, err := store.NewConversations(db)
	if err != nil {
		t.Fatal(err)
	}
	if conv, err = convs.Create(ctx, alice, "before the migration"); err != nil {
		t.Fatal(err)
	}
	if err := convs.AppendMessages(ctx, conv.ID, agentcore.Message{Role: agentcore.RoleUser, Content: "hello"}, agentcore.Message{Role: agentcore.RoleAssistant, Content: "hi"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := convs.AppendEvent(ctx, agentcore.Event{Conversation: conv.ID, Type: "test", Data: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := convs.SaveApproval(ctx, agentcore.Approval{ID: "apr_1", User: alice, Conversation: conv.ID, Tool: "shell", Command: "true", Status: agentcore.ApprovalPending}); err != nil {
		t.Fatal(err)
	}
	store.Close(db)
	return dir, conv
}

func userID(t *testing.T, db *gorm.DB, name string) string {
	t.Helper()
	var id string
	if err := db.Raw("SELECT id FROM users WHERE name = ?", name).Scan(&id).Error; err != nil || id == "" {
		t.Fatalf("user %s: %q, %v", name, id, err)
	}
	return id
}

// counts are the row counts of every table db has.
func counts(t *testing.T, db *gorm.DB) map[string]int64 {
	t.Helper()
	var tables []string
	q := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`
	if store.Backend(db) == store.BackendPostgres {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`
	}
	if err := db.Raw(q).Scan(&tables).Error; err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, tb := range tables {
		var n int64
		if err := db.Raw(`SELECT COUNT(*) FROM "` + tb + `"`).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		out[tb] = n
	}
	return out
}

func TestMigrate(t *testing.T) {
	dir, conv := migrateInstance(t)
	target := storetest.Postgres(t)
	src := openDB(t, dir)
	before := counts(t, src)
	if err := audit.UseKeys(src, audit.NewKeys(migrateSecret, nil)); err != nil {
		t.Fatal(err)
	}
	records, err := audit.Verify(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	store.Close(src)

	r := ctl(t, "migrate", "--instance", dir, "--to", target.DSN)
	if r.code != 0 {
		t.Fatalf("migrate: %v", r)
	}
	t.Logf("migrate:\n%s", r.stdout)
	for _, want := range []string{
		fmt.Sprintf("audit log: %d records, chain intact", records),
		fmt.Sprintf("recorded: audit record %d (admin, action migrate)", records+1),
		"store:\n  backend: postgres\n  postgres:\n    dsn: " + fmt.Sprintf("%q", target.DSN),
		"config.yaml is unchanged",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("migrate's output lacks %q:\n%s", want, r.stdout)
		}
	}

	db := storetest.OpenConfig(t, target)
	if err := audit.UseKeys(db, audit.NewKeys(migrateSecret, nil)); err != nil {
		t.Fatal(err)
	}
	after := counts(t, db)
	for tb, n := range before {
		want := n
		if tb == "audit_log" {
			want++ // the migration's own record
		}
		if after[tb] != want {
			t.Errorf("table %s: %d rows after the migration, %d before", tb, after[tb], n)
		}
	}
	if before["users"] != 1 || before["repositories"] != 1 || before["repository_access"] == 0 || before["events"] != 3 || before["secrets"] != 1 || before["approvals"] != 1 {
		t.Fatalf("the instance lacks the rows the test means to copy: %v", before)
	}
	if n, err := audit.Verify(t.Context(), db); err != nil || n != records+1 {
		t.Fatalf("the copy's audit log: %d records, %v; want %d", n, err, records+1)
	}
	rs, err := audit.List(t.Context(), db, audit.Filter{Kind: audit.KindAdmin})
	if err != nil || !strings.Contains(string(rs[len(rs)-1].Data), `"action":"migrate"`) {
		t.Fatalf("the last admin record: %v, %v", rs, err)
	}

	// What the server reads: the user's password, the secret under
	// the instance's key, the conversation, its messages and events.
	users, err := auth.NewUsers(db)
	if err != nil {
		t.Fatal(err)
	}
	u, err := users.ByName(t.Context(), "alice")
	if err != nil || u.Role != auth.RoleAdmin || auth.CheckPassword(u.PasswordHash, "alice password") != nil {
		t.Fatalf("alice after the migration: %+v, %v", u, err)
	}
	sec, err := secrets.New(db, secrets.NewKeyring(migrateSecret, nil))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := sec.Value(t.Context(), u.ID, "TOKEN"); err != nil || v != "migrated-canary" {
		t.Fatalf("secret TOKEN: %q, %v", v, err)
	}
	convs, err := store.NewConversations(db)
	if err != nil {
		t.Fatal(err)
	}
	c, err := convs.Get(t.Context(), u.ID, conv.ID)
	if err != nil || c.Title != conv.Title || !c.Created.Equal(conv.Created.Truncate(time.Microsecond)) || c.LastSeq != 3 {
		t.Fatalf("conversation: %+v, %v; was %+v", c, err, conv)
	}
	// At home on the instance's node, where its workspace is.
	node, err := os.ReadFile(filepath.Join(dir, "data", "node_id"))
	if err != nil || c.Home == "" || c.Home != strings.TrimSpace(string(node)) || !strings.Contains(r.stdout, "1 conversation at home on node "+c.Home) {
		t.Fatalf("the conversation's home: %q; the instance's node: %q, %v", c.Home, node, err)
	}
	msgs, err := convs.Messages(t.Context(), conv.ID)
	if err != nil || len(msgs) != 2 || msgs[1].Content != "hi" {
		t.Fatalf("messages: %+v, %v", msgs, err)
	}
	// The sequences moved past the copied rows: new rows take new IDs.
	e, err := convs.AppendEvent(t.Context(), agentcore.Event{Conversation: conv.ID, Type: "test", Data: []byte(`{"n":3}`)})
	if err != nil || e.Seq != 4 {
		t.Fatalf("an event after the migration: %+v, %v", e, err)
	}
	if err := convs.AppendMessages(t.Context(), conv.ID, agentcore.Message{Role: agentcore.RoleUser, Content: "after"}); err != nil {
		t.Fatalf("a message after the migration: %v", err)
	}
	if _, err := users.Add(t.Context(), auth.AddUser{Name: "bob", Password: "bob password", By: auth.CommandLine}); err != nil {
		t.Fatalf("a user after the migration: %v", err)
	}
}

// Bad input is refused with a clear message, exit status 1 or 2, and
// leaves the source as it was and the target empty.
func TestMigrateRefuses(t *testing.T) {
	dir, _ := migrateInstance(t)
	src := openDB(t, dir)
	before := counts(t, src)
	store.Close(src)
	target := storetest.Postgres(t)
	empty := func(what string) {
		t.Helper()
		db := storetest.OpenConfig(t, target)
		if n := counts(t, db); len(n) != 0 {
			t.Errorf("%s: the target has tables: %v", what, n)
		}
		store.Close(db)
	}

	r := ctl(t, "migrate", "--instance", dir, "--to", "postgres://alice:s3cret@localhost/codumentor")
	if r.code != 2 || !strings.Contains(r.stderr, "holds a password") || strings.Contains(r.stderr, "s3cret") {
		t.Errorf("a DSN with a password: %v", r)
	}
	r = ctl(t, "migrate", "--instance", dir, "--to", "host="+t.TempDir()+" user=postgres dbname=none sslmode=disable")
	if r.code != 1 || !strings.Contains(r.stderr, "the target database") || !strings.Contains(r.stderr, "nothing was written") {
		t.Errorf("an unreachable database: %v", r)
	}

	// A running server holds the instance's lock.
	lock, err := config.Instance{Dir: dir}.Lock()
	if err != nil {
		t.Fatal(err)
	}
	r = ctl(t, "migrate", "--instance", dir, "--to", target.DSN)
	lock.Close()
	if r.code != 1 || !strings.Contains(r.stderr, "migrate needs the server stopped") || !strings.Contains(r.stderr, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("a running server: %v", r)
	}
	empty("refused")

	// A value PostgreSQL cannot hold fails the copy half-way: the
	// transaction is rolled back, the schema too.
	src = openDB(t, dir)
	if err := src.Exec(`UPDATE conversations SET title = 'a' || char(0) || 'b'`).Error; err != nil {
		t.Fatal(err)
	}
	r = ctl(t, "migrate", "--instance", dir, "--to", target.DSN)
	if r.code != 1 || !strings.Contains(r.stderr, "NUL byte") || !strings.Contains(r.stderr, "conversations") || !strings.Contains(r.stderr, "rolled back") {
		t.Errorf("a failed copy: %v", r)
	}
	empty("a failed copy")
	if err := src.Exec(`UPDATE conversations SET title = 'fixed'`).Error; err != nil {
		t.Fatal(err)
	}
	store.Close(src)

	// A target that is not empty: the first migration's.
	if r := ctl(t, "migrate", "--instance", dir, "--to", target.DSN); r.code != 0 {
		t.Fatalf("migrate: %v", r)
	}
	r = ctl(t, "migrate", "--instance", dir, "--to", target.DSN)
	if r.code != 1 || !strings.Contains(r.stderr, "not empty") || !strings.Contains(r.stderr, "audit_log, ") || !strings.Contains(r.stderr, "nothing was written") {
		t.Errorf("a second migration into the same database: %v", r)
	}
	db := storetest.OpenConfig(t, target)
	if n := counts(t, db); n["audit_log"] != before["audit_log"]+1 || n["users"] != 1 {
		t.Errorf("the first migration's copy changed: %v", n)
	}
	src = openDB(t, dir)
	if n := counts(t, src); n["audit_log"] != before["audit_log"] || n["users"] != before["users"] || n["conversations"] != 1 {
		t.Errorf("the source changed: %v, was %v", n, before)
	}
}
