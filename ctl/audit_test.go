package ctl_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/config"
	"gorm.io/gorm"
)

// export writes the instance's audit log as JSON lines and reads it back.
func export(t *testing.T, dir string, args ...string) []audit.Record {
	t.Helper()
	r := ctl(t, append([]string{"audit", "export", "--instance", dir}, args...)...)
	if r.code != 0 {
		t.Fatalf("audit export: %v", r)
	}
	var rs []audit.Record
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var rec audit.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		rs = append(rs, rec)
	}
	return rs
}

func TestAuditExportVerify(t *testing.T) {
	dir := newInstance(t)
	for _, name := range []string{"alice", "bob", "carol"} {
		if r := ctl(t, "users", "add", "--instance", dir, "--password", name+" password", name); r.code != 0 {
			t.Fatalf("users add: %v", r)
		}
	}
	if r := ctl(t, "users", "disable", "--instance", dir, "bob"); r.code != 0 {
		t.Fatal(r)
	}
	rs := export(t, dir)
	if len(rs) != 4 || rs[0].Kind != audit.KindAdmin || rs[0].User != "codumentorctl" || !strings.Contains(string(rs[3].Data), `"user_disable"`) {
		t.Fatalf("export: %+v", rs)
	}
	if got := export(t, dir, "--since", rs[2].Time); len(got) != 2 || got[0].Seq != 3 {
		t.Fatalf("export --since: %+v", got)
	}
	if r := ctl(t, "audit", "export", "--instance", dir, "--since", "last week"); r.code != 2 {
		t.Fatalf("export --since 'last week': %v", r)
	}
	r := ctl(t, "audit", "verify", "--instance", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "4 records, chain intact; head 4:"+rs[3].Hash) {
		t.Fatalf("verify: %v", r)
	}
	// An export verifies on its own, also from the middle.
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	full := ctl(t, "audit", "export", "--instance", dir)
	os.WriteFile(file, []byte(full.stdout), 0o600)
	if r := ctl(t, "audit", "verify", "--file", file); r.code != 0 || !strings.Contains(r.stdout, "4 records, chain intact") {
		t.Fatalf("verify --file: %v", r)
	}
	lines := strings.SplitAfter(full.stdout, "\n")
	os.WriteFile(file, []byte(lines[0]+lines[2]+lines[3]), 0o600)
	if r := ctl(t, "audit", "verify", "--file", file); r.code != 1 || !strings.Contains(r.stderr, "record 3: record 2 before it is missing") {
		t.Fatalf("verify --file without line 2: %v", r)
	}

	// An edit in the database is named.
	db := openDB(t, dir)
	if err := db.Exec(`UPDATE audit_log SET data = replace(data, 'carol', 'mallory') WHERE seq = 3`).Error; err != nil {
		t.Fatal(err)
	}
	r = ctl(t, "audit", "verify", "--instance", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "at record 3: its content does not match its hash (edited)") {
		t.Fatalf("verify after an edit: %v", r)
	}
}

// With auth.jwt_secret the chain is keyed: audit head prints the newest
// record's SEQ:MAC, and verify --head names what happened since: the
// newest records deleted, or the log re-chained without the key.
func TestAuditHead(t *testing.T) {
	dir := initInstance(t)
	const secret = "ctl-audit-head-secret-0123456789abcdefghij"
	if err := os.WriteFile(config.Instance{Dir: dir}.ConfigFile(), []byte("auth:\n  jwt_secret: "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alice", "bob", "carol", "dave"} {
		if r := ctl(t, "users", "add", "--instance", dir, "--password", name+" password", name); r.code != 0 {
			t.Fatalf("users add: %v", r)
		}
	}
	r := ctl(t, "audit", "head", "--instance", dir)
	head, err := audit.ParseHead(r.stdout)
	if r.code != 0 || err != nil || head.Seq != 4 {
		t.Fatalf("audit head: %v (%v)", r, err)
	}
	if rs := export(t, dir); len(rs) != 4 || rs[3].KeyID == "" || rs[3].Hash != head.MAC {
		t.Fatalf("export: %+v; want 4 keyed records, the last with the head's MAC", rs)
	}
	verify := func(args ...string) result {
		return ctl(t, append([]string{"audit", "verify", "--instance", dir}, args...)...)
	}
	if r := verify("--head", head.String()); r.code != 0 || !strings.Contains(r.stdout, "4 records, chain intact, reaches the 1 head(s) given; head "+head.String()) {
		t.Fatalf("verify --head: %v", r)
	}
	if r := verify("--head", "4:nope"); r.code != 2 {
		t.Fatalf("verify --head 4:nope: %v, want a usage error", r)
	}

	db := openDB(t, dir)
	// The newest two deleted: the chain left is intact, the head shows it.
	if err := db.Exec(`DELETE FROM audit_log WHERE seq > 2`).Error; err != nil {
		t.Fatal(err)
	}
	if r := verify(); r.code != 0 {
		t.Fatalf("verify without the head after deleting the newest: %v", r)
	}
	if r := verify("--head", head.String()); r.code != 1 || !strings.Contains(r.stderr, "at record 4: it is missing: the log ends at record 2") {
		t.Fatalf("verify --head after deleting the newest: %v", r)
	}
	// A writer without the key cannot continue the chain: codumentorctl
	// without the server's jwt_secret refuses, and records forged without
	// the key (as anyone can hash them) are named by the chain.
	os.WriteFile(config.Instance{Dir: dir}.ConfigFile(), nil, 0o600)
	if r := ctl(t, "users", "add", "--instance", dir, "--password", "eve password", "eve"); r.code == 0 || !strings.Contains(r.stderr, "no auth.jwt_secret") {
		t.Fatalf("users add without the jwt_secret: %v", r)
	}
	if err := audit.Write(context.Background(), db, audit.Entry{Kind: audit.KindAdmin}); !errors.Is(err, audit.ErrNoKey) {
		t.Fatalf("audit.Write without the key on a keyed chain = %v, want ErrNoKey", err)
	}
	os.WriteFile(config.Instance{Dir: dir}.ConfigFile(), []byte("auth:\n  jwt_secret: "+secret+"\n"), 0o600)
	prev := rs2(t, db)
	for seq := int64(3); seq <= 4; seq++ {
		r := audit.Record{Seq: seq, Time: "2026-11-01T00:00:00.000000000Z", Kind: audit.KindAdmin, User: "codumentorctl", Data: []byte(`{"action":"user_add","user":"mallory"}`), Prev: prev}
		r.Hash = unkeyedHash(r)
		if err := db.Create(&r).Error; err != nil {
			t.Fatal(err)
		}
		prev = r.Hash
	}
	if r := verify(); r.code != 1 || !strings.Contains(r.stderr, "at record 3: it is chained without a key after keyed record 1 (re-chained without the key)") {
		t.Fatalf("verify after re-chaining without the key: %v", r)
	}
}

// rs2 is the hash of record 2.
func rs2(t *testing.T, db *gorm.DB) string {
	t.Helper()
	var h string
	if err := db.Raw("SELECT hash FROM audit_log WHERE seq = 2").Scan(&h).Error; err != nil || h == "" {
		t.Fatalf("record 2: %q, %v", h, err)
	}
	return h
}

// unkeyedHash is an unkeyed record's hash as the package documents it
// (SHA-256 of its length-prefixed fields): what a forger computes.
func unkeyedHash(r audit.Record) string {
	h := sha256.New()
	for _, f := range []string{fmt.Sprint(r.Seq), r.Time, r.Kind, r.User, r.Source, string(r.Data), r.Prev} {
		fmt.Fprintf(h, "%d:%s\n", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil))
}
