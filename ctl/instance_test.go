package ctl_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit"
	"gorm.io/gorm"
)

// newInstance returns the path of an instance directory that does not
// exist yet, and keeps the test's own CODUMENTOR_JWT_SECRET (if any) away
// from codumentorctl, whose behaviour it changes.
func newInstance(t *testing.T) string {
	t.Helper()
	t.Setenv(config.EnvJWTSecret, "") // restored after the test
	os.Unsetenv(config.EnvJWTSecret)
	return filepath.Join(t.TempDir(), "instance")
}

// initInstance returns a new instance directory, created as the server
// creates it.
func initInstance(t *testing.T) string {
	t.Helper()
	dir := newInstance(t)
	if err := (config.Instance{Dir: dir}).Init(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openDB opens the instance's database, for the test's own look at it.
func openDB(t *testing.T, dir string) *gorm.DB {
	t.Helper()
	db, err := store.Open(context.Background(), config.Instance{Dir: dir}.Database())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(db) })
	return db
}

// instanceChecks runs check --instance dir --json and returns its checks
// by name, with the whole result.
func instanceChecks(t *testing.T, dir string) (map[string]sandboxkit.Check, checkJSON, result) {
	t.Helper()
	r := ctl(t, "check", "--json", "--instance", dir)
	var rep checkJSON
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%v", err, r)
	}
	byName := map[string]sandboxkit.Check{}
	for _, c := range rep.Checks {
		byName[c.Name] = c
	}
	allOK := len(rep.Checks) > 0
	for _, c := range rep.Checks {
		allOK = allOK && c.OK
	}
	if rep.OK != allOK || (r.code == 0) != allOK {
		t.Errorf("verdict ok=%v and exit %d disagree with the checks:\n%v", rep.OK, r.code, r)
	}
	return byName, rep, r
}

func TestInstanceCheckNeedsSecret(t *testing.T) {
	dir := newInstance(t)
	if r := (run{args: []string{"users", "add", "--instance", dir, "--password-stdin", "alice"}, stdin: "correct horse\n"}).do(t); r.code != 0 {
		t.Fatalf("users add: %v", r)
	}

	checks, _, r := instanceChecks(t, dir)
	if r.code != 1 {
		t.Errorf("want exit 1 without a secret, got %v", r)
	}
	for _, name := range []string{"instance-modes", "config", "database", "wal"} {
		if c, ok := checks[name]; !ok || !c.OK {
			t.Errorf("check %s missing or failed: %+v", name, c)
		}
	}
	if c := checks["wal"]; c.Detail != "journal_mode=wal" {
		t.Errorf("wal detail %q", c.Detail)
	}
	c := checks["jwt-secret"]
	if c.OK || c.Remedy != "codumentorctl secrets rotate --instance "+dir {
		t.Errorf("jwt-secret: want a failure fixed by secrets rotate, got %+v", c)
	}
	// The sandbox checks ran on the instance's workspaces (when they got
	// that far).
	if c, ok := checks["overlay"]; ok && c.OK && !strings.Contains(c.Detail, filepath.Join(dir, "workspaces")) {
		t.Errorf("overlay check did not probe the instance's workspaces: %+v", c)
	}

	if r := ctl(t, "secrets", "rotate", "--instance", dir); r.code != 0 {
		t.Fatalf("secrets rotate: %v", r)
	}
	checks, _, _ = instanceChecks(t, dir)
	for _, name := range []string{"instance-modes", "config", "jwt-secret", "database", "wal"} {
		if c, ok := checks[name]; !ok || !c.OK {
			t.Errorf("after rotate, check %s missing or failed: %+v", name, c)
		}
	}

	// The table has the rows too.
	r = ctl(t, "check", "--instance", dir)
	for _, name := range []string{"instance-modes", "config", "jwt-secret", "database", "wal"} {
		if !strings.Contains(r.stdout, "\n"+name+" ") {
			t.Errorf("table lacks a row for %s:\n%s", name, r.stdout)
		}
	}
}

func TestInstanceCheckLooseMode(t *testing.T) {
	dir := initInstance(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	checks, _, r := instanceChecks(t, dir)
	c := checks["instance-modes"]
	if r.code != 1 || c.OK || !strings.Contains(c.Detail, "chmod 0700 "+dir) || !strings.Contains(c.Remedy, "chmod") {
		t.Errorf("want a failed instance-modes check naming chmod, got %+v\n%v", c, r)
	}
	// The other commands refuse the instance too, saying how to fix it.
	r = ctl(t, "users", "list", "--instance", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "chmod 0700 "+dir) {
		t.Errorf("users list on a loose instance: want exit 1 naming chmod, got %v", r)
	}
}

func TestInstanceCheckMissing(t *testing.T) {
	dir := newInstance(t)
	checks, _, r := instanceChecks(t, dir)
	c := checks["instance-modes"]
	if r.code != 1 || c.OK || !strings.Contains(c.Remedy, "users add --instance "+dir) {
		t.Errorf("want a failed instance-modes check saying how to create it, got %+v\n%v", c, r)
	}
	if _, ok := checks["database"]; ok {
		t.Errorf("checks ran on a missing instance: %v", checks)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("check created the instance directory (stat: %v)", err)
	}
}

func TestInstanceCheckWithoutDatabase(t *testing.T) {
	dir := initInstance(t)
	checks, _, r := instanceChecks(t, dir)
	c := checks["database"]
	if r.code != 1 || c.OK || !strings.Contains(c.Remedy, "users add") {
		t.Errorf("want a failed database check, got %+v\n%v", c, r)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "codumentor.db")); !os.IsNotExist(err) {
		t.Errorf("check created the database (stat: %v)", err)
	}
}

// A relative --instance is resolved once: check looks at the same
// instance and overlay filesystem as with the absolute path.
func TestRelativeInstance(t *testing.T) {
	dir := initInstance(t)
	if r := ctl(t, "users", "add", "--instance", dir, "--password", "alice password", "alice"); r.code != 0 {
		t.Fatal(r)
	}
	abs, _, _ := instanceChecks(t, dir)
	r := run{args: []string{"check", "--json", "--instance", "instance"}, dir: filepath.Dir(dir)}.do(t)
	var rep checkJSON
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%v", err, r)
	}
	for _, c := range rep.Checks {
		if a, ok := abs[c.Name]; ok && a.OK != c.OK {
			t.Errorf("check %s: %v with the relative path (%s), %v with the absolute one", c.Name, c.OK, c.Detail, a.OK)
		}
	}
	if r := (run{args: []string{"users", "list", "--instance", "instance"}, dir: filepath.Dir(dir)}).do(t); r.code != 0 || !strings.Contains(r.stdout, "alice") {
		t.Errorf("users list with a relative path: %v", r)
	}
}

// A read-only command on a mistyped instance says the directory is not
// there, not how to create one.
func TestMistypedInstance(t *testing.T) {
	dir := newInstance(t)
	for _, args := range [][]string{{"users", "list"}, {"audit", "verify"}, {"secrets", "status"}} {
		r := ctl(t, append(args, "--instance", dir)...)
		if r.code != 1 || !strings.Contains(r.stderr, "no instance directory at "+dir) || strings.Contains(r.stderr, "users add") {
			t.Errorf("%v on a missing instance: %v", args, r)
		}
	}
}

// With investigations enabled, check --instance lists what they do not
// see: the instance directory, its config.yaml and the files it names.
func TestInstanceCheckInvestigationMasks(t *testing.T) {
	dir := newInstance(t)
	if r := (run{args: []string{"users", "add", "--instance", dir, "--password-stdin", "alice"}, stdin: "correct horse\n"}).do(t); r.code != 0 {
		t.Fatalf("users add: %v", r)
	}
	checks, _, _ := instanceChecks(t, dir)
	if _, ok := checks["investigation-masks"]; ok {
		t.Errorf("investigation-masks without investigations: %+v", checks["investigation-masks"])
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, []byte("not read by the check"), 0o644)
	inst := config.Instance{Dir: dir}
	b, _ := os.ReadFile(inst.ConfigFile())
	b = append(b, []byte("\nmermaid_render: {script: "+ca+"}\ninvestigation: {enabled: true}\n")...)
	if err := os.WriteFile(inst.ConfigFile(), b, 0o600); err != nil {
		t.Fatal(err)
	}
	checks, _, _ = instanceChecks(t, dir)
	c := checks["investigation-masks"]
	for _, p := range []string{dir, inst.ConfigFile(), ca} {
		if !c.OK || !strings.Contains(c.Detail, p) {
			t.Errorf("investigation-masks does not name %s: %+v", p, c)
		}
	}
}

// check --instance names the system prompt template the server uses and
// says that it parses; one that does not fails the check, naming its key.
func TestInstanceCheckSystemPrompt(t *testing.T) {
	dir := initInstance(t)
	inst := config.Instance{Dir: dir}
	file := filepath.Join(t.TempDir(), "prompt.tmpl")
	content := "Repo {{.Repository}}; tools {{join .Tools \", \"}}."
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, yaml string
		ok         bool
		want       string
	}{
		{"built-in", "", true, "the built-in template (neither llm.system_prompt nor llm.system_prompt_file is set), " + strconv.Itoa(len(agentcore.DefaultPrompt())) + " bytes, parses"},
		{"inline", "llm:\n  system_prompt: \"Repo {{.Repository}}.\"\n", true, "llm.system_prompt, 21 bytes, parses"},
		{"file", "llm:\n  system_prompt_file: " + file + "\n", true, "llm.system_prompt_file " + file + ", " + strconv.Itoa(len(content)) + " bytes, parses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(inst.ConfigFile(), []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			checks, _, _ := instanceChecks(t, dir)
			c, ok := checks["system-prompt"]
			if !ok || c.OK != tc.ok || !strings.Contains(c.Detail, tc.want) {
				t.Errorf("system-prompt check %+v (present %v); want ok=%v naming %q", c, ok, tc.ok, tc.want)
			}
			if r := ctl(t, "check", "--instance", dir); !regexp.MustCompile(`(?m)^system-prompt +ok +`).MatchString(r.stdout) {
				t.Errorf("the table has no system-prompt ok row:\n%s", r.stdout)
			}
		})
	}
	// A template that stopped parsing since the server started (config
	// re-read at check time): the config check names the key.
	if err := os.WriteFile(file, []byte("{{.Repo}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	checks, _, r := instanceChecks(t, dir)
	if c := checks["config"]; r.code != 1 || c.OK || !strings.Contains(c.Detail, "llm.system_prompt_file") {
		t.Errorf("config check with a bad template: %+v, exit %d; want a failure naming llm.system_prompt_file", c, r.code)
	}
}
