package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// wantStorage requires a 503 with code and a Retry-After.
func wantStorage(t *testing.T, what string, code string, status int, body []byte, h http.Header) {
	t.Helper()
	if status != http.StatusServiceUnavailable || !bytes.Contains(body, []byte(`"code":"`+code+`"`)) {
		t.Errorf("%s: %d %s, want 503 %s", what, status, body, code)
		return
	}
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("%s: 503 %s without a Retry-After (%q)", what, code, h.Get("Retry-After"))
	}
}

// Another connection (codumentorctl, a backup, sqlite3) holds the
// database's write lock longer than store.busy_timeout: sign-ins, new
// conversations and messages answer 503 storage_busy, not 500, and work
// again once the lock is gone.
func TestStorageBusy(t *testing.T) {
	in := newInstance(t, "plugins: []\nstore: {busy_timeout: 200ms}\n")
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	var conv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "before"}, &conv)

	ctx := context.Background()
	db := in.openDB()
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	lock, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("taking the write lock: %v", err)
	}
	st, b, h := p.anon().do("POST", "/api/v1/auth/login", map[string]string{"username": "alice", "password": pw})
	wantStorage(t, "sign-in", "storage_busy", st, b, h)
	st, b, h = a.do("POST", "/api/v1/conversations", map[string]string{"title": "during"})
	wantStorage(t, "new conversation", "storage_busy", st, b, h)
	st, b, h = a.do("POST", "/api/v1/conversations/"+conv.ID+"/messages", map[string]string{"content": "hello"})
	wantStorage(t, "message", "storage_busy", st, b, h)

	if v, ok := sample(p.scrape(""), "codumentor_database_errors_total", "kind", "busy"); v < 3 {
		t.Errorf("codumentor_database_errors_total{kind=busy} = %v (present %v) after 3 busy answers", v, ok)
	}
	if _, err := lock.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	p.login("alice", pw)
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "after"}, nil)
}

// The instance's data directory is on a small file system that fills
// up: sign-ins and new conversations answer 503 storage_full, and work
// again once there is room. The file system is a real tmpfs of 16 MiB,
// mounted in a user and mount namespace of the server's own (unshare -Urm,
// which an unprivileged user may do), so that the test user can fill it
// through /proc/PID/root.
func TestStorageFull(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}
	// The instance's own file system fills: its SQLite database's.
	in := newInstance(t, "plugins: []\nstore: {backend: sqlite}\n")
	in.addUser("alice", pw, false)
	// The data directory's content moves onto the tmpfs mounted over it.
	in.wrap = []string{"unshare", "-Urm", "sh", "-c", `set -e
d="$0/data"; seed="$0/data.seed"
mkdir "$seed"; cp -a "$d/." "$seed/"
mount -t tmpfs -o size=16m,mode=0700 codumentor-test-full "$d"
cp -a "$seed/." "$d/"; rm -rf "$seed"
exec "$@"`, in.dir}
	p := in.start()
	a := p.login("alice", pw)
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "before"}, nil)

	// Fill the file system, as seen by the server.
	filler := filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "root", in.config().Database()+".filler")
	f, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatalf("creating a file on the server's data file system: %v", err)
	}
	page := make([]byte, 4096)
	for i := 0; ; i++ {
		if _, err := f.Write(page); errors.Is(err, syscall.ENOSPC) {
			break
		} else if err != nil {
			t.Fatal(err)
		} else if i > 16<<20/4096 {
			t.Fatalf("wrote %d KiB to a 16 MiB file system without ENOSPC: is the data directory on the tmpfs?", i*4)
		}
	}
	f.Close()

	// The first write that needs a new page fails; each of these needs
	// some.
	got := 0
	for i := 0; i < 50 && got == 0; i++ {
		st, b, h := p.anon().do("POST", "/api/v1/auth/login", map[string]string{"username": "alice", "password": pw})
		if st != http.StatusOK {
			wantStorage(t, "sign-in on a full disk", "storage_full", st, b, h)
			got = st
		}
	}
	if got == 0 {
		t.Fatal("50 sign-ins succeeded on a full file system")
	}
	st, b, h := a.do("POST", "/api/v1/conversations", map[string]string{"title": "during"})
	wantStorage(t, "new conversation on a full disk", "storage_full", st, b, h)
	fams := p.scrape("")
	if v, _ := sample(fams, "codumentor_database_errors_total", "kind", "full"); v < 2 {
		t.Errorf("codumentor_database_errors_total{kind=full} = %v after 2 storage_full answers", v)
	}
	if v, ok := sample(fams, "codumentor_storage_free_bytes", "dir", "data"); !ok || v > 64<<10 {
		t.Errorf("codumentor_storage_free_bytes{dir=data} = %v (present %v) on the full file system", v, ok)
	}
	if v, ok := sample(fams, "codumentor_storage_free_bytes", "dir", "logs"); !ok || v < 1<<20 {
		t.Errorf("codumentor_storage_free_bytes{dir=logs} = %v (present %v), off the full file system", v, ok)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Room again: everything works, and nothing earlier was lost.
	p.login("alice", pw)
	var list struct{ Conversations []struct{ Title string } }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "after"}, nil)
	a.must(http.StatusOK, "GET", "/api/v1/conversations", nil, &list)
	if len(list.Conversations) != 2 {
		t.Fatalf("conversations after the disk was full: %+v, want before and after", list.Conversations)
	}
}
