package ctl_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// repos add, list and sync --wait: the sync is a job that a server's
// queue runs (here the test's own queue, with the server's handler) and
// codumentorctl follows with plain lines when not on a terminal.
func TestRepos(t *testing.T) {
	dir := initInstance(t)
	ctl(t, "users", "add", "--instance", dir, "--password", "correct horse battery", "root") // creates the database
	src := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", "work"},
		{"-C", "work", "commit", "-q", "--allow-empty", "-m", "first"},
		{"clone", "-q", "--bare", "work", "remote.git"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	url := "file://" + filepath.Join(src, "remote.git")

	if r := ctl(t, "repos", "add", "--instance", dir, "hostile", "ext::sh -c touch% /tmp/x"); r.code != 1 || !strings.Contains(r.stderr, "remote helpers") {
		t.Fatalf("hostile URL: %v", r)
	}
	if r := ctl(t, "repos", "add", "--instance", dir, "--branch", "../x", "hostile", url); r.code != 1 || !strings.Contains(r.stderr, "branch") {
		t.Fatalf("hostile branch: %v", r)
	}
	if r := ctl(t, "repos", "add", "--instance", dir, "demo", url); r.code != 0 || !strings.Contains(r.stdout, "added repository demo") || !strings.Contains(r.stdout, "repos sync --wait --instance "+dir+" demo") {
		t.Fatalf("add: %v", r)
	}
	if r := ctl(t, "repos", "list", "--instance", dir); r.code != 0 || !strings.Contains(r.stdout, "demo") || !strings.Contains(r.stdout, url) || strings.Contains(r.stdout, "hostile") {
		t.Fatalf("list: %v", r)
	}
	// An administrative action: in the audit log, by the command line.
	if rs := export(t, dir, "--kind", "admin"); len(rs) != 2 || rs[1].User != "codumentorctl" || !strings.Contains(string(rs[1].Data), `"action":"repository_add"`) || !strings.Contains(string(rs[1].Data), `"name":"demo"`) {
		t.Fatalf("audit records of the command line: %+v", rs)
	}
	// The setup opt-in: --setup-network needs --run-setup.
	if r := ctl(t, "repos", "add", "--instance", dir, "--setup-network", "netonly", url); r.code != 1 || !strings.Contains(r.stderr, "setup_network needs run_setup") {
		t.Fatalf("--setup-network alone: %v", r)
	}
	if r := ctl(t, "repos", "add", "--instance", dir, "--run-setup", "--setup-network", "withsetup", url); r.code != 0 {
		t.Fatalf("add --run-setup: %v", r)
	}
	if r := ctl(t, "repos", "add", "--instance", dir, "--run-setup", "--setup-allow-host", "registry.npmjs.org", "--setup-allow-host", "*.pypi.org:443", "egress", url); r.code != 0 {
		t.Fatalf("add --setup-allow-host: %v", r)
	}
	if r := ctl(t, "repos", "add", "--instance", dir, "--run-setup", "--setup-allow-host", "*.org", "badegress", url); r.code != 1 || !strings.Contains(r.stderr, "setup_egress") {
		t.Fatalf("add --setup-allow-host '*.org': %v", r)
	}
	if r := ctl(t, "repos", "list", "--json", "--instance", dir); !strings.Contains(r.stdout, `"setup_egress":["registry.npmjs.org","*.pypi.org:443"]`) {
		t.Fatalf("list --json: the setup allow-list: %v", r)
	}
	if r := ctl(t, "repos", "list", "--json", "--instance", dir); !strings.Contains(r.stdout, `"name":"withsetup","url":"`+url+`","branch":"main","branches":["main"],"run_setup":true,"setup_network":true`) || !strings.Contains(r.stdout, `"name":"demo","url":"`+url+`","branch":"main","branches":["main"],"run_setup":false`) {
		t.Fatalf("list --json: %v", r)
	}

	// Several branches: --branch is the default, --also-branch the others.
	if r := ctl(t, "repos", "add", "--instance", dir, "--branch", "trunk", "--also-branch", "release-1.x", "--also-branch", "release-2.x", "branches", url); r.code != 0 {
		t.Fatalf("add --also-branch: %v", r)
	}
	if r := ctl(t, "repos", "list", "--json", "--instance", dir); !strings.Contains(r.stdout, `"name":"branches","url":"`+url+`","branch":"trunk","branches":["trunk","release-1.x","release-2.x"]`) {
		t.Fatalf("list --json after --also-branch: %v", r)
	}
	if r := ctl(t, "repos", "add", "--instance", dir, "--also-branch", "trunk", "--also-branch", "../x", "badbranch", url); r.code != 1 || !strings.Contains(r.stderr, "branches") {
		t.Fatalf("add --also-branch ../x: %v", r)
	}

	// The server's side: its queue with the sync handler (the local
	// remote is served in a sandbox).
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(context.Background(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "sandbox: %v", err)
	}
	db := openDB(t, dir)
	q, err := jobs.New(db, jobs.Options{Poll: 50e6})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(db, secrets.NewKeyring("", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repos.Open(repos.Options{DB: db, Queue: q, Secrets: sec, Dir: config.Instance{Dir: dir}.ReposDir()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	r := ctl(t, "repos", "sync", "--wait", "--instance", dir, "demo")
	if r.code != 0 || !strings.Contains(r.stdout, "succeeded") || !strings.Contains(r.stdout, `"head":"`) || strings.Contains(r.stdout, "\r") {
		t.Fatalf("sync --wait: %v", r)
	}
	if r := ctl(t, "repos", "sync", "--instance", dir, "nope"); r.code != 1 || !strings.Contains(r.stderr, "no repository") {
		t.Fatalf("sync of an unknown repository: %v", r)
	}
	// The audit log has who started the sync and the head it fetched.
	rs, err := audit.List(context.Background(), db, audit.Filter{Kind: audit.KindRepositorySync})
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, rec := range rs {
		var d map[string]any
		json.Unmarshal(rec.Data, &d)
		if d["name"] != "demo" || rec.User != "codumentorctl" {
			t.Errorf("sync record %s by %q: %v", rec.Kind, rec.User, d)
		}
		if d["result"] == "fetched" && (d["head"] == "" || !strings.Contains(r.stdout, d["head"].(string))) {
			t.Errorf("fetched record's head %v is not the job's: %v", d["head"], r)
		}
		results = append(results, d["result"].(string))
	}
	if strings.Join(results, ",") != "started,fetched" {
		t.Errorf("sync records: %v, want started then fetched", results)
	}
}
