package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
)

// testAPI is the API over a real SQLite database, served on 127.0.0.1,
// with one user signed in: for what needs no engine.
type testAPI struct {
	url   string
	token string
	db    *gorm.DB
	dir   string
}

func startAPI(tb testing.TB, immutable bool) *testAPI {
	tb.Helper()
	return startAPIWith(tb, immutable, nil)
}

// startAPIWith is startAPI with more of the Deps, which with sets.
func startAPIWith(tb testing.TB, immutable bool, with func(db *gorm.DB, dir string, d *Deps)) *testAPI {
	tb.Helper()
	return startAPIOn(tb, storetest.Config(tb), immutable, with)
}

// startAPIOn is startAPIWith on the database c.
func startAPIOn(tb testing.TB, c store.Config, immutable bool, with func(db *gorm.DB, dir string, d *Deps)) *testAPI {
	tb.Helper()
	dir := tb.TempDir()
	db := storetest.OpenConfig(tb, c)
	convs, err := store.NewConversations(db)
	if err != nil {
		tb.Fatal(err)
	}
	users, err := auth.NewUsers(db)
	if err != nil {
		tb.Fatal(err)
	}
	u, err := users.Add(context.Background(), auth.AddUser{Name: "alice", Password: "correct horse battery"})
	if err != nil {
		tb.Fatal(err)
	}
	tokens, err := auth.NewTokens("test-secret-0123456789-abcdefghijklmnopqrstuvwxyz", nil, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	tok, _, err := tokens.Issue(u)
	if err != nil {
		tb.Fatal(err)
	}
	var tp atomic.Pointer[auth.Tokens]
	tp.Store(tokens)
	d := Deps{Conversations: convs, Users: users, Tokens: &tp}
	if with != nil {
		with(db, dir, &d)
	}
	s := newServer(d, immutable)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.App().Listener(ln)
	tb.Cleanup(func() { s.Shutdown(5 * time.Second) })
	return &testAPI{url: "http://" + ln.Addr().String(), token: tok, db: db, dir: dir}
}

func (a *testAPI) do(tb testing.TB, hc *http.Client, method, path, body string) (int, string) {
	tb.Helper()
	req, _ := http.NewRequest(method, a.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := hc.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// A store failure is the log's business: the client gets a generic 500,
// not the database's text.
func TestStoreErrorIsGeneric(t *testing.T) {
	a := startAPI(t, true)
	if st, body := a.do(t, http.DefaultClient, "POST", "/api/v1/conversations", `{"title":"ok"}`); st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, body)
	}
	// SQLite now fails the insert (no such table) while the user lookup
	// still works.
	if err := a.db.Exec("ALTER TABLE conversations RENAME TO gone").Error; err != nil {
		t.Fatal(err)
	}
	st, body := a.do(t, http.DefaultClient, "POST", "/api/v1/conversations", `{"title":"after the table went"}`)
	if st != http.StatusInternalServerError || !strings.Contains(body, `"internal"`) {
		t.Fatalf("create with the table gone: %d %s", st, body)
	}
	for _, leak := range []string{"sql", "table", "store", a.dir} {
		if strings.Contains(body, leak) {
			t.Errorf("the answer %s shows %q", body, leak)
		}
	}
}

// asAPIError answers an OS error by its class, wherever it is: raw, or
// formatted into an *Error's message.
func TestOSErrorsAreNotShown(t *testing.T) {
	long := &fs.PathError{Op: "lstat", Path: "/home/x/.codumentor/workspaces/layers/conv_1/upper/" + strings.Repeat("a", 300), Err: syscall.ENAMETOOLONG}
	missing := &fs.PathError{Op: "open", Path: "/home/x/.codumentor/data/y", Err: syscall.ENOENT}
	denied := &os.SyscallError{Syscall: "openat", Err: syscall.EACCES}
	for _, tc := range []struct {
		err    error
		status int
		code   string
		shown  bool
	}{
		{long, 400, "name_too_long", false},
		{badRequest("%v", long), 400, "name_too_long", false},
		{apiError(404, "not_found", "%v", fmt.Errorf("reading: %w", missing)), 404, "not_found", false},
		{missing, 404, "not_found", false},
		{badRequest("%v", denied), 500, "internal", false},
		{fmt.Errorf("store: %w", errors.New("sqlite: disk I/O error")), 500, "internal", false},
		{badRequest("%v", fmt.Errorf("%w: %q is absolute", agentcore.ErrOutsideWorkspace, "/etc")), 400, "bad_request", true},
		{errNotFound, 404, "not_found", true},
	} {
		ae, known := asAPIError(tc.err)
		b, _ := json.Marshal(ae)
		if ae.Status != tc.status || ae.Code != tc.code || known != tc.shown {
			t.Errorf("%v: %d %s known=%v, want %d %s %v", tc.err, ae.Status, ae.Code, known, tc.status, tc.code, tc.shown)
		}
		if !tc.shown && (strings.Contains(string(b), "/home") || strings.Contains(string(b), "sqlite")) {
			t.Errorf("%v: the answer shows it: %s", tc.err, b)
		}
	}
}

// BenchmarkImmutable is what Fiber's Immutable costs: authenticated GET
// /api/v1/conversations (token check, user lookup, one query, JSON) on a
// server with Immutable and on one without, requests alternating between
// the two so that both see the same machine load. It reports the mean
// time of each and their ratio (immutable / mutable).
func BenchmarkImmutable(b *testing.B) {
	servers := [2]*testAPI{startAPI(b, false), startAPI(b, true)}
	for _, a := range servers {
		for i := 0; i < 20; i++ {
			a.do(b, http.DefaultClient, "POST", "/api/v1/conversations", `{"title":"a conversation"}`)
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var spent [2]atomic.Int64
	var n [2]atomic.Int64
	b.SetParallelism(2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			k := i % 2
			req, _ := http.NewRequest("GET", servers[k].url+"/api/v1/conversations?limit=20", nil)
			req.Header.Set("Authorization", "Bearer "+servers[k].token)
			start := time.Now()
			res, err := hc.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			spent[k].Add(int64(time.Since(start)))
			n[k].Add(1)
			if res.StatusCode != http.StatusOK {
				b.Errorf("status %d", res.StatusCode)
				return
			}
		}
	})
	if n[0].Load() == 0 || n[1].Load() == 0 {
		return
	}
	mean := func(k int) float64 { return float64(spent[k].Load()) / float64(n[k].Load()) / 1e3 }
	b.ReportMetric(mean(0), "mutable-µs")
	b.ReportMetric(mean(1), "immutable-µs")
	b.ReportMetric(mean(1)/mean(0), "ratio")
}
