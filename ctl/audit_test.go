package ctl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/audit"
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
	if r.code != 0 || !strings.Contains(r.stdout, "4 records, chain intact; record 4 has hash "+rs[3].Hash) {
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
