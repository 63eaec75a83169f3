package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
	yamlv3 "gopkg.in/yaml.v3"
)

// modelProfile is a model profile as the API shows it.
type modelProfile struct {
	Name       string    `json:"name"`
	Endpoint   string    `json:"endpoint"`
	Model      string    `json:"model"`
	HasAPIKey  bool      `json:"has_api_key"`
	Updated    time.Time `json:"updated"`
	Unreadable bool      `json:"unreadable"`
}

// apiErrorCode is the error code of an API error body.
func apiErrorCode(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an API error: %s", b)
	}
	return e.Error.Code
}

// The must-show for model profiles: a profile names only an endpoint the
// operator allows; a conversation created with it has its turns answered
// there, with the profile's key, and the server's own model is not
// asked; the key is never shown back, in events, the log or the
// database; other users cannot see the profile; a deleted profile or an
// endpoint the configuration no longer allows fails the turn instead of
// falling back; a rotated jwt_secret still decrypts it.
func TestModelProfiles(t *testing.T) {
	const key = "sk-profile-CANARY-5d41402abc4b2a76"
	def, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "from the default"}}}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(def.Close)
	prof, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "from the profile"}}}, llmtest.Options{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prof.Close)
	other, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "from elsewhere"}}}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)

	// Listed with a trailing slash and an upper-case scheme: compared
	// normalized.
	listed := strings.Replace(prof.URL(), "http:", "HTTP:", 1) + "/"
	in := newInstance(t, "plugins: []\nllm:\n  base_url: "+def.URL()+"\n  model: test\n  allowed_endpoints: ["+listed+"]\n")
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	b := p.login("bob", pw)

	var list struct {
		ModelProfiles    []modelProfile `json:"model_profiles"`
		AllowedEndpoints []string       `json:"allowed_endpoints"`
	}
	a.must(http.StatusOK, "GET", "/api/v1/model-profiles", nil, &list)
	if len(list.ModelProfiles) != 0 || len(list.AllowedEndpoints) != 1 || list.AllowedEndpoints[0] != prof.URL() {
		t.Fatalf("GET model-profiles before any: %+v", list)
	}

	// Refused: endpoints not listed (the server's own base_url included,
	// a URL with credentials, another path or port), bad names, no model.
	put := func(c *client, name string, body map[string]string) (int, []byte) {
		t.Helper()
		status, res, _ := c.do("PUT", "/api/v1/model-profiles/"+name, body)
		return status, res
	}
	for _, tc := range []struct {
		name, code string
		body       map[string]string
	}{
		{"work", "endpoint_not_allowed", map[string]string{"endpoint": other.URL(), "model": "m", "api_key": key}},
		{"work", "endpoint_not_allowed", map[string]string{"endpoint": def.URL(), "model": "m"}},
		{"work", "endpoint_not_allowed", map[string]string{"endpoint": prof.URL() + "/v1", "model": "m"}},
		{"work", "endpoint_not_allowed", map[string]string{"endpoint": "http://169.254.169.254/latest", "model": "m"}},
		{"work", "bad_request", map[string]string{"endpoint": strings.Replace(prof.URL(), "http://", "http://u:p@", 1), "model": "m"}},
		{"work", "bad_request", map[string]string{"endpoint": "file:///etc/passwd", "model": "m"}},
		{"work", "bad_request", map[string]string{"endpoint": prof.URL(), "model": ""}},
		{"work", "bad_request", map[string]string{"endpoint": prof.URL(), "model": "m", "api_key": "Bearer " + key}},
		{"bad-name", "bad_request", map[string]string{"endpoint": prof.URL(), "model": "m"}},
	} {
		status, res := put(a, tc.name, tc.body)
		if status != http.StatusBadRequest || apiErrorCode(t, res) != tc.code || bytes.Contains(res, []byte(key)) {
			t.Errorf("PUT %s %v: %d %s; want 400 %s", tc.name, tc.body, status, res, tc.code)
		}
	}
	a.must(http.StatusNotFound, "GET", "/api/v1/model-profiles/work", nil, nil)

	var got modelProfile
	res := a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": prof.URL() + "/", "model": "first", "api_key": key}, &got)
	if got.Name != "work" || got.Endpoint != prof.URL() || got.Model != "first" || !got.HasAPIKey || time.Since(got.Updated) > time.Minute || bytes.Contains(res, []byte(key)) {
		t.Fatalf("PUT: %s", res)
	}
	// Replaced without api_key: the key stays.
	res = a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": prof.URL(), "model": "second"}, &got)
	if got.Model != "second" || !got.HasAPIKey {
		t.Fatalf("PUT without api_key: %s", res)
	}
	for _, path := range []string{"/api/v1/model-profiles", "/api/v1/model-profiles/work"} {
		if res := a.must(http.StatusOK, "GET", path, nil, nil); bytes.Contains(res, []byte(key)) || !bytes.Contains(res, []byte(`"has_api_key":true`)) || !bytes.Contains(res, []byte(`"model":"second"`)) {
			t.Fatalf("GET %s: %s", path, res)
		}
	}

	// Another user sees nothing of it and cannot use or delete it.
	b.must(http.StatusOK, "GET", "/api/v1/model-profiles", nil, &list)
	if len(list.ModelProfiles) != 0 {
		t.Fatalf("bob lists alice's profiles: %+v", list.ModelProfiles)
	}
	b.must(http.StatusNotFound, "GET", "/api/v1/model-profiles/work", nil, nil)
	b.must(http.StatusNotFound, "DELETE", "/api/v1/model-profiles/work", nil, nil)
	b.must(http.StatusBadRequest, "POST", "/api/v1/conversations", map[string]string{"model_profile": "work"}, nil)
	a.must(http.StatusBadRequest, "POST", "/api/v1/conversations", map[string]string{"model_profile": "nope"}, nil)

	var conv struct {
		ID           string `json:"id"`
		ModelProfile string `json:"model_profile"`
	}
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "on my endpoint", "model_profile": "work"}, &conv)
	if conv.ModelProfile != "work" {
		t.Fatalf("created conversation: %+v", conv)
	}
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID, nil, &conv)
	if conv.ModelProfile != "work" {
		t.Fatalf("GET conversation: %+v", conv)
	}

	// turn sends a message and returns the events up to the turn's end.
	turn := func(c *client, id string, end string) []sseEvent {
		t.Helper()
		s := c.follow(id, "")
		defer s.close()
		c.send(id, "hello")
		evs := s.until(end, 30*time.Second)
		for _, ev := range evs {
			if bytes.Contains(ev.Data, []byte(key)) {
				t.Fatalf("the profile's key is in event %s", ev.Data)
			}
		}
		return evs
	}
	// The profile's endpoint answers, and only a request with its key
	// counts (llmtest answers others 401 and does not record them).
	if got := replyText(t, turn(a, conv.ID, agentcore.EventTurnFinished)); got != "from the profile" {
		t.Fatalf("reply %q, want the profile endpoint's", got)
	}
	if n, m := len(prof.Requests()), len(def.Requests()); n != 1 || m != 0 {
		t.Fatalf("%d requests with the key at the profile's endpoint, %d at the default; want 1, 0", n, m)
	}
	// A conversation without a profile uses the server's model.
	if got := replyText(t, turn(a, a.newConversation(), agentcore.EventTurnFinished)); got != "from the default" || len(def.Requests()) != 1 {
		t.Fatalf("reply without a profile %q (%d requests at the default)", got, len(def.Requests()))
	}

	// Deleted: the conversation's next turn fails and goes nowhere else.
	a.must(http.StatusNoContent, "DELETE", "/api/v1/model-profiles/work", nil, nil)
	a.must(http.StatusNotFound, "GET", "/api/v1/model-profiles/work", nil, nil)
	a.must(http.StatusNotFound, "DELETE", "/api/v1/model-profiles/work", nil, nil)
	evs := turn(a, conv.ID, agentcore.EventTurnFailed)
	if msg := string(eventData(t, evs[len(evs)-1])); !strings.Contains(msg, `model profile \"work\" no longer exists`) {
		t.Fatalf("turn_failed: %s", msg)
	}
	if n, m := len(prof.Requests()), len(def.Requests()); n != 1 || m != 1 {
		t.Fatalf("after the profile was deleted: %d requests at its endpoint, %d at the default; want 1, 1", n, m)
	}

	// Stored again, then the jwt_secret rotates: the profile still
	// decrypts, and its key still reaches its endpoint.
	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": prof.URL(), "model": "third", "api_key": key}, nil)
	p.stop()
	if _, err := config.RotateSecret(in.config().ConfigFile(), config.NewSecret()); err != nil {
		t.Fatal(err)
	}
	p = in.start()
	a = p.login("alice", pw)
	a.must(http.StatusOK, "GET", "/api/v1/model-profiles/work", nil, &got)
	if !got.HasAPIKey || got.Model != "third" {
		t.Fatalf("after rotation: %+v", got)
	}
	var conv2 struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"model_profile": "work"}, &conv2)
	if got := replyText(t, turn(a, conv2.ID, agentcore.EventTurnFinished)); got != "from the profile" || len(prof.Requests()) != 2 {
		t.Fatalf("after rotation: reply %q, %d requests with the key", got, len(prof.Requests()))
	}

	// The operator takes the endpoint off the list, the server running:
	// the profile stays, but neither a new conversation nor a turn of an
	// old one uses it.
	cfgFile := in.config().ConfigFile()
	yaml, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(yaml, []byte(listed)) {
		t.Fatalf("%s does not list %s:\n%s", cfgFile, listed, yaml)
	}
	if err := os.WriteFile(cfgFile, bytes.Replace(yaml, []byte(listed), []byte(other.URL()), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(p.stderr.String(), "llm.allowed_endpoints reloaded") {
			return fmt.Errorf("the server did not reload llm.allowed_endpoints:\n%s", p.stderr)
		}
		return nil
	})
	status, body, _ := a.do("POST", "/api/v1/conversations", map[string]string{"model_profile": "work"})
	if status != http.StatusBadRequest || apiErrorCode(t, body) != "endpoint_not_allowed" {
		t.Fatalf("conversation on a profile whose endpoint is no longer allowed: %d %s", status, body)
	}
	evs = turn(a, conv2.ID, agentcore.EventTurnFailed)
	if msg := string(eventData(t, evs[len(evs)-1])); !strings.Contains(msg, "llm.allowed_endpoints") {
		t.Fatalf("turn_failed: %s", msg)
	}
	if n, m, o := len(prof.Requests()), len(def.Requests()), len(other.Requests()); n != 2 || m != 1 || o != 0 {
		t.Fatalf("with the endpoint no longer allowed: requests %d at it, %d at the default, %d elsewhere; want 2, 1, 0", n, m, o)
	}
	p.stop()

	// Not in the log, nor in plaintext in the database.
	if log, err := os.ReadFile(in.config().LogFile()); err != nil || bytes.Contains(log, []byte(key)) {
		t.Errorf("the log holds the profile's key (%v)", err)
	}
	files, _ := filepath.Glob(filepath.Join(in.config().DataDir(), "*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("%s holds the profile's key in plaintext", f)
		}
	}

	// The operator replaces the jwt_secret and drops the old one: the
	// profile under it cannot be read, and the list says so instead of
	// failing as a whole.
	if _, err := config.RotateSecret(cfgFile, config.NewSecret()); err != nil {
		t.Fatal(err)
	}
	yaml, err = os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yamlv3.Unmarshal(yaml, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["auth"].(map[string]any), "previous_jwt_secrets")
	if yaml, err = yamlv3.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgFile, yaml, 0o600); err != nil {
		t.Fatal(err)
	}
	p = in.start()
	defer p.stop()
	a = p.login("alice", pw)
	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/fresh", map[string]string{"endpoint": other.URL(), "model": "m"}, nil)
	var all struct {
		Profiles []modelProfile `json:"model_profiles"`
	}
	a.must(http.StatusOK, "GET", "/api/v1/model-profiles", nil, &all)
	if len(all.Profiles) != 2 || all.Profiles[0].Name != "fresh" || all.Profiles[0].Unreadable ||
		all.Profiles[1].Name != "work" || !all.Profiles[1].Unreadable || all.Profiles[1].Endpoint != "" {
		t.Fatalf("profiles after the old secret was dropped: %+v", all.Profiles)
	}
	a.must(http.StatusOK, "GET", "/api/v1/model-profiles/work", nil, &got)
	if !got.Unreadable || got.Endpoint != "" || got.HasAPIKey {
		t.Fatalf("GET of the unreadable profile: %+v", got)
	}
	if status, body, _ := a.do("POST", "/api/v1/conversations", map[string]string{"model_profile": "work"}); status != http.StatusBadRequest || !strings.Contains(string(body), "store it again") {
		t.Fatalf("conversation on the unreadable profile: %d %s", status, body)
	}
}
