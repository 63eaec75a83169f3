package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/ctl"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// codumentorctl runs the operator's command line in this process.
func codumentorctl(t *testing.T, stdin string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	cmd := ctl.New()
	cmd.Reader, cmd.Writer, cmd.ErrWriter = strings.NewReader(stdin), &out, &out
	err := cmd.Run(context.Background(), append([]string{"codumentorctl"}, args...))
	if err != nil {
		out.WriteString(err.Error())
		return 1, out.String()
	}
	return 0, out.String()
}

// dbState is what a restore must bring back, read from a database.
type dbState struct {
	events    []agentcore.Event
	approvals []agentcore.Approval
	audit     []audit.Record
	secret    string
}

func readState(t *testing.T, inst config.Instance, conv, user string) dbState {
	t.Helper()
	ctx := context.Background()
	cfg, err := inst.Load("")
	if err != nil {
		t.Fatal(err)
	}
	dbc, err := cfg.Store.Database(inst)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.OpenConfig(ctx, dbc)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(db)
	convs, err := store.NewConversations(db)
	if err != nil {
		t.Fatal(err)
	}
	var st dbState
	if st.events, err = convs.Events(ctx, conv, 0, 100000); err != nil {
		t.Fatal(err)
	}
	if st.approvals, err = convs.Approvals(ctx, conv); err != nil {
		t.Fatal(err)
	}
	if st.audit, err = audit.List(ctx, db, audit.Filter{}); err != nil {
		t.Fatal(err)
	}
	st.secret = secretValue(t, db, cfg, user)
	return st
}

func secretValue(t *testing.T, db *gorm.DB, cfg config.Config, user string) string {
	t.Helper()
	s, err := secrets.New(db, secrets.NewKeyring(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets))
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Value(context.Background(), user, "OLD")
	if err != nil {
		t.Fatalf("secret OLD: %v", err)
	}
	return v
}

// restoreTo is what restore needs besides the backup: on PostgreSQL
// (CODUMENTOR_TEST_STORE=postgres), --to an empty database of its own;
// pointTo then sets the restored instance's store.postgres.dsn to it.
func restoreTo(t *testing.T) (args []string, pointTo func(dir string)) {
	t.Helper()
	if storetest.Backend() != store.BackendPostgres {
		return nil, func(string) {}
	}
	dsn := storetest.Postgres(t).DSN
	return []string{"--to", dsn}, func(dir string) {
		t.Helper()
		inst := config.Instance{Dir: dir}
		cfg, err := inst.Load("")
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(inst.ConfigFile())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(inst.ConfigFile(), bytes.ReplaceAll(b, []byte(cfg.Store.Postgres.DSN), []byte(dsn)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Backup while a turn writes events, wipe, restore: conversations,
// events, approvals, secrets (under a rotated key), the audit chain and
// the workspace diff (whiteouts, an opaque directory) are all back.
func TestBackupRestore(t *testing.T) {
	needSandbox(t)
	const value = "backup-canary-91ab"
	in := newInstance(t, llm(t,
		shellCall("echo new > added.txt && echo more >> edit.txt && rm gone.txt && rm -r sub && mkdir sub && echo fresh > sub/only.txt && ln -s added.txt link"),
		llmtest.Step{Expect: "exit status 0", Text: "changed"},
		shellCall("for i in $(seq 1 30); do echo line $i; sleep 0.05; done"),
		llmtest.Step{Expect: "line 30", Text: "counted"},
	))
	alice := in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	a.must(http.StatusOK, "PUT", "/api/v1/secrets/OLD", map[string]string{"value": value}, nil)
	conv := a.newConversation()
	lower := filepath.Join(in.dir, "workspaces", "trees", conv)
	for name, data := range map[string]string{"edit.txt": "edit\n", "gone.txt": "gone\n", "keep.txt": "keep\n", "sub/old.txt": "old\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(lower, name)), 0o700)
		if err := os.WriteFile(filepath.Join(lower, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := a.follow(conv, "")
	approve := func() {
		t.Helper()
		evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
		aid := approvalID(t, evs[len(evs)-1])
		a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+aid, map[string]string{"decision": "approve"}, nil)
	}
	a.send(conv, "change files")
	approve()
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	diff := a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/diff", nil, nil)
	for _, want := range []string{"+++ b/added.txt", "--- a/gone.txt", "--- a/sub/old.txt", "+++ b/sub/only.txt", "+more"} {
		if !bytes.Contains(diff, []byte(want)) {
			t.Fatalf("diff lacks %q:\n%s", want, diff)
		}
	}

	// Rotate the secret: OLD stays under the previous key.
	if _, err := config.RotateSecret(in.config().ConfigFile(), config.NewSecret()); err != nil {
		t.Fatal(err)
	}
	cfg, err := in.config().Load("")
	if err != nil {
		t.Fatal(err)
	}

	// The second turn writes events while the backup runs.
	a.send(conv, "count")
	approve()
	s.until(agentcore.EventToolOutput, 30*time.Second)
	before := readState(t, in.config(), conv, alice.ID)
	file := filepath.Join(t.TempDir(), "instance.cbk")
	if code, out := codumentorctl(t, "", "backup", "--instance", in.dir, "--out", file); code != 0 || !strings.Contains(out, "backup of") {
		t.Fatalf("backup: %d %s", code, out)
	}
	pfile := filepath.Join(t.TempDir(), "pass.cbk")
	if code, out := codumentorctl(t, "correct passphrase\n", "backup", "--instance", in.dir, "--out", pfile, "--passphrase-stdin"); code != 0 {
		t.Fatalf("backup --passphrase-stdin: %d %s", code, out)
	}
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	s.close()
	p.stop()
	after := readState(t, in.config(), conv, alice.ID)

	// Wipe, then restore.
	overlay.RemoveAll(in.dir)
	if _, err := os.Stat(in.dir); !os.IsNotExist(err) {
		t.Fatalf("instance not wiped: %v", err)
	}
	to, pointTo := restoreTo(t)
	if code, out := codumentorctl(t, "not the secret\n", append([]string{"restore", "--instance", in.dir, "--in", file, "--key-stdin"}, to...)...); code == 0 || !strings.Contains(out, "does not open with this key") {
		t.Fatalf("restore with a wrong key: %d %s", code, out)
	}
	overlay.RemoveAll(in.dir)
	code, out := codumentorctl(t, cfg.Auth.JWTSecret+"\n", append([]string{"restore", "--instance", in.dir, "--in", file, "--key-stdin"}, to...)...)
	if code != 0 || !strings.Contains(out, "chain intact") {
		t.Fatalf("restore: %d %s", code, out)
	}
	if code, out := codumentorctl(t, "", append([]string{"restore", "--instance", in.dir, "--in", file, "--key-stdin"}, to...)...); code == 0 || !strings.Contains(out, "not empty") {
		t.Fatalf("restore into a full directory: %d %s", code, out)
	}
	pointTo(in.dir)
	restored := readState(t, in.config(), conv, alice.ID)

	// The snapshot lies between before and after.
	if restored.secret != value {
		t.Fatalf("secret OLD restored as %q", restored.secret)
	}
	if len(restored.events) < len(before.events) || len(restored.events) > len(after.events) {
		t.Fatalf("%d events restored; %d before the backup, %d after", len(restored.events), len(before.events), len(after.events))
	}
	for i, e := range restored.events {
		o := after.events[i]
		if e.Seq != o.Seq || e.Type != o.Type || !bytes.Equal(e.Data, o.Data) {
			t.Fatalf("event %d restored as %+v, was %+v", i, e, o)
		}
	}
	ja, _ := json.Marshal(before.approvals)
	jr, _ := json.Marshal(restored.approvals)
	if len(before.approvals) != 2 || !bytes.Equal(ja, jr) {
		t.Fatalf("approvals restored as %s, were %s", jr, ja)
	}
	if len(restored.audit) < len(before.audit) {
		t.Fatalf("%d audit records restored, %d before the backup", len(restored.audit), len(before.audit))
	}
	for i, r := range restored.audit {
		if r.Hash != after.audit[i].Hash {
			t.Fatalf("audit record %d differs after the restore", r.Seq)
		}
	}

	// The restored server shows the same workspace diff.
	p = in.start()
	a = p.login("alice", pw)
	if got := a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/diff", nil, nil); !bytes.Equal(got, diff) {
		t.Fatalf("diff after the restore:\n%s\nwant:\n%s", got, diff)
	}
	p.stop()

	// The passphrase backup restores elsewhere, with its passphrase only.
	other := filepath.Join(t.TempDir(), "other")
	t.Cleanup(func() { overlay.RemoveAll(other) })
	if code, out := codumentorctl(t, "", "restore", "--instance", other, "--in", pfile); code == 0 || !strings.Contains(out, "--passphrase-stdin") {
		t.Fatalf("restore of a passphrase backup without it: %d %s", code, out)
	}
	to, pointTo = restoreTo(t)
	if code, out := codumentorctl(t, "correct passphrase\n", append([]string{"restore", "--instance", other, "--in", pfile, "--passphrase-stdin"}, to...)...); code != 0 {
		t.Fatalf("restore --passphrase-stdin: %d %s", code, out)
	}
	pointTo(other)
	if got := readState(t, config.Instance{Dir: other}, conv, alice.ID); got.secret != value || len(got.approvals) != 2 {
		t.Fatalf("passphrase restore: secret %q, %d approvals", got.secret, len(got.approvals))
	}
}
