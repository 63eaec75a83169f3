package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/ldap/ldaptest"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

const pw = "correct horse battery"

// llm starts the scripted model and returns the YAML that points the
// server at it.
func llm(t testing.TB, steps ...llmtest.Step) string {
	t.Helper()
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: steps}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n", srv.URL())
}

// needSandbox fails (CI) or skips when this machine cannot sandbox.
func needSandbox(t *testing.T) {
	t.Helper()
	// The server (not this test binary) runs the sandboxes, with bwrap
	// from PATH.
	sandboxtest.RequireSandbox(t, func(context.Context) error {
		_, err := exec.LookPath("bwrap")
		return err
	})
}

func shellCall(cmd string) llmtest.Step {
	return llmtest.Step{Text: "Running it.", ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: fmt.Sprintf(`{"command":%q}`, cmd)}}}
}

type conversation struct {
	ID string `json:"id"`
}

func (c *client) newConversation() string {
	c.t.Helper()
	var conv conversation
	c.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "test"}, &conv)
	return conv.ID
}

func (c *client) send(conv, content string) string {
	c.t.Helper()
	var res struct {
		TurnID string `json:"turn_id"`
	}
	c.must(http.StatusAccepted, "POST", "/api/v1/conversations/"+conv+"/messages", map[string]string{"content": content}, &res)
	return res.TurnID
}

func approvalID(t *testing.T, ev sseEvent) string {
	t.Helper()
	var a agentcore.Approval
	if err := json.Unmarshal(eventData(t, ev), &a); err != nil || a.ID == "" {
		t.Fatalf("approval event %s: %v", ev.Data, err)
	}
	return a.ID
}

// replyText is the model's reply in evs: its text deltas joined.
func replyText(t *testing.T, evs []sseEvent) string {
	t.Helper()
	var out strings.Builder
	for _, ev := range evs {
		if ev.Type == agentcore.EventTextDelta {
			var d struct{ Text string }
			json.Unmarshal(eventData(t, ev), &d)
			out.WriteString(d.Text)
		}
	}
	return out.String()
}

// eventData is the data object of an SSE event's Event.
func eventData(t *testing.T, ev sseEvent) json.RawMessage {
	t.Helper()
	var e agentcore.Event
	if err := json.Unmarshal(ev.Data, &e); err != nil {
		t.Fatalf("event %s: %v", ev.Data, err)
	}
	if strconv.FormatInt(e.Seq, 10) != ev.ID || e.Type != ev.Type {
		t.Fatalf("SSE id/event %s/%s disagree with the data %s", ev.ID, ev.Type, ev.Data)
	}
	return e.Data
}

// The must-show: B's token on every conversation route with A's
// IDs answers 404 with the same body as an unknown ID, and changes
// nothing.
func TestOwnershipIs404(t *testing.T) {
	in := newInstance(t, llm(t, shellCall("echo hi")))
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a, b := p.login("alice", pw), p.login("bob", pw)

	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "say hi")
	evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
	aid := approvalID(t, evs[len(evs)-1])

	routes := func(conv, aid string) [][3]string {
		c := "/api/v1/conversations/" + conv
		return [][3]string{
			{"GET", c, ""},
			{"PATCH", c, `{"title":"taken over"}`},
			{"DELETE", c, ""},
			{"POST", c + "/messages", `{"content":"hello"}`},
			{"POST", c + "/cancel", ""},
			{"GET", c + "/events", ""},
			{"GET", c + "/approvals", ""},
			{"POST", c + "/approvals/" + aid, `{"decision":"approve"}`},
			{"GET", c + "/workspace/diff", ""},
			{"GET", c + "/workspace/files?path=", ""},
		}
	}
	var want []byte
	for _, probe := range []struct {
		who  *client
		conv string
		aid  string
	}{
		{b, conv, aid}, // B with A's IDs
		{b, "conv_000000000000000000000000", aid},      // an unknown conversation
		{b, "conv_000000000000000000000000", "appr_x"}, // nothing known at all
		{a, conv, "appr_000000000000000000000000"},     // A's conversation, unknown approval
	} {
		for _, r := range routes(probe.conv, probe.aid) {
			if probe.who == a && !strings.Contains(r[1], "/approvals/") {
				continue // only the unknown approval is a 404 for the owner
			}
			var body any
			if r[2] != "" {
				body = r[2]
			}
			status, got, _ := probe.who.do(r[0], r[1], body)
			if status != http.StatusNotFound {
				t.Errorf("%s %s: status %d, want 404: %s", r[0], r[1], status, got)
			}
			if want == nil {
				want = got
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s %s: body %s differs from %s", r[0], r[1], got, want)
			}
		}
	}
	// Nothing B did touched A's conversation: the approval still waits.
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv, nil, nil)
	var list struct{ Approvals []agentcore.Approval }
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/approvals?status=pending", nil, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].ID != aid {
		t.Fatalf("A's pending approvals after B's attempts: %+v", list.Approvals)
	}
	var convs struct{ Conversations []conversation }
	b.must(http.StatusOK, "GET", "/api/v1/conversations", nil, &convs)
	if len(convs.Conversations) != 0 {
		t.Fatalf("B lists A's conversations: %+v", convs)
	}
}

// Forged tokens get the same 401 as no token.
func TestForgedTokensAre401(t *testing.T) {
	in := newInstance(t, "")
	u := in.addUser("alice", pw, false)
	p := in.start()
	good := p.login("alice", pw).token

	b64 := base64.RawURLEncoding.EncodeToString
	sign := func(key, header, payload string) string {
		msg := b64([]byte(header)) + "." + b64([]byte(payload))
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte(msg))
		return msg + "." + b64(m.Sum(nil))
	}
	exp := time.Now().Add(time.Hour).Unix()
	claims := fmt.Sprintf(`{"sub":%q,"name":"alice","role":"admin","iss":"codumentor","iat":%d,"exp":%d}`, u.ID, time.Now().Unix(), exp)
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	tampered := parts[0] + "." + b64(bytes.Replace(payload, []byte(`"user"`), []byte(`"admin"`), 1)) + "." + parts[2]
	cases := map[string]string{
		"none":        b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64([]byte(claims)) + ".",
		"wrong key":   sign("another-secret-0123456789-abcdefghijklmnop", `{"alg":"HS256","typ":"JWT"}`, claims),
		"expired":     sign(testSecret, `{"alg":"HS256","typ":"JWT"}`, strings.Replace(claims, strconv.FormatInt(exp, 10), strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10), 1)),
		"tampered":    tampered,
		"garbage":     "not.a.token",
		"empty":       "",
		"signature 0": parts[0] + "." + parts[1] + "." + b64(make([]byte, 32)),
	}
	_, want, _ := p.anon().do("GET", "/api/v1/me", nil)
	for name, tok := range cases {
		status, body, _ := p.anon().with(tok).do("GET", "/api/v1/me", nil)
		if status != http.StatusUnauthorized || !bytes.Equal(body, want) {
			t.Errorf("%s: %d %s, want 401 %s", name, status, body, want)
		}
	}
	var me struct{ Name, Role string }
	p.anon().with(good).must(http.StatusOK, "GET", "/api/v1/me", nil, &me)
	if me.Name != "alice" || me.Role != "user" {
		t.Fatalf("me = %+v", me)
	}
}

func TestLDAPLogin(t *testing.T) {
	dir := ldaptest.Start(t)
	dir.AddUser(t, "carol", "ldap password 1", "Carol Example", "carol@example.org")
	in := newInstance(t, fmt.Sprintf("  ldap:\n    url: %s\n    bind_dn: uid={username},%s\n", dir.URL, dir.PeopleDN))
	p := in.start()
	c := p.login("carol", "ldap password 1")
	var me struct{ Name, Source, Email, Role string }
	c.must(http.StatusOK, "GET", "/api/v1/me", nil, &me)
	if me.Name != "carol" || me.Source != "ldap" || me.Email != "carol@example.org" || me.Role != "user" {
		t.Fatalf("me = %+v", me)
	}
	c.newConversation()
	status, body, _ := p.anon().do("POST", "/api/v1/auth/login", map[string]string{"username": "carol", "password": "wrong password"})
	if status != http.StatusUnauthorized {
		t.Fatalf("wrong LDAP password: %d %s", status, body)
	}
	// The web UI's sign-in form binds to the directory the same way.
	signIn := func(password string) *http.Response {
		t.Helper()
		form := url.Values{"username": {"carol"}, "password": {password}, "next": {"/"}}
		req, _ := http.NewRequest("POST", p.URL+"/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", p.URL)
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := signIn("wrong password"); res.StatusCode == http.StatusSeeOther || res.Header.Get("Set-Cookie") != "" {
		t.Fatalf("web sign-in with a wrong LDAP password: %d, cookie %q", res.StatusCode, res.Header.Get("Set-Cookie"))
	}
	res := signIn("ldap password 1")
	cookie, _, _ := strings.Cut(res.Header.Get("Set-Cookie"), ";")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(cookie, "codumentor_session=") {
		t.Fatalf("web sign-in of an LDAP user: %d, cookie %q", res.StatusCode, res.Header.Get("Set-Cookie"))
	}
	req, _ := http.NewRequest("GET", p.URL+"/api/v1/me", nil)
	req.Header.Set("Cookie", cookie)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(res.Body).Decode(&me)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || me.Name != "carol" || me.Source != "ldap" {
		t.Fatalf("GET /api/v1/me with the LDAP user's cookie: %d %+v", res.StatusCode, me)
	}
}

func TestLoginRateLimit(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("alice", pw, false)
	p := in.start()
	var last int
	var hdr http.Header
	for i := 0; i < 40 && last != http.StatusTooManyRequests; i++ {
		last, _, hdr = p.anon().do("POST", "/api/v1/auth/login", map[string]string{"username": "alice", "password": "wrong guess"})
	}
	if last != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("repeated failed logins: last status %d, Retry-After %q", last, hdr.Get("Retry-After"))
	}
	// Even the right password waits now, but only for a while: the
	// failures slow the name's logins down rather than lock it out.
	status, body, hdr := p.anon().do("POST", "/api/v1/auth/login", map[string]string{"username": "alice", "password": pw})
	if status != http.StatusTooManyRequests {
		t.Fatalf("login while limited: %d %s", status, body)
	}
	wait, err := strconv.Atoi(hdr.Get("Retry-After"))
	if err != nil || wait < 1 || wait > 5 {
		t.Fatalf("Retry-After %q after %d failures, want 1 to 5 s", hdr.Get("Retry-After"), 10)
	}
	time.Sleep(time.Duration(wait) * time.Second)
	p.login("alice", pw)
}

func TestAdminUsers(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	admin, alice := p.login("root", pw), p.login("alice", pw)
	if status, body, _ := alice.do("GET", "/api/v1/admin/users", nil); status != http.StatusForbidden {
		t.Fatalf("non-admin lists users: %d %s", status, body)
	}
	admin.must(http.StatusCreated, "POST", "/api/v1/admin/users", map[string]any{"name": "dave", "password": pw}, nil)
	admin.must(http.StatusConflict, "POST", "/api/v1/admin/users", map[string]any{"name": "dave", "password": pw}, nil)
	admin.must(http.StatusBadRequest, "POST", "/api/v1/admin/users", map[string]any{"name": "Bad Name", "password": pw}, nil)
	admin.must(http.StatusBadRequest, "POST", "/api/v1/admin/users", map[string]any{"name": "eve", "password": "short"}, nil)
	admin.must(http.StatusBadRequest, "POST", "/api/v1/admin/users", `{"name":"eve","pasword":"typo in the key"}`, nil)
	var list struct{ Users []struct{ Name string } }
	admin.must(http.StatusOK, "GET", "/api/v1/admin/users", nil, &list)
	if len(list.Users) != 3 {
		t.Fatalf("users: %+v", list.Users)
	}
	p.login("dave", pw)
}

// The must-show turn: a shell command approved over HTTP runs in
// the sandbox; SSE reconnects with Last-Event-ID receive exactly what
// they missed, also after a restart.
func TestApprovedTurnOverSSE(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, llm(t,
		shellCall("echo hello > greeting.txt && cat greeting.txt"),
		llmtest.Step{Expect: "hello", Text: "greeting.txt says hello."},
	))
	in.args = []string{"--sse-heartbeat", "100ms"} // what follows a replay is awaited
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "write a greeting")
	evs := s.until(agentcore.EventApprovalPending, 30*time.Second)
	aid := approvalID(t, evs[len(evs)-1])
	// Nothing has run before the decision.
	if b := a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/diff", nil, nil); len(b) != 0 {
		t.Fatalf("diff before approval: %s", b)
	}
	var decided agentcore.Approval
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+aid, map[string]string{"decision": "approve"}, &decided)
	if decided.Status != agentcore.ApprovalDecided || decided.Decision != agentcore.DecisionApprove {
		t.Fatalf("decided approval: %+v", decided)
	}
	a.must(http.StatusConflict, "POST", "/api/v1/conversations/"+conv+"/approvals/"+aid, map[string]string{"decision": "approve"}, nil)
	// The decision has one name for "allow from now on": always_allow, as stored and returned.
	a.must(http.StatusConflict, "POST", "/api/v1/conversations/"+conv+"/approvals/"+aid, map[string]string{"decision": "always_allow"}, nil)
	a.must(http.StatusBadRequest, "POST", "/api/v1/conversations/"+conv+"/approvals/"+aid, map[string]string{"decision": "always"}, nil)
	evs = append(evs, s.until(agentcore.EventTurnFinished, 60*time.Second)...)
	s.close()
	var sawOutput bool
	for i, ev := range evs {
		if ev.ID != strconv.Itoa(i+1) {
			t.Fatalf("event %d has id %s: %+v", i, ev.ID, evs)
		}
		if ev.Type == agentcore.EventToolOutput && strings.Contains(string(eventData(t, ev)), "hello") {
			sawOutput = true
		}
	}
	if !sawOutput {
		t.Fatalf("no tool_output with the command's output in %+v", evs)
	}

	diff := string(a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/diff", nil, nil))
	if !strings.Contains(diff, "+++ b/greeting.txt") || !strings.Contains(diff, "+hello") {
		t.Fatalf("diff:\n%s", diff)
	}
	// The patch is streamed, not built in memory first: no Content-Length.
	if _, _, h := a.do("GET", "/api/v1/conversations/"+conv+"/workspace/diff", nil); h.Get("Content-Length") != "" {
		t.Errorf("diff sent with Content-Length %s; want it streamed", h.Get("Content-Length"))
	}
	a.must(http.StatusBadRequest, "GET", "/api/v1/conversations/"+conv+"/workspace/files?path=&cursor=!", nil, nil)
	if got := a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/files?path=greeting.txt", nil, nil); string(got) != "hello\n" {
		t.Fatalf("file: %q", got)
	}
	// A path that does not exist is 404 not_found (documented for the route).
	if b := a.must(http.StatusNotFound, "GET", "/api/v1/conversations/"+conv+"/workspace/files?path=no-such-file.txt", nil, nil); !strings.Contains(string(b), `"not_found"`) {
		t.Errorf("missing file: %s", b)
	}
	var dir agentcore.WorkspaceFile
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/files?path=", nil, &dir)
	if !dir.Dir || len(dir.Entries) != 1 || dir.Entries[0].Name != "greeting.txt" {
		t.Fatalf("root listing: %+v", dir)
	}
	for _, bad := range []string{"../instance", "/etc/passwd", "a/../../x"} {
		a.must(http.StatusBadRequest, "GET", "/api/v1/conversations/"+conv+"/workspace/files?path="+bad, nil, nil)
	}

	// Reconnect after the 3rd event: exactly the rest.
	resume := func(c *client, want []sseEvent) {
		t.Helper()
		s := c.follow(conv, "3")
		defer s.close()
		for _, w := range want[3:] {
			got := s.next(10 * time.Second)
			if got.ID != w.ID || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) {
				t.Fatalf("replayed %s %s %s, want %s %s %s", got.ID, got.Type, got.Data, w.ID, w.Type, w.Data)
			}
		}
		// Nothing more: the server writes only heartbeats after them.
		heartbeats(t, 2, 10*time.Second, s)
	}
	resume(a, evs)
	p.stop()
	p = in.start()
	resume(p.login("alice", pw), evs)
	// ?after= is the same as Last-Event-ID.
	_, body, _ := p.login("alice", pw).do("GET", "/api/v1/conversations/"+conv+"/events?after=bad", nil)
	if !strings.Contains(string(body), "bad_request") {
		t.Fatalf("bad after: %s", body)
	}
}

// codumentor api --instance with a relative path resolves it once at
// start: a command runs in its sandbox (whose binds need absolute paths)
// as with an absolute one.
func TestRelativeInstance(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, llm(t,
		shellCall("echo relative > r.txt && cat r.txt"),
		llmtest.Step{Expect: "relative", Text: "done"},
	))
	in.cwd = filepath.Dir(in.dir)
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	defer s.close()
	a.send(conv, "write it")
	evs := s.until(agentcore.EventApprovalPending, 60*time.Second)
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv+"/approvals/"+approvalID(t, evs[len(evs)-1]), map[string]string{"decision": "approve"}, nil)
	evs = s.until(agentcore.EventTurnFinished, 2*time.Minute)
	for _, ev := range evs {
		if (ev.Type == agentcore.EventToolOutput || ev.Type == agentcore.EventToolFinished) && strings.Contains(string(eventData(t, ev)), "must be an absolute path") {
			t.Fatalf("the command failed: %s", ev.Data)
		}
	}
	if got := a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/workspace/files?path=r.txt", nil, nil); string(got) != "relative\n" {
		t.Fatalf("r.txt: %q; events %+v", got, evs)
	}
}

// kill -9 in the middle of a turn: every event a client received is
// still there after a restart, the turn is marked failed with a reason,
// and the conversation goes on.
func TestKillMidTurn(t *testing.T) {
	in := newInstance(t, llm(t,
		shellCall("sleep 1"),
		llmtest.Step{Text: "The last command was interrupted; carrying on."},
	))
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "run something")
	received := s.until(agentcore.EventApprovalPending, 30*time.Second)
	p.kill()

	p = in.start()
	a = p.login("alice", pw)
	s = a.follow(conv, "")
	for _, w := range received {
		got := s.next(10 * time.Second)
		if got.ID != w.ID || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) {
			t.Fatalf("after the restart %s %s %s, want %s %s %s", got.ID, got.Type, got.Data, w.ID, w.Type, w.Data)
		}
	}
	rest := s.until(agentcore.EventTurnFailed, 10*time.Second)
	if !strings.Contains(string(eventData(t, rest[len(rest)-1])), "interrupted") {
		t.Fatalf("turn_failed without the reason: %s", rest[len(rest)-1].Data)
	}
	var approvals struct{ Approvals []agentcore.Approval }
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/approvals?status=pending", nil, &approvals)
	if len(approvals.Approvals) != 0 {
		t.Fatalf("approvals still pending after the restart: %+v", approvals.Approvals)
	}
	a.send(conv, "go on")
	s.until(agentcore.EventTurnFinished, 30*time.Second)
}

// The must-show for secrets: stored encrypted, used by a command, never
// returned; rotation while the server runs keeps them readable.
func TestSecrets(t *testing.T) {
	needSandbox(t)
	const value = "s3cr3t-canary-7f1c2a9e"
	sum := sha256.Sum256([]byte(value))
	in := newInstance(t, llm(t,
		shellCall("printf %s {{secret:API_TOKEN}} | sha256sum"),
		llmtest.Step{Expect: hex.EncodeToString(sum[:]), Text: "hashed"},
		shellCall("printf %s {{secret:API_TOKEN}} | sha256sum"),
		llmtest.Step{Expect: hex.EncodeToString(sum[:]), Text: "hashed again"},
	)+"sandbox:\n  shell_always_allow: true\n")
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	a.must(http.StatusBadRequest, "PUT", "/api/v1/secrets/bad-name", map[string]string{"value": "x"}, nil)
	a.must(http.StatusBadRequest, "PUT", "/api/v1/secrets/EMPTY", map[string]string{"value": ""}, nil)
	a.must(http.StatusOK, "PUT", "/api/v1/secrets/API_TOKEN", map[string]string{"value": value}, nil)
	for _, path := range []string{"/api/v1/secrets", "/api/v1/secrets/API_TOKEN"} {
		if b := a.must(http.StatusOK, "GET", path, nil, nil); bytes.Contains(b, []byte(value)) || !bytes.Contains(b, []byte("API_TOKEN")) {
			t.Fatalf("GET %s: %s", path, b)
		}
	}
	p.login("bob", pw).must(http.StatusNotFound, "GET", "/api/v1/secrets/API_TOKEN", nil, nil)

	turn := func(c *client, conv string) {
		t.Helper()
		s := c.follow(conv, "")
		defer s.close()
		c.send(conv, "hash my token")
		evs := s.until(agentcore.EventTurnFinished, 60*time.Second)
		for _, ev := range evs {
			if bytes.Contains(ev.Data, []byte(value)) {
				t.Fatalf("the secret's value is in event %s", ev.Data)
			}
		}
	}
	conv := a.newConversation()
	turn(a, conv)

	// The database files never hold the value.
	grepDB := func() {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(in.config().DataDir(), "*"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(value)) {
				t.Fatalf("%s holds the secret's value in plaintext", f)
			}
		}
	}
	grepDB()
	keyOf := func(c *client) string {
		var m struct {
			KeyID string `json:"key_id"`
		}
		c.must(http.StatusOK, "GET", "/api/v1/secrets/API_TOKEN", nil, &m)
		return m.KeyID
	}
	oldKey := keyOf(a)

	// Rotate while the server runs (what codumentorctl secrets rotate
	// does), wait for the reload, and use the secret again.
	if _, err := config.RotateSecret(in.config().ConfigFile(), config.NewSecret()); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(p.stderr.String(), "auth secrets reloaded") {
			return fmt.Errorf("the server did not reload the rotated secret:\n%s", p.stderr)
		}
		return nil
	})
	a.must(http.StatusOK, "GET", "/api/v1/me", nil, nil) // a token of the old secret still verifies
	a = p.login("alice", pw)
	turn(a, a.newConversation())
	if newKey := keyOf(a); newKey == oldKey || newKey == "" {
		t.Fatalf("the secret was not re-encrypted on use: key %q before and after", oldKey)
	}
	grepDB()
	// And after a restart, with the rotated config only.
	p.stop()
	p = in.start()
	turn(p.login("alice", pw), conv)
}

func TestReadyzWithoutSandbox(t *testing.T) {
	in := newInstance(t, llm(t, shellCall("echo hi"))+"sandbox:\n  bwrap: /nonexistent/bwrap\n  shell_always_allow: true\n")
	in.addUser("alice", pw, false)
	in.addUser("root", pw, true)
	p := in.start()
	// Anyone learns that the server is not ready and which check fails;
	// only an admin sees the details (paths, versions).
	var r struct {
		Ready   bool
		Failing []string
	}
	status, body, _ := p.anon().do("GET", "/readyz", nil)
	if json.Unmarshal(body, &r); status != http.StatusServiceUnavailable || r.Ready || !slices.Contains(r.Failing, "sandbox/bwrap") || strings.Contains(string(body), "/nonexistent") || strings.Contains(string(body), in.dir) {
		t.Fatalf("readyz without bwrap: %d %s", status, body)
	}
	a := p.login("alice", pw)
	a.must(http.StatusForbidden, "GET", "/api/v1/admin/doctor", nil, nil)
	if b := p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/admin/doctor", nil, nil); !strings.Contains(string(b), "/nonexistent/bwrap") {
		t.Fatalf("doctor without bwrap: %s", b)
	}
	// The shell tool fails closed.
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "say hi")
	s.until(agentcore.EventSandboxUnavailable, 30*time.Second)
}

func TestReadyz(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, "")
	in.addUser("root", pw, true)
	p := in.start()
	if b := string(p.anon().must(http.StatusOK, "GET", "/readyz", nil, nil)); b != `{"failing":[],"ready":true}` {
		t.Fatalf("readyz: %s", b)
	}
	var r struct {
		Ready    bool
		Checks   []struct{ Name, Detail string }
		Warnings []string
	}
	p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/admin/doctor", nil, &r)
	if !r.Ready || len(r.Checks) < 5 || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "llm.base_url") {
		t.Fatalf("doctor: %+v", r)
	}
	p.anon().must(http.StatusOK, "GET", "/healthz", nil, nil)
	metrics := string(p.anon().must(http.StatusOK, "GET", "/metrics", nil, nil))
	if !strings.Contains(metrics, `codumentor_http_requests_total{method="GET",route="/readyz",status="200"} 1`) {
		t.Fatalf("metrics:\n%s", metrics)
	}
	// Neither public endpoint shows what the doctor knows.
	for _, c := range r.Checks {
		if c.Detail != "" && strings.Contains(metrics, c.Detail) {
			t.Errorf("/metrics shows check %s's detail %q", c.Name, c.Detail)
		}
	}
	for _, secret := range []string{in.dir, "bwrap", "sqlite"} {
		if strings.Contains(metrics, secret) {
			t.Errorf("/metrics shows %q", secret)
		}
	}
}

func TestStartRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		prepare    func(in *instance)
		args       []string
		want       string
	}{
		{name: "public address", args: []string{"--listen", "0.0.0.0:0"}, want: "--insecure-listen"},
		{name: "loose mode", prepare: func(in *instance) { os.Chmod(in.dir, 0o755) }, want: "chmod 0700"},
		{name: "unknown key", yaml: "sandbox:\n  sekcomp: enforce\n", want: "sekcomp"},
		{name: "short secret", prepare: func(in *instance) {
			os.WriteFile(in.config().ConfigFile(), []byte("auth:\n  jwt_secret: short\n"), 0o600)
		}, want: "too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInstance(t, tc.yaml)
			if tc.prepare != nil {
				tc.prepare(in)
			}
			args := append([]string{"api", "--instance", in.dir}, tc.args...)
			if len(tc.args) == 0 {
				args = append(args, "--listen", "127.0.0.1:0")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("codumentor %v: %v, output %q; want a failure mentioning %q", args, err, out, tc.want)
			}
		})
	}
}

// The scheduled workspace GC runs and its job is visible to admins only.
func TestWorkspaceGCJob(t *testing.T) {
	in := newInstance(t, "sandbox:\n  gc_interval: 1s\n")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	var id string
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		db := in.openDB()
		db.Raw("SELECT id FROM jobs WHERE kind = ? AND status = ?", "workspace_gc", "succeeded").Scan(&id)
		store.Close(db)
		if id == "" {
			return fmt.Errorf("no workspace_gc job succeeded:\n%s", p.stderr)
		}
		return nil
	})
	var j struct{ Kind, Status string }
	p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/jobs/"+id, nil, &j)
	if j.Kind != "workspace_gc" || j.Status != "succeeded" {
		t.Fatalf("job: %+v", j)
	}
	p.login("alice", pw).must(http.StatusNotFound, "GET", "/api/v1/jobs/"+id, nil, nil)
}

// An idle event stream carries heartbeat comments; Run returns when its
// context ends. In-process, to set the heartbeat interval.
func TestHeartbeatInProcess(t *testing.T) {
	in := newInstance(t, "plugins: []\n")
	in.addUser("alice", pw, false)
	out := &sandboxtest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		done <- daemon.Run(ctx, daemon.Options{Instance: in.dir, Listen: "127.0.0.1:0", Stderr: out, Heartbeat: 50 * time.Millisecond})
		close(exited)
	}()
	url, err := waitListening(out, exited)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, URL: url}
	c := p.login("alice", pw)
	conv := c.newConversation()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/v1/conversations/"+conv+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	beats := 0
	for beats < 2 && sc.Scan() {
		if sc.Text() == ": heartbeat" {
			beats++
		}
	}
	if beats < 2 {
		t.Fatalf("no heartbeats: %v", sc.Err())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !strings.Contains(out.String(), "no shell or file tools") {
		t.Errorf("without the workspace_isolation plugin the log should say the agent has no tools:\n%s", out)
	}
}
