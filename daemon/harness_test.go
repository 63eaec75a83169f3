package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"gorm.io/gorm"
)

// bin is the codumentor binary the tests run: the real server process,
// so that it can be killed with SIGKILL and restarted.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "codumentor-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "codumentor")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/codumentor/codumentor/daemon/codumentor").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building codumentor: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	// Every answer the tests saw must be in the OpenAPI document; a run
	// of only some tests checks what those saw.
	if code == 0 && !checkObserved(os.Stdout, filepath.Join("api", "openapi.json")) {
		fmt.Println("--- FAIL: TestObservedAnswersAreDocumented (see above)")
		code = 1
	}
	os.Exit(code)
}

const testSecret = "test-secret-0123456789-abcdefghijklmnopqrstuvwxyz"

// instance is an instance directory for one test.
type instance struct {
	t   testing.TB
	dir string
	// args are extra command-line flags of codumentor api.
	args []string
	// nofile, if set, is the server's RLIMIT_NOFILE (soft and hard).
	nofile int
	// cwd, if set, is the server's working directory, and --instance
	// is given relative to it.
	cwd string
	// smallFS, if set, runs the server on a tmpfs of this many bytes
	// that holds a copy of the instance (see onTmpfs).
	smallFS int64
	// wrap, if set, is the command that runs the server: the server's
	// argv follows it (it must exec it, so that the pid is the server's).
	wrap []string
}

// newInstance creates an instance whose config.yaml has a jwt_secret
// and the extra YAML given.
func newInstance(t testing.TB, extra string) *instance {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "instance")
	inst := config.Instance{Dir: dir}
	if err := inst.Init(); err != nil {
		t.Fatal(err)
	}
	// overlayfs leaves a mode-000 work dir that t.TempDir cannot remove.
	t.Cleanup(func() { overlay.RemoveAll(inst.WorkspacesDir()) })
	yaml := "auth:\n  jwt_secret: " + testSecret + "\n" + extra
	// Under CODUMENTOR_TEST_STORE=postgres every server test runs on a
	// PostgreSQL database of its own, but for those that configure the
	// store themselves (SQLite's locking).
	if storetest.Backend() == store.BackendPostgres && !strings.Contains(extra, "store:") {
		yaml += fmt.Sprintf("store:\n  backend: postgres\n  postgres: {dsn: %q}\n", storetest.Postgres(t).DSN)
	}
	if err := os.WriteFile(inst.ConfigFile(), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return &instance{t: t, dir: dir}
}

func (in *instance) config() config.Instance { return config.Instance{Dir: in.dir} }

// storeYAML is the store section of the instance's config.yaml (a
// PostgreSQL database under CODUMENTOR_TEST_STORE=postgres), for a test
// that runs the server with a configuration file of its own.
func (in *instance) storeYAML() string {
	in.t.Helper()
	b, err := os.ReadFile(in.config().ConfigFile())
	if err != nil {
		in.t.Fatal(err)
	}
	if _, store, ok := strings.Cut(string(b), "\nstore:\n"); ok {
		return "store:\n" + store
	}
	return ""
}

// openDB opens the instance's database as its configuration names it
// (SQLite or PostgreSQL), beside a server that may run, closed when the
// test ends.
func (in *instance) openDB() *gorm.DB {
	in.t.Helper()
	cfg, err := in.config().Load("")
	if err != nil {
		in.t.Fatal(err)
	}
	c, err := cfg.Store.Database(in.config())
	if err != nil {
		in.t.Fatal(err)
	}
	return storetest.OpenConfig(in.t, c)
}

// addUser adds a local user through the database, as codumentorctl does.
func (in *instance) addUser(name, password string, admin bool) auth.User {
	in.t.Helper()
	var u auth.User
	in.users(func(ctx context.Context, us *auth.Users) (err error) {
		u, err = us.Add(ctx, auth.AddUser{Name: name, Password: password, Admin: admin})
		return err
	})
	return u
}

// users runs f on the instance's users table while the server may run,
// as codumentorctl users does.
func (in *instance) users(f func(context.Context, *auth.Users) error) {
	in.t.Helper()
	ctx := context.Background()
	db := in.openDB()
	// The instance's audit keys, as codumentorctl takes them.
	cfg, err := in.config().Load("")
	if err != nil {
		in.t.Fatal(err)
	}
	if err := audit.UseKeys(db, audit.NewKeys(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets)); err != nil {
		in.t.Fatal(err)
	}
	us, err := auth.NewUsers(db)
	if err != nil {
		in.t.Fatal(err)
	}
	if err := f(ctx, us); err != nil {
		in.t.Fatal(err)
	}
}

// proc is a running codumentor api.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	URL    string
	stderr *sandboxtest.Buffer
	done   chan struct{}
}

// listening finds the server's "listening" line, in log.format text or
// json.
var listening = regexp.MustCompile(`listening: url=(\S+)|"@message":"listening".*?"url":"([^"]+)"`)

// start runs codumentor api on a free loopback port and waits until it
// listens.
func (in *instance) start(env ...string) *proc {
	in.t.Helper()
	p, err := in.run(env...)
	if err != nil {
		in.t.Fatal(err)
	}
	return p
}

// run starts the server; it returns an error with the server's output if
// it exits before listening.
func (in *instance) run(env ...string) (*proc, error) {
	dir := in.dir
	if in.cwd != "" {
		rel, err := filepath.Rel(in.cwd, in.dir)
		if err != nil {
			return nil, err
		}
		dir = rel
	}
	if in.smallFS > 0 {
		dir = filepath.Join(filepath.Dir(in.dir), "tmpfs")
		if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
			return nil, err
		}
	}
	argv := append([]string{bin, "api", "--instance", dir, "--listen", "127.0.0.1:0"}, in.args...)
	if in.smallFS > 0 {
		argv = onTmpfs(in.smallFS, in.dir, dir, argv)
	}
	if in.nofile > 0 {
		argv = append([]string{"prlimit", fmt.Sprintf("--nofile=%d:%d", in.nofile, in.nofile), "--"}, argv...)
	}
	if len(in.wrap) > 0 {
		argv = append(slices.Clone(in.wrap), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = in.cwd
	cmd.Env = append(os.Environ(), env...)
	p := &proc{t: in.t, cmd: cmd, stderr: &sandboxtest.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { cmd.Wait(); close(p.done) }()
	in.t.Cleanup(p.kill)
	url, err := waitListening(p.stderr, p.done)
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("codumentor api (%v): %w", cmd.ProcessState, err)
	}
	p.URL = url
	return p, nil
}

// onTmpfs is argv run with a tmpfs of size bytes mounted on dir, holding
// a copy of the instance seed, as the unprivileged user that runs the
// tests: a user and mount namespace in which the user is root mounts it
// (the mount lives as long as the server), and a user namespace nested
// in that one maps the user back, so that the server runs without
// capabilities, as it does on a host, and its sandboxes nest as usual.
// What the server writes to the instance stays on the tmpfs: the test
// sees it through the API only.
func onTmpfs(size int64, seed, dir string, argv []string) []string {
	const script = `mount -t tmpfs -o size="$1",mode=0700 tmpfs "$2" && cp -a "$3"/. "$2"/ && shift 3 && exec unshare --user --map-user="$UID_" --map-group="$GID_" -- "$@"`
	return append([]string{"unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--", "env",
		"UID_=" + strconv.Itoa(os.Getuid()), "GID_=" + strconv.Itoa(os.Getgid()),
		"sh", "-c", script, "sh", strconv.FormatInt(size, 10), dir, seed}, argv...)
}

// waitListening waits until the server's log (out) says where it listens
// and returns that URL, or fails when exited is closed or after 60 s.
func waitListening(out *sandboxtest.Buffer, exited <-chan struct{}) (string, error) {
	deadline := time.After(60 * time.Second)
	for {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			return m[1] + m[2], nil
		}
		select {
		case <-exited:
			return "", fmt.Errorf("exited before listening:\n%s", out)
		case <-deadline:
			return "", fmt.Errorf("not listening within 60 s:\n%s", out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop shuts the server down gracefully (SIGTERM).
func (p *proc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Errorf("codumentor api did not stop within 30 s of SIGTERM:\n%s", p.stderr)
		p.kill()
	}
}

// kill ends the server with SIGKILL: no shutdown code runs.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// client calls the API with a token.
type client struct {
	t     testing.TB
	base  string
	token string
}

func (p *proc) anon() *client { return &client{t: p.t, base: p.URL} }

func (p *proc) login(name, password string) *client {
	p.t.Helper()
	c := p.anon()
	var res struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	c.must(http.StatusOK, "POST", "/api/v1/auth/login", map[string]string{"username": name, "password": password}, &res)
	if res.Token == "" || time.Until(res.ExpiresAt) <= 0 {
		p.t.Fatalf("login %s: token %q expires %v", name, res.Token, res.ExpiresAt)
	}
	c.token = res.Token
	return c
}

func (c *client) with(token string) *client { return &client{t: c.t, base: c.base, token: token} }

// do sends one request; body is JSON-encoded unless it is a string.
func (c *client) do(method, path string, body any) (int, []byte, http.Header) {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	observe(method, path, res.StatusCode)
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return res.StatusCode, b, res.Header
}

// must sends a request, requires the status and decodes the JSON answer
// into out (if not nil).
func (c *client) must(status int, method, path string, body, out any) []byte {
	c.t.Helper()
	got, b, _ := c.do(method, path, body)
	if got != status {
		c.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return b
}

// sseEvent is one server-sent event as received.
type sseEvent struct {
	ID   string
	Type string
	Data json.RawMessage
}

// stream is an open event stream.
type stream struct {
	t      testing.TB
	cancel context.CancelFunc
	events chan sseEvent
	err    chan error
	beats  atomic.Int64 // heartbeat comments read
}

// follow opens GET …/events with Last-Event-ID lastID ("" for none).
func (c *client) follow(conv, lastID string) *stream {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/api/v1/conversations/"+conv+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		c.t.Fatal(err)
	}
	observe("GET", "/api/v1/conversations/"+conv+"/events", res.StatusCode)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		c.t.Fatalf("events: %d %s: %s", res.StatusCode, res.Header.Get("Content-Type"), b)
	}
	s := &stream{t: c.t, cancel: cancel, events: make(chan sseEvent, 1024), err: make(chan error, 1)}
	go func() {
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Type != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case line == ": heartbeat":
				s.beats.Add(1)
			case strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry:"):
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.Type = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.Data = json.RawMessage(line[6:])
			default:
				s.err <- fmt.Errorf("unexpected SSE line %q", line)
				return
			}
		}
		s.err <- fmt.Errorf("stream ended: %v", sc.Err())
	}()
	c.t.Cleanup(cancel)
	return s
}

// next returns the next event, failing the test after timeout.
func (s *stream) next(timeout time.Duration) sseEvent {
	s.t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case err := <-s.err:
		s.t.Fatalf("waiting for an event: %v", err)
	case <-time.After(timeout):
		s.t.Fatalf("no event within %v", timeout)
	}
	return sseEvent{}
}

// until returns the events up to and including the first of type typ.
func (s *stream) until(typ string, timeout time.Duration) []sseEvent {
	s.t.Helper()
	var evs []sseEvent
	deadline := time.Now().Add(timeout)
	for {
		ev := s.next(time.Until(deadline))
		evs = append(evs, ev)
		if ev.Type == typ {
			return evs
		}
	}
}

// heartbeats waits until each of ss has read n more heartbeat comments:
// they are still open, and the server wrote nothing else on them.
func heartbeats(t testing.TB, n int64, timeout time.Duration, ss ...*stream) {
	t.Helper()
	end := make([]int64, len(ss))
	for i, s := range ss {
		end[i] = s.beats.Load() + n
	}
	sandboxtest.Eventually(t, timeout, func() error {
		for i, s := range ss {
			select {
			case ev := <-s.events:
				t.Fatalf("stream %d: unexpected event %s %s %s", i, ev.ID, ev.Type, ev.Data)
			case err := <-s.err:
				t.Fatalf("stream %d ended: %v", i, err)
			default:
			}
			if got := s.beats.Load(); got < end[i] {
				return fmt.Errorf("stream %d: %d heartbeats, want %d", i, got, end[i])
			}
		}
		return nil
	})
}

func (s *stream) close() { s.cancel() }

// procStatus reads a kB field of /proc/PID/status, in bytes.
func procStatus(t testing.TB, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				t.Fatalf("%s %q: %v", field, v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// refuseInserts makes db refuse the rows of table that have kind (any
// row if kind is empty), with message, until the returned function lifts it: a trigger
// in the database's own dialect, for a test of what a failed write
// does.
func refuseInserts(t testing.TB, db *gorm.DB, table, kind, message string) (lift func()) {
	t.Helper()
	name := "test_refuse_" + table
	var create, drop []string
	if store.Backend(db) == store.BackendPostgres {
		when := ""
		if kind != "" {
			when = " WHEN (NEW.kind = '" + kind + "')"
		}
		create = []string{
			`CREATE FUNCTION ` + name + `() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '` + message + `'; END $$`,
			`CREATE TRIGGER ` + name + ` BEFORE INSERT ON ` + table + ` FOR EACH ROW` + when + ` EXECUTE FUNCTION ` + name + `()`,
		}
		drop = []string{`DROP TRIGGER ` + name + ` ON ` + table, `DROP FUNCTION ` + name + `()`}
	} else {
		when := ""
		if kind != "" {
			when = " WHEN NEW.kind = '" + kind + "'"
		}
		create = []string{`CREATE TRIGGER ` + name + ` BEFORE INSERT ON ` + table + when + ` BEGIN SELECT RAISE(ABORT, '` + message + `'); END`}
		drop = []string{`DROP TRIGGER ` + name}
	}
	exec := func(qs []string) {
		for _, q := range qs {
			if err := db.Exec(q).Error; err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	exec(create)
	return func() { exec(drop) }
}
