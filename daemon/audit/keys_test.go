package audit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

const (
	secretA = "audit-test-secret-A-0123456789abcdefghij"
	secretB = "audit-test-secret-B-0123456789abcdefghij"
)

// keyedDB is a database whose appends MAC under keys.
func keyedDB(t *testing.T, keys *audit.Keys) *gorm.DB {
	t.Helper()
	db := openDB(t)
	if err := audit.UseKeys(db, keys); err != nil {
		t.Fatal(err)
	}
	return db
}

// other opens a second connection to db's database, as someone with
// write access to it would; keys nil: without any.
func other(t *testing.T, db *gorm.DB, keys *audit.Keys) *gorm.DB {
	t.Helper()
	c, ok := configs.Load(db)
	if !ok {
		t.Fatal("other: db was not opened by openDB")
	}
	o := storetest.OpenConfig(t, c.(store.Config))
	if keys != nil {
		if err := audit.UseKeys(o, keys); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

func write(t *testing.T, db *gorm.DB, n int, name string) {
	t.Helper()
	for i := range n {
		if err := audit.Write(context.Background(), db, audit.Entry{Kind: audit.KindLogin, User: "u", Source: "127.0.0.1", Data: map[string]any{"name": name, "i": i}}); err != nil {
			t.Fatal(err)
		}
	}
}

// rewrite deletes the records from seq on and appends n new ones
// through db, which has the attacker's keys; with none, they are forged
// as unkeyed records, as anyone can compute them (Append refuses to
// write them after keyed ones).
func rewrite(t *testing.T, db *gorm.DB, seq int64, n int) {
	t.Helper()
	if err := db.Exec("DELETE FROM audit_log WHERE seq >= ?", seq).Error; err != nil {
		t.Fatal(err)
	}
	if audit.HasKeys(db) {
		write(t, db, n, "mallory")
		return
	}
	prev := strings.Repeat("0", 64)
	if seq > 1 {
		if err := db.Raw("SELECT hash FROM audit_log WHERE seq = ?", seq-1).Scan(&prev).Error; err != nil {
			t.Fatal(err)
		}
	}
	for i := range int64(n) {
		r := audit.Record{Seq: seq + i, Time: "2026-11-01T00:00:00.000000000Z", Kind: audit.KindLogin, User: "u", Data: []byte(`{"name":"mallory"}`), Prev: prev}
		r.Hash = r.UnkeyedHash()
		if err := db.Create(&r).Error; err != nil {
			t.Fatal(err)
		}
		prev = r.Hash
	}
}

// Every kind of tampering, each after the operator took the head, is
// named by Verify against that head; without the head the chain alone
// names all but the truncations and a rewrite of an unkeyed log.
func TestVerifyKeyedAgainstHead(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, db *gorm.DB)
		// wantSeq and want name the record and the problem; chainOnly
		// says whether Verify without the head sees it too.
		wantSeq   int64
		want      string
		chainOnly bool
	}{
		{"edit", func(t *testing.T, db *gorm.DB) {
			db.Exec(`UPDATE audit_log SET data = '{"name":"mallory"}' WHERE seq = 3`)
		}, 3, "does not match its MAC", true},
		{"delete middle", func(t *testing.T, db *gorm.DB) { db.Exec(`DELETE FROM audit_log WHERE seq = 3`) }, 4, "record 3 before it is missing", true},
		{"delete newest", func(t *testing.T, db *gorm.DB) { db.Exec(`DELETE FROM audit_log WHERE seq = 5`) }, 5, "the log ends at record 4", false},
		{"delete newest 3", func(t *testing.T, db *gorm.DB) { db.Exec(`DELETE FROM audit_log WHERE seq > 2`) }, 5, "the log ends at record 2", false},
		{"delete all but the first", func(t *testing.T, db *gorm.DB) { db.Exec(`DELETE FROM audit_log WHERE seq > 1`) }, 5, "the log ends at record 1", false},
		{"delete all", func(t *testing.T, db *gorm.DB) { db.Exec(`DELETE FROM audit_log`) }, 5, "the log is empty", false},
		{"delete newest, then more written", func(t *testing.T, db *gorm.DB) {
			db.Exec(`DELETE FROM audit_log WHERE seq > 3`)
			write(t, other(t, db, audit.NewKeys(secretA, nil)), 2, "later")
		}, 5, "not the record of the head", false},
		{"reorder", func(t *testing.T, db *gorm.DB) {
			db.Exec(`UPDATE audit_log SET seq = -seq WHERE seq IN (2, 3)`)
			db.Exec(`UPDATE audit_log SET seq = CASE seq WHEN -2 THEN 3 ELSE 2 END WHERE seq < 0`)
		}, 2, "record 2", true},
		{"re-chain without the key", func(t *testing.T, db *gorm.DB) { rewrite(t, other(t, db, nil), 3, 3) }, 3, "chained without a key after keyed record 1", true},
		{"re-chain of a copied key ID", func(t *testing.T, db *gorm.DB) {
			rewrite(t, other(t, db, nil), 3, 3)
			db.Exec(`UPDATE audit_log SET key_id = (SELECT key_id FROM audit_log WHERE seq = 1) WHERE seq >= 3`)
		}, 3, "does not match its MAC", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := keyedDB(t, audit.NewKeys(secretA, nil))
			write(t, db, 5, "alice")
			head, err := audit.LastHead(ctx, db)
			if err != nil || head.Seq != 5 {
				t.Fatalf("LastHead = %v, %v", head, err)
			}
			if n, err := audit.Verify(ctx, db, head); err != nil || n != 5 {
				t.Fatalf("before: Verify = %d, %v", n, err)
			}
			if h, err := audit.ParseHead(head.String()); err != nil || h != head {
				t.Fatalf("ParseHead(%q) = %v, %v", head, h, err)
			}
			tt.tamper(t, db)
			check := func(err error, what string) {
				t.Helper()
				var be *audit.BrokenError
				if !errors.As(err, &be) || be.Seq != tt.wantSeq || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("%s after %s = %v; want record %d: %q", what, tt.name, err, tt.wantSeq, tt.want)
				}
			}
			_, err = audit.Verify(ctx, db, head)
			check(err, "Verify with the head")
			rs, err := audit.List(ctx, db, audit.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			check(audit.VerifyRecords(rs, audit.NewKeys(secretA, nil), head), "VerifyRecords with the head")
			_, err = audit.Verify(ctx, db)
			if tt.chainOnly {
				check(err, "Verify")
			} else if err != nil {
				t.Fatalf("Verify without the head after %s = %v; the chain that is left is intact", tt.name, err)
			}
		})
	}
}

// A chain re-written under a key that is not the server's is refused:
// its key is unknown.
func TestVerifyForeignKey(t *testing.T) {
	ctx := context.Background()
	db := keyedDB(t, audit.NewKeys(secretA, nil))
	write(t, db, 5, "alice")
	rewrite(t, other(t, db, audit.NewKeys(secretB, nil)), 3, 3)
	if _, err := audit.Verify(ctx, db); !errors.Is(err, audit.ErrUnknownKey) || !strings.Contains(err.Error(), "record 3") {
		t.Fatalf("Verify of records MACed under another key = %v, want ErrUnknownKey at record 3", err)
	}
}

// After a rotation the records MACed under the previous secret verify
// with previous_jwt_secrets, and new ones are MACed under the new
// secret; without the previous secret the old ones cannot be checked.
func TestVerifyRotation(t *testing.T) {
	ctx := context.Background()
	db := keyedDB(t, audit.NewKeys(secretA, nil))
	write(t, db, 3, "before")
	if err := audit.UseKeys(db, audit.NewKeys(secretB, []string{secretA})); err != nil {
		t.Fatal(err)
	}
	write(t, db, 2, "after")
	rs, err := audit.List(ctx, db, audit.Filter{})
	if err != nil || len(rs) != 5 || rs[0].KeyID == "" || rs[0].KeyID == rs[4].KeyID {
		t.Fatalf("records %+v, %v: want the first three and the last two under different keys", rs, err)
	}
	head := audit.Head{Seq: rs[4].Seq, MAC: rs[4].Hash}
	if n, err := audit.Verify(ctx, db, head); err != nil || n != 5 {
		t.Fatalf("Verify after the rotation = %d, %v", n, err)
	}
	if err := audit.UseKeys(db, audit.NewKeys(secretB, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.Verify(ctx, db); !errors.Is(err, audit.ErrUnknownKey) || !strings.Contains(err.Error(), "record 1") {
		t.Fatalf("Verify without the previous secret = %v, want ErrUnknownKey at record 1", err)
	}
}

// A log written before keyed MACs keeps verifying; the first keyed
// record pins it, and a head pins a rewrite of all of it.
func TestVerifyUnkeyedThenKeyed(t *testing.T) {
	ctx := context.Background()
	db := openDB(t) // no keys: as before keyed MACs
	write(t, db, 3, "old")
	if n, err := audit.Verify(ctx, db); err != nil || n != 3 {
		t.Fatalf("unkeyed log: Verify = %d, %v", n, err)
	}
	keys := audit.NewKeys(secretA, nil)
	if err := audit.UseKeys(db, keys); err != nil {
		t.Fatal(err)
	}
	write(t, db, 2, "new")
	head, err := audit.LastHead(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := audit.Verify(ctx, db, head); err != nil || n != 5 {
		t.Fatalf("unkeyed then keyed: Verify = %d, %v", n, err)
	}
	// An unkeyed record edited and the unkeyed part re-chained: the
	// first keyed record no longer follows.
	rs, _ := audit.List(ctx, db, audit.Filter{})
	attacker := other(t, db, nil)
	rewrite(t, attacker, 2, 2)
	for _, r := range rs[3:] {
		attacker.Create(&r)
	}
	var be *audit.BrokenError
	if _, err := audit.Verify(ctx, db); !errors.As(err, &be) || be.Seq != 4 || !strings.Contains(be.Problem, "does not follow record 3") {
		t.Fatalf("Verify after re-chaining the unkeyed records = %v, want record 4 not following", err)
	}
	// The whole log re-written unkeyed: only the head shows it.
	rewrite(t, attacker, 1, 5)
	if _, err := audit.Verify(ctx, db); err != nil {
		t.Fatalf("an unkeyed log verifies on its own: %v", err)
	}
	if _, err := audit.Verify(ctx, db, head); !errors.As(err, &be) || be.Seq != 5 || !strings.Contains(be.Problem, "not the record of the head") {
		t.Fatalf("Verify with the head after the log was re-written = %v", err)
	}
}

// A writer without the key cannot append to a keyed chain (it would
// break it); one with a key can continue an unkeyed one.
func TestAppendWithoutKeyRefused(t *testing.T) {
	ctx := context.Background()
	db := keyedDB(t, audit.NewKeys(secretA, nil))
	write(t, db, 2, "alice")
	err := audit.Write(ctx, other(t, db, nil), audit.Entry{Kind: audit.KindAdmin, User: "codumentorctl"})
	if !errors.Is(err, audit.ErrNoKey) {
		t.Fatalf("appending without the key to a keyed chain = %v, want ErrNoKey", err)
	}
	if n, err := audit.Verify(ctx, db); err != nil || n != 2 {
		t.Fatalf("Verify = %d, %v; want the 2 records intact", n, err)
	}
}

// A database from before keyed MACs (an audit_log without key_id) is
// migrated in place: its records keep verifying, and the server's keyed
// records continue its chain.
//
// SQLite only: the previous release had no PostgreSQL backend, so no
// PostgreSQL database holds the old table.
func TestMigrateUnkeyedTable(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, t.TempDir()+"/old.db")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(db)
	// The table as the previous release created it.
	if err := db.Exec("CREATE TABLE `audit_log` (`seq` integer,`time` text NOT NULL,`kind` text NOT NULL,`user` text,`source` text,`data` blob NOT NULL,`prev` text NOT NULL,`hash` text NOT NULL,PRIMARY KEY (`seq`))").Error; err != nil {
		t.Fatal(err)
	}
	prev := strings.Repeat("0", 64)
	for seq := int64(1); seq <= 3; seq++ {
		r := audit.Record{Seq: seq, Time: "2026-10-01T00:00:00.000000000Z", Kind: audit.KindLogin, User: "u", Data: []byte(`{"name":"alice"}`), Prev: prev}
		r.Hash = r.UnkeyedHash()
		if err := db.Exec("INSERT INTO audit_log (seq, time, kind, user, source, data, prev, hash) VALUES (?, ?, ?, ?, '', ?, ?, ?)", r.Seq, r.Time, r.Kind, r.User, r.Data, r.Prev, r.Hash).Error; err != nil {
			t.Fatal(err)
		}
		prev = r.Hash
	}
	if err := audit.Migrate(db); err != nil {
		t.Fatal(err)
	}
	if err := audit.UseKeys(db, audit.NewKeys(secretA, nil)); err != nil {
		t.Fatal(err)
	}
	write(t, db, 2, "bob")
	if n, err := audit.Verify(ctx, db); err != nil || n != 5 {
		t.Fatalf("Verify after the migration = %d, %v", n, err)
	}
	rs, err := audit.List(ctx, db, audit.Filter{})
	if err != nil || rs[2].KeyID != "" || rs[3].KeyID == "" || rs[3].Prev != prev {
		t.Fatalf("records %+v, %v: want 3 unkeyed, then keyed ones chained to them", rs, err)
	}
}
