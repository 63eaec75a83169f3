package api

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

// Another connection holds a lock a new conversation's insert needs for
// longer than the busy timeout: SQLite's write lock (BEGIN IMMEDIATE),
// or on PostgreSQL a lock on the table (lock_timeout), as a migration or
// a hand-run LOCK TABLE would. The request answers 503 storage_busy with
// a Retry-After, not 500, and works again once the lock is gone.
func TestStorageBusy(t *testing.T) {
	ctx := context.Background()
	c := storetest.Config(t)
	c.BusyTimeout = 200 * time.Millisecond
	a := startAPIOn(t, c, true, nil)
	if st, body := a.do(t, http.DefaultClient, "POST", "/api/v1/conversations", `{"title":"before"}`); st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, body)
	}

	sqlDB, err := storetest.OpenConfig(t, c).DB()
	if err != nil {
		t.Fatal(err)
	}
	lock, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	take := []string{"BEGIN IMMEDIATE"}
	if c.Backend == store.BackendPostgres {
		take = []string{"BEGIN", "LOCK TABLE conversations IN EXCLUSIVE MODE"}
	}
	for _, q := range take {
		if _, err := lock.ExecContext(ctx, q); err != nil {
			t.Fatalf("taking the lock: %s: %v", q, err)
		}
	}

	req, _ := http.NewRequest("POST", a.url+"/api/v1/conversations", strings.NewReader(`{"title":"during"}`))
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"storage_busy"`) {
		t.Errorf("create while locked: %d %s; want 503 storage_busy", res.StatusCode, body)
	}
	if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("503 storage_busy without a Retry-After (%q)", res.Header.Get("Retry-After"))
	}

	if _, err := lock.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if st, body := a.do(t, http.DefaultClient, "POST", "/api/v1/conversations", `{"title":"after"}`); st != http.StatusCreated {
		t.Fatalf("create after the lock: %d %s", st, body)
	}
}
