package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/store"
)

// turnEvents sends content in a new conversation of c and returns the
// conversation and the turn's events up to its last one (of type end).
func turnEvents(t *testing.T, c *client, content, end string) (string, []sseEvent) {
	t.Helper()
	conv := c.newConversation()
	s := c.follow(conv, "")
	defer s.close()
	c.send(conv, content)
	return conv, s.until(end, 60*time.Second)
}

// turnUsage is the turn's turn_usage event, which must come just before
// its last event, and its usage events.
func turnUsage(t *testing.T, evs []sseEvent) (agentcore.TurnUsage, []agentcore.Usage) {
	t.Helper()
	if len(evs) < 2 || evs[len(evs)-2].Type != agentcore.EventTurnUsage {
		t.Fatalf("no turn_usage just before the turn's last event: %v", evs)
	}
	var tu agentcore.TurnUsage
	if err := json.Unmarshal(eventData(t, evs[len(evs)-2]), &tu); err != nil {
		t.Fatal(err)
	}
	var us []agentcore.Usage
	for _, ev := range evs {
		if ev.Type == agentcore.EventUsage {
			var u agentcore.Usage
			if err := json.Unmarshal(eventData(t, ev), &u); err != nil {
				t.Fatal(err)
			}
			us = append(us, u)
		}
	}
	return tu, us
}

// usageRecords reads user's usage records from the instance's database,
// as codumentorctl would.
func (in *instance) usageRecords(user string) []store.UsageRecord {
	in.t.Helper()
	ctx := context.Background()
	db := in.openDB()
	u, err := store.NewUsage(db)
	if err != nil {
		in.t.Fatal(err)
	}
	rs, err := u.UsageRecords(ctx, user)
	if err != nil {
		in.t.Fatal(err)
	}
	return rs
}

// wantError checks an answer's status and error code.
func wantError(t *testing.T, c *client, status int, code, method, path string, body any) string {
	t.Helper()
	got, b, _ := c.do(method, path, body)
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(b, &e)
	if got != status || e.Error.Code != code || e.Error.Message == "" {
		t.Errorf("%s %s: %d %s; want %d %s with a message", method, path, got, b, status, code)
	}
	return e.Error.Message
}

// The must-show: every model call's usage (reported by the
// endpoint, or estimated and marked so) is recorded with its
// conversation, turn, user, model and endpoint, summed per turn in a
// turn_usage event, grouped and filtered by GET /me/usage and GET
// /admin/usage, kept when the conversation is deleted, and counted in
// /metrics by model, never by user.
func TestUsageAccounting(t *testing.T) {
	srv, err := llmtest.StartServer(&llmtest.Script{
		Steps: []llmtest.Step{
			{Text: "Looking.", ToolCalls: []agentcore.ToolCall{{Name: "no_such_tool"}}, PromptTokens: 100, CompletionTokens: 7},
			{Text: "Done.", PromptTokens: 130, CompletionTokens: 3},
		},
		Branches: []llmtest.Branch{{Match: "guess", Steps: []llmtest.Step{{Text: "An estimate of twelve bytes."}}}},
	}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test-model\nplugins: []\n", srv.URL()))
	in.addUser("root", pw, true)
	alice, bob := in.addUser("alice", pw, false), in.addUser("bob", pw, false)
	p := in.start()
	admin, a, b := p.login("root", pw), p.login("alice", pw), p.login("bob", pw)

	conv, evs := turnEvents(t, a, "look around", agentcore.EventTurnFinished)
	tu, us := turnUsage(t, evs)
	if want := (agentcore.TurnUsage{Calls: 2, PromptTokens: 230, CompletionTokens: 10}); tu != want {
		t.Errorf("turn_usage %+v; want %+v", tu, want)
	}
	if len(us) != 2 || !us[0].Reported || us[0].PromptTokens != 100 || us[1].CompletionTokens != 3 || us[0].Model != "test-model" {
		t.Errorf("usage events %+v; want the endpoint's numbers of both calls", us)
	}
	srv.Inject(llmtest.Fault{NoUsage: true})
	_, evs = turnEvents(t, b, "guess", agentcore.EventTurnFinished)
	if tu, _ := turnUsage(t, evs); tu.Calls != 1 || tu.Estimated != 1 || tu.PromptTokens == 0 || tu.CompletionTokens != (len("assistant")+len("An estimate of twelve bytes.")+2)/3 {
		t.Errorf("turn_usage of a call without a usage report: %+v; want one estimated call", tu)
	}

	// The database: one record per call, with what it belongs to.
	rs := in.usageRecords(alice.ID)
	if len(rs) != 2 {
		t.Fatalf("alice's usage records: %+v; want 2", rs)
	}
	for i, want := range [][2]int64{{100, 7}, {130, 3}} {
		r := rs[i]
		if r.User != alice.ID || r.Conversation != conv || !strings.HasPrefix(r.Turn, "turn_") || r.Turn != rs[0].Turn || r.Model != "test-model" || r.Endpoint != srv.URL() ||
			!r.Reported || r.PromptTokens != want[0] || r.CompletionTokens != want[1] || time.Since(r.Time) > time.Hour {
			t.Errorf("record %d: %+v; want alice's call in %s at %s with %v tokens, reported", i, r, conv, srv.URL(), want)
		}
	}
	if rs := in.usageRecords(bob.ID); len(rs) != 1 || rs[0].Reported || rs[0].PromptTokens == 0 || rs[0].CompletionTokens == 0 {
		t.Errorf("bob's records %+v; want one estimate", rs)
	}

	// The caller's usage.
	today := time.Now().UTC().Format(time.DateOnly)
	var r api.UsageReport
	get := func(c *client, path string) {
		t.Helper()
		r = api.UsageReport{}
		c.must(http.StatusOK, "GET", path, nil, &r)
	}
	get(a, "/api/v1/me/usage")
	want := store.UsageTotals{Calls: 2, PromptTokens: 230, CompletionTokens: 10, TotalTokens: 240}
	if r.GroupBy != "model" || len(r.Groups) != 1 || r.Groups[0].Key != "test-model" || r.Groups[0].UsageTotals != want || r.Total != want {
		t.Errorf("GET /me/usage: %+v; want alice's two calls under test-model", r)
	}
	if q := r.Quota; q == nil || q.DailyTokens != 0 || q.Source != store.QuotaDefault || q.UsedToday != 240 || q.Day != today {
		t.Errorf("alice's quota %+v; want none, 240 used today", r.Quota)
	}
	get(a, "/api/v1/me/usage?group_by=day")
	if len(r.Groups) != 1 || r.Groups[0].Key != today || r.Groups[0].TotalTokens != 240 {
		t.Errorf("GET /me/usage?group_by=day: %+v; want today's 240 tokens", r)
	}
	tomorrow := time.Now().UTC().Add(24 * time.Hour).Format(time.DateOnly)
	for _, since := range []string{tomorrow, time.Now().Add(time.Minute).Format(time.RFC3339)} {
		get(a, "/api/v1/me/usage?since="+since)
		if len(r.Groups) != 0 || r.Total != (store.UsageTotals{}) || r.Groups == nil {
			t.Errorf("GET /me/usage?since=%s: %+v; want no groups", since, r)
		}
	}
	get(a, "/api/v1/me/usage?since=2026-01-01")
	if r.Total != want || !r.Since.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("GET /me/usage?since=2026-01-01: %+v", r)
	}
	for _, q := range []string{"group_by=user", "group_by=bogus", "since=yesterday", "since=2026-13-01"} {
		wantError(t, a, http.StatusBadRequest, "bad_request", "GET", "/api/v1/me/usage?"+q, nil)
	}
	wantError(t, p.anon(), http.StatusUnauthorized, "unauthorized", "GET", "/api/v1/me/usage", nil)

	// Everyone's, for an admin.
	get(admin, "/api/v1/admin/usage")
	if r.GroupBy != "user" || len(r.Groups) != 2 || r.Quota != nil || r.Total.Calls != 3 || r.Total.Estimated != 1 {
		t.Fatalf("GET /admin/usage: %+v; want alice and bob", r)
	}
	for _, g := range r.Groups {
		if (g.Key == alice.ID && (g.Name != "alice" || g.TotalTokens != 240)) || (g.Key == bob.ID && (g.Name != "bob" || g.Estimated != 1)) || (g.Key != alice.ID && g.Key != bob.ID) {
			t.Errorf("group %+v", g)
		}
	}
	for _, user := range []string{"alice", alice.ID, "ALICE"} {
		get(admin, "/api/v1/admin/usage?group_by=model&user="+user)
		if len(r.Groups) != 1 || r.Groups[0].UsageTotals != want || r.Quota == nil || r.Quota.UsedToday != 240 {
			t.Errorf("GET /admin/usage?user=%s: %+v; want alice's calls and quota", user, r)
		}
	}
	get(admin, "/api/v1/admin/usage?group_by=day&since="+today)
	if len(r.Groups) != 1 || r.Groups[0].Key != today || r.Groups[0].Calls != 3 {
		t.Errorf("GET /admin/usage?group_by=day: %+v", r)
	}
	for _, q := range []string{"user=nobody", "group_by=conversation", "since=soon"} {
		wantError(t, admin, http.StatusBadRequest, "bad_request", "GET", "/api/v1/admin/usage?"+q, nil)
	}
	wantError(t, a, http.StatusForbidden, "forbidden", "GET", "/api/v1/admin/usage", nil)
	wantError(t, a, http.StatusForbidden, "forbidden", "GET", "/api/v1/admin/usage?user=bob", nil)

	// Deleting the conversation keeps its accounting.
	a.must(http.StatusNoContent, "DELETE", "/api/v1/conversations/"+conv, nil, nil)
	get(a, "/api/v1/me/usage")
	if r.Total != want {
		t.Errorf("after deleting the conversation: %+v; want its usage kept", r.Total)
	}

	// The counters: by model, kind and source, never by user.
	res, err := http.Get(p.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	observe("GET", "/metrics", res.StatusCode)
	metrics := string(body)
	for _, line := range []string{
		`codumentor_llm_tokens_total{kind="prompt",model="test-model",source="reported"} 230`,
		`codumentor_llm_tokens_total{kind="completion",model="test-model",source="reported"} 10`,
		`codumentor_llm_calls_total{model="test-model",source="reported"} 2`,
		`codumentor_llm_calls_total{model="test-model",source="estimated"} 1`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	est := regexp.MustCompile(`codumentor_llm_tokens_total\{kind="completion",model="test-model",source="estimated"\} (\d+)`).FindStringSubmatch(metrics)
	if est == nil || est[1] == "0" {
		t.Errorf("/metrics has no estimated completion tokens: %v", est)
	}
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "codumentor_llm_") && (strings.Contains(line, "user") || strings.Contains(line, alice.ID) || strings.Contains(line, "alice")) {
			t.Errorf("a token counter names a user: %s", line)
		}
	}
}

// The must-show: a user past their daily token quota is refused
// before the model is called (429 quota_exceeded, Retry-After at
// midnight UTC, nothing stored), an admin sets a user's own quota, and a
// turn that crosses the quota finishes its model call and fails at the
// next one, with the reason.
func TestQuotaRefusedBeforeModel(t *testing.T) {
	srv, err := llmtest.StartServer(&llmtest.Script{
		Steps: []llmtest.Step{{Text: "First.", PromptTokens: 150, CompletionTokens: 60}},
		Branches: []llmtest.Branch{
			{Match: "again", Steps: []llmtest.Step{{Text: "Again.", PromptTokens: 40, CompletionTokens: 10}}},
			{Match: "crossing", Steps: []llmtest.Step{
				{Text: "Calling.", ToolCalls: []agentcore.ToolCall{{Name: "no_such_tool"}}, PromptTokens: 50, CompletionTokens: 5},
				{Text: "Never sent."},
			}},
		},
	}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test-model\nplugins: []\nquotas:\n  daily_tokens: 200\n", srv.URL()))
	in.addUser("root", pw, true)
	alice := in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)

	// The first turn starts below the quota and crosses it.
	first, _ := turnEvents(t, a, "hello", agentcore.EventTurnFinished)
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d model requests, want 1", n)
	}
	conv := a.newConversation()
	code, b, h := a.do("POST", "/api/v1/conversations/"+conv+"/messages", map[string]string{"content": "again"})
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(b, &e)
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	retry, _ := strconv.Atoi(h.Get("Retry-After"))
	if code != http.StatusTooManyRequests || e.Error.Code != "quota_exceeded" || !strings.Contains(e.Error.Message, midnight.Format(time.RFC3339)) || !strings.HasPrefix(e.Error.Message, "your daily token quota is used up: 210 of 200 tokens used today") {
		t.Errorf("a message past the quota: %d %s; want 429 quota_exceeded naming the use and %s", code, b, midnight.Format(time.RFC3339))
	}
	if left := time.Until(midnight).Seconds(); retry <= 0 || float64(retry) < left-60 || float64(retry) > left+60 {
		t.Errorf("Retry-After %q; want the %.0f s until midnight UTC", h.Get("Retry-After"), left)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d model requests after the refusal, want still 1: the model must not be called", n)
	}
	// Editing or regenerating a message starts a turn too.
	msgs := a.messages(first, false)
	if len(msgs) == 0 || msgs[0].Role != agentcore.RoleUser {
		t.Fatalf("the first conversation's messages: %+v", msgs)
	}
	mid := "/api/v1/conversations/" + first + "/messages/" + msgs[0].ID
	wantError(t, a, http.StatusTooManyRequests, "quota_exceeded", "PUT", mid, map[string]string{"content": "hello again"})
	wantError(t, a, http.StatusTooManyRequests, "quota_exceeded", "POST", mid+"/regenerate", nil)
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d model requests after the refused edit and regeneration, want still 1", n)
	}
	var cv store.Conversation
	if a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv, nil, &cv); cv.LastSeq != 0 {
		t.Errorf("the refused message left %d events; want none", cv.LastSeq)
	}

	// An admin reads and raises alice's quota; the message then goes.
	path := "/api/v1/admin/users/" + alice.ID + "/quota"
	var q store.Quota
	admin.must(http.StatusOK, "GET", path, nil, &q)
	if q.DailyTokens != 200 || q.Source != store.QuotaDefault || q.UsedToday != 210 || !q.Resets.Equal(midnight) {
		t.Errorf("alice's quota %+v; want the default 200, 210 used, resets %s", q, midnight)
	}
	for _, body := range []any{map[string]any{}, map[string]any{"daily_tokens": -1}, map[string]any{"daily_tokens": "many"}, map[string]any{"daily_tokens": 5, "extra": 1}, "[]"} {
		wantError(t, admin, http.StatusBadRequest, "bad_request", "PUT", path, body)
	}
	wantError(t, a, http.StatusForbidden, "forbidden", "PUT", path, map[string]any{"daily_tokens": 0})
	wantError(t, a, http.StatusForbidden, "forbidden", "GET", path, nil)
	wantError(t, admin, http.StatusNotFound, "not_found", "PUT", "/api/v1/admin/users/usr_nobody/quota", map[string]any{"daily_tokens": 0})
	admin.must(http.StatusOK, "PUT", path, map[string]any{"daily_tokens": 1000}, &q)
	if q.DailyTokens != 1000 || q.Source != store.QuotaUser || q.UsedToday != 210 {
		t.Errorf("after PUT 1000: %+v", q)
	}
	s := a.follow(conv, "")
	defer s.close()
	a.send(conv, "again")
	s.until(agentcore.EventTurnFinished, 60*time.Second)

	// A turn that starts below the quota and crosses it in its first
	// call: the call's tool runs, the next model call is refused.
	admin.must(http.StatusOK, "PUT", path, map[string]any{"daily_tokens": 300}, &q)
	before := len(srv.Requests())
	_, evs := turnEvents(t, a, "crossing", agentcore.EventTurnFailed)
	if n := len(srv.Requests()) - before; n != 1 {
		t.Errorf("%d model requests in the crossing turn, want 1", n)
	}
	var failed struct{ Error string }
	json.Unmarshal(eventData(t, evs[len(evs)-1]), &failed)
	if !strings.Contains(failed.Error, "daily token quota is used up: 315 of 300") || !strings.Contains(failed.Error, midnight.Format(time.RFC3339)) {
		t.Errorf("turn_failed %q; want the quota and its reset", failed.Error)
	}
	if tu, _ := turnUsage(t, evs); tu.Calls != 1 || tu.PromptTokens != 50 {
		t.Errorf("turn_usage %+v; want the one call", tu)
	}
	ran := false
	for _, ev := range evs {
		ran = ran || ev.Type == agentcore.EventToolFinished
	}
	if !ran {
		t.Error("the crossing call's tool call was not answered")
	}

	// null: the default applies again; 0: no quota for this user.
	admin.must(http.StatusOK, "PUT", path, map[string]any{"daily_tokens": nil}, &q)
	if q.DailyTokens != 200 || q.Source != store.QuotaDefault {
		t.Errorf("after PUT null: %+v; want the default", q)
	}
	wantError(t, a, http.StatusTooManyRequests, "quota_exceeded", "POST", "/api/v1/conversations/"+a.newConversation()+"/messages", map[string]string{"content": "again"})
	admin.must(http.StatusOK, "PUT", path, map[string]any{"daily_tokens": 0}, &q)
	if q.DailyTokens != 0 || q.Source != store.QuotaUser {
		t.Errorf("after PUT 0: %+v; want no quota", q)
	}
	turnEvents(t, a, "again", agentcore.EventTurnFinished)

	// quotas.daily_tokens is re-read from config.yaml while the server runs.
	admin.must(http.StatusOK, "PUT", path, map[string]any{"daily_tokens": nil}, &q)
	wantError(t, a, http.StatusTooManyRequests, "quota_exceeded", "POST", "/api/v1/conversations/"+a.newConversation()+"/messages", map[string]string{"content": "again"})
	yaml := fmt.Sprintf("auth:\n  jwt_secret: %s\nllm:\n  base_url: %s\n  model: test-model\nplugins: []\nquotas:\n  daily_tokens: 100000\n", testSecret, srv.URL())
	if err := os.WriteFile(in.config().ConfigFile(), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitFile(t, in.config().LogFile(), "quotas reloaded from config.yaml")
	if admin.must(http.StatusOK, "GET", path, nil, &q); q.DailyTokens != 100000 || q.Source != store.QuotaDefault {
		t.Errorf("after the reload: %+v; want the new default", q)
	}
	turnEvents(t, a, "again", agentcore.EventTurnFinished)

	// Each change is in the audit log.
	var page api.AuditPage
	admin.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=admin", nil, &page)
	n := 0
	for _, r := range page.Records {
		if strings.Contains(string(r.Data), `"user_quota"`) && strings.Contains(string(r.Data), alice.ID) {
			n++
		}
	}
	if n != 5 {
		t.Errorf("%d user_quota audit records, want 5", n)
	}
}
