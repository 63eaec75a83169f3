package daemon_test

import (
	"bytes"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// convView is a conversation as the API shows it.
type convView struct {
	ID           string `json:"id"`
	Title        string `json:"title"`
	ModelProfile string `json:"model_profile"`
}

// turnUntil sends content to conv and returns the turn's events up to
// the first of type end.
func (c *client) turnUntil(conv, content, end string) []sseEvent {
	c.t.Helper()
	var before struct {
		LastSeq int64 `json:"last_seq"`
	}
	c.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv, nil, &before)
	s := c.follow(conv, strconv.FormatInt(before.LastSeq, 10))
	defer s.close()
	c.send(conv, content)
	return s.until(end, 30*time.Second)
}

// PATCH …/conversations/{id} {title}: the owner renames, anyone else
// gets the 404 of an unknown ID, and a bad title is refused with 400
// and changes nothing.
func TestRenameConversation(t *testing.T) {
	in := newInstance(t, llm(t, llmtest.Step{Text: "ok"}))
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a, b := p.login("alice", pw), p.login("bob", pw)

	var conv convView
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "original"}, &conv)
	path := "/api/v1/conversations/" + conv.ID
	var got convView
	a.must(http.StatusOK, "PATCH", path, map[string]string{"title": "  Fixing the login bug \t"}, &got)
	if got.ID != conv.ID || got.Title != "Fixing the login bug" {
		t.Fatalf("PATCH title: %+v", got)
	}
	title := func() string {
		t.Helper()
		var c convView
		a.must(http.StatusOK, "GET", path, nil, &c)
		return c.Title
	}
	if got := title(); got != "Fixing the login bug" {
		t.Fatalf("GET after the rename: title %q", got)
	}
	long := strings.Repeat("é", 100) // 200 bytes: the limit
	a.must(http.StatusOK, "PATCH", path, map[string]string{"title": long}, nil)
	if got := title(); got != long {
		t.Fatalf("200-byte title: %q", got)
	}
	a.must(http.StatusOK, "PATCH", path, map[string]string{"title": "Fixing the login bug"}, nil)

	// Another user's ID answers exactly as an unknown one, and changes
	// nothing.
	st, unknown, _ := b.do("PATCH", "/api/v1/conversations/conv_000000000000000000000000", map[string]string{"title": "x"})
	if st != http.StatusNotFound {
		t.Fatalf("PATCH of an unknown conversation: %d %s", st, unknown)
	}
	for _, body := range []string{`{"title":"taken over"}`, `{"model_profile":""}`} {
		st, res, _ := b.do("PATCH", path, body)
		if st != http.StatusNotFound || !bytes.Equal(res, unknown) {
			t.Errorf("bob's PATCH %s of alice's conversation: %d %s; want the unknown ID's 404 %s", body, st, res, unknown)
		}
	}

	for _, body := range []string{
		`{"title":""}`,
		`{"title":"   "}`,
		`{"title":"` + long + `x"}`,
		`{"title":"two\nlines"}`,
		`{"title":"red \u001b[31malert"}`,
		`{"title":"nul\u0000byte"}`,
		`{"title":"txt.exe\u202egnp"}`,
		`{"title":"zero\u200bwidth"}`,
		`{"title":"bom\ufeff"}`,
		"{\"title\":\"bad \xff utf-8\"}",
		`{"title":5}`,
		`{}`,
		`{"name":"unknown field"}`,
		`not json`,
	} {
		st, res, _ := a.do("PATCH", path, body)
		if st != http.StatusBadRequest || apiErrorCode(t, res) != "bad_request" {
			t.Errorf("PATCH %q: %d %s; want 400 bad_request", body, st, res)
		}
	}
	if got := title(); got != "Fixing the login bug" {
		t.Fatalf("title after refused changes: %q", got)
	}
	var list struct{ Conversations []convView }
	a.must(http.StatusOK, "GET", "/api/v1/conversations", nil, &list)
	if len(list.Conversations) != 1 || list.Conversations[0].Title != "Fixing the login bug" {
		t.Fatalf("list after the rename: %+v", list.Conversations)
	}
}

// A conversation created without a title is named from its first
// message: the first line with text, cut on a word boundary, without
// invisible characters or a secret's value; a title its owner gave, at
// creation or later, is never replaced.
func TestProposedTitle(t *testing.T) {
	const secret = "hunter2-canary-0b7e"
	in := newInstance(t, llm(t, llmtest.Step{Text: "one"}, llmtest.Step{Text: "two"}))
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	a.must(http.StatusOK, "PUT", "/api/v1/secrets/DEPLOY_TOKEN", map[string]string{"value": secret}, nil)

	get := func(id string) convView {
		t.Helper()
		var c convView
		a.must(http.StatusOK, "GET", "/api/v1/conversations/"+id, nil, &c)
		return c
	}
	create := func(title string) string {
		t.Helper()
		var c convView
		body := map[string]string{}
		if title != "" {
			body["title"] = title
		}
		a.must(http.StatusCreated, "POST", "/api/v1/conversations", body, &c)
		if c.Title != title {
			t.Fatalf("created with title %q: %+v", title, c)
		}
		return c.ID
	}

	untitled := create("")
	first := "\n   \n  Fix the flaky\u200b login\ttest in auth/login.go: it fails on CI every other run when the LDAP server is slow\nSecond line, not in the title."
	a.turnUntil(untitled, first, agentcore.EventTurnFinished)
	want := "Fix the flaky login test in auth/login.go: it fails on CI every other run…"
	if got := get(untitled).Title; got != want {
		t.Fatalf("proposed title %q (%d bytes), want %q", got, len(got), want)
	}
	// The next message does not rename it.
	a.turnUntil(untitled, "And the other test too", agentcore.EventTurnFinished)
	if got := get(untitled).Title; got != want {
		t.Fatalf("title after the second message: %q", got)
	}

	// Renamed before its first message: the owner's title stays.
	renamed := create("")
	a.must(http.StatusOK, "PATCH", "/api/v1/conversations/"+renamed, map[string]string{"title": "Mine"}, nil)
	a.turnUntil(renamed, "Something else entirely", agentcore.EventTurnFinished)
	if got := get(renamed).Title; got != "Mine" {
		t.Fatalf("title set before the first message became %q", got)
	}
	titled := create("Given at creation")
	a.turnUntil(titled, "Something else entirely", agentcore.EventTurnFinished)
	if got := get(titled).Title; got != "Given at creation" {
		t.Fatalf("title given at creation became %q", got)
	}

	// A secret's value in the first message is redacted before the
	// title is taken from it; one word longer than the bound is cut on
	// a rune.
	withSecret := create("")
	a.turnUntil(withSecret, "deploy with "+secret+" now", agentcore.EventTurnFinished)
	if got := get(withSecret).Title; got == "" || strings.Contains(got, secret) || !strings.HasPrefix(got, "deploy with ") {
		t.Fatalf("title from a message with a secret: %q", got)
	}
	oneWord := create("")
	a.turnUntil(oneWord, strings.Repeat("ü", 60), agentcore.EventTurnFinished)
	if got := get(oneWord).Title; got != strings.Repeat("ü", 38)+"…" {
		t.Fatalf("title from one long word: %q (%d bytes)", got, len(got))
	}
}

// PATCH …/conversations/{id} {model_profile}: checked as at creation
// (one of the caller's profiles, its endpoint in llm.allowed_endpoints),
// used from the next turn on, and refused while a turn runs.
func TestChangeModelProfile(t *testing.T) {
	const key = "sk-change-CANARY-8e2f"
	def, err := llmtest.StartServer(&llmtest.Script{
		Steps:    []llmtest.Step{{Text: "default 0"}, {Text: "default 1"}, {Text: "default 2"}},
		Branches: []llmtest.Branch{{Match: "hold", Steps: []llmtest.Step{shellCall("echo hi")}}},
	}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(def.Close)
	prof, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "profile 0"}, {Text: "profile 1"}, {Text: "profile 2"}}}, llmtest.Options{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prof.Close)
	other, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "elsewhere"}}}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)

	in := newInstance(t, "llm:\n  base_url: "+def.URL()+"\n  model: test\n  allowed_endpoints: ["+prof.URL()+"]\n")
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a, b := p.login("alice", pw), p.login("bob", pw)
	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": prof.URL(), "model": "m", "api_key": key}, nil)
	b.must(http.StatusOK, "PUT", "/api/v1/model-profiles/bobs", map[string]string{"endpoint": prof.URL(), "model": "m", "api_key": key}, nil)

	conv := a.newConversation()
	path := "/api/v1/conversations/" + conv
	profile := func() string {
		t.Helper()
		var c convView
		a.must(http.StatusOK, "GET", path, nil, &c)
		return c.ModelProfile
	}
	if got := replyText(t, a.turnUntil(conv, "hello", agentcore.EventTurnFinished)); got != "default 0" {
		t.Fatalf("first turn: %q", got)
	}

	// Refused as at creation: a profile the caller has not got (also
	// another user's).
	for _, name := range []string{"nope", "bobs", "Bad Name"} {
		st, res, _ := a.do("PATCH", path, map[string]string{"model_profile": name})
		if st != http.StatusBadRequest || apiErrorCode(t, res) != "bad_request" {
			t.Errorf("PATCH model_profile %q: %d %s; want 400 bad_request", name, st, res)
		}
	}
	if got := profile(); got != "" {
		t.Fatalf("model_profile after refused changes: %q", got)
	}

	var got convView
	a.must(http.StatusOK, "PATCH", path, map[string]string{"model_profile": "work"}, &got)
	if got.ModelProfile != "work" || got.Title != "test" {
		t.Fatalf("PATCH model_profile: %+v", got)
	}
	if got := replyText(t, a.turnUntil(conv, "again", agentcore.EventTurnFinished)); got != "profile 1" {
		t.Fatalf("turn after the change to the profile: %q", got)
	}
	if n, m := len(prof.Requests()), len(def.Requests()); n != 1 || m != 1 {
		t.Fatalf("after the change: %d requests at the profile's endpoint, %d at the default; want 1, 1", n, m)
	}
	// Back to the server's own model.
	got = convView{} // model_profile "" is left out
	a.must(http.StatusOK, "PATCH", path, map[string]string{"model_profile": ""}, &got)
	if got.ModelProfile != "" {
		t.Fatalf("PATCH model_profile \"\": %+v", got)
	}
	if got := replyText(t, a.turnUntil(conv, "once more", agentcore.EventTurnFinished)); got != "default 2" {
		t.Fatalf("turn after the change back: %q", got)
	}

	// While a turn runs (it waits for an approval) the profile stays;
	// a rename is fine.
	busy := a.newConversation()
	s := a.follow(busy, "")
	a.send(busy, "hold on")
	s.until(agentcore.EventApprovalPending, 30*time.Second)
	st, res, _ := a.do("PATCH", "/api/v1/conversations/"+busy, map[string]string{"model_profile": "work"})
	if st != http.StatusConflict || apiErrorCode(t, res) != "turn_in_progress" {
		t.Fatalf("PATCH model_profile during a turn: %d %s; want 409 turn_in_progress", st, res)
	}
	st, res, _ = a.do("PATCH", "/api/v1/conversations/"+busy, map[string]string{"title": "renamed meanwhile", "model_profile": "work"})
	if st != http.StatusConflict {
		t.Fatalf("PATCH title and model_profile during a turn: %d %s; want 409", st, res)
	}
	got = convView{}
	a.must(http.StatusOK, "PATCH", "/api/v1/conversations/"+busy, map[string]string{"title": "renamed meanwhile", "model_profile": ""}, &got)
	if got.Title != "renamed meanwhile" || got.ModelProfile != "" {
		t.Fatalf("rename during a turn: %+v", got)
	}
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+busy+"/cancel", nil, nil)
	s.until(agentcore.EventTurnCancelled, 30*time.Second)
	s.close()
	a.must(http.StatusOK, "PATCH", "/api/v1/conversations/"+busy, map[string]string{"model_profile": "work"}, &got)
	if got.ModelProfile != "work" {
		t.Fatalf("PATCH model_profile after the turn: %+v", got)
	}

	// The operator takes the profile's endpoint off the list: the
	// conversation cannot be moved onto the profile.
	p.stop()
	cfgFile := in.config().ConfigFile()
	yaml, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(yaml, []byte(prof.URL())) {
		t.Fatalf("%s does not list %s:\n%s", cfgFile, prof.URL(), yaml)
	}
	if err := os.WriteFile(cfgFile, bytes.Replace(yaml, []byte(prof.URL()), []byte(other.URL()), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	p = in.start()
	defer p.stop()
	a = p.login("alice", pw)
	st, res, _ = a.do("PATCH", path, map[string]string{"model_profile": "work"})
	if st != http.StatusBadRequest || apiErrorCode(t, res) != "endpoint_not_allowed" || bytes.Contains(res, []byte(key)) {
		t.Fatalf("PATCH onto a profile whose endpoint is not allowed: %d %s; want 400 endpoint_not_allowed", st, res)
	}
	if got := profile(); got != "" {
		t.Fatalf("model_profile after the refused change: %q", got)
	}
	if n := len(other.Requests()); n != 0 {
		t.Fatalf("%d requests reached an endpoint no profile names", n)
	}
}
