package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// readingModel answers like a model that reads the two files a user
// message names, one read_file call at a time, then explains them; a
// request without tools (a compaction) gets a summary. Every request
// must end with the newest user message's turn: fail names what broke.
func readingModel() *llmtest.Script {
	return &llmtest.Script{Reply: func(req agentcore.Request) (llmtest.Step, error) {
		if len(req.Tools) == 0 {
			return llmtest.Step{Text: "The user asked, turn by turn, to read pairs of files a<N>.go and b<N>.go; they were read and reported done."}, nil
		}
		last := -1
		for i, m := range req.Messages {
			if m.Role == agentcore.RoleUser {
				last = i
			}
		}
		if last < 0 {
			return llmtest.Step{}, fmt.Errorf("no user message in the request")
		}
		var turn int
		if _, err := fmt.Sscanf(req.Messages[last].Content, "turn %d", &turn); err != nil {
			return llmtest.Step{Text: "Noted."}, nil
		}
		reads := 0
		for _, m := range req.Messages[last+1:] {
			if m.Role == agentcore.RoleTool {
				reads++
			}
		}
		read := func(name string) llmtest.Step {
			return llmtest.Step{ToolCalls: []agentcore.ToolCall{{ID: fmt.Sprintf("call_%d_%s", turn, name), Name: "read_file", Arguments: fmt.Sprintf(`{"path":%q}`, name)}}}
		}
		switch reads {
		case 0:
			return read(fmt.Sprintf("a%d.go", turn%5)), nil
		case 1:
			return read(fmt.Sprintf("b%d.go", turn%5)), nil
		}
		// A reply that explains, as models do: about 400 tokens.
		return llmtest.Step{Text: fmt.Sprintf("Read both files of turn %d. ", turn) + strings.Repeat("Each function f returns x times its number plus a helper call. ", 40)}, nil
	}}
}

// contextRepo makes a repository of ten Go files of about 4,000 tokens
// each (llmtest.CountTokens of what read_file shows) and syncs it.
func contextRepo(t *testing.T, admin *client) string {
	t.Helper()
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	for i := range 5 {
		for _, p := range []string{"a", "b"} {
			var b strings.Builder
			fmt.Fprintf(&b, "package %s%d\n\n", p, i)
			for n := 0; ; n++ {
				line := fmt.Sprintf("func f%d(x int) int { return x*%d + helper(x, %d) }\n", n, n, i)
				if llmtest.CountTokens(agentcore.Request{Messages: []agentcore.Message{{Content: b.String() + line}}}) > 3600 {
					break
				}
				b.WriteString(line)
			}
			os.WriteFile(filepath.Join(work, fmt.Sprintf("%s%d.go", p, i)), []byte(b.String()), 0o644)
		}
	}
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "files")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	var repo struct{ ID string }
	admin.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "ctx-repo", "url": "file://" + bare, "branch": "main"}, &repo)
	var sync struct{ Job struct{ ID string } }
	admin.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+repo.ID+"/sync", nil, &sync)
	waitJobDone(t, admin, sync.Job.ID)
	return repo.ID
}

// untilTurnEnd reads s until the turn ends and returns its events and how it
// ended.
func untilTurnEnd(t *testing.T, s *stream) ([]sseEvent, string) {
	t.Helper()
	var evs []sseEvent
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ev := s.next(time.Until(deadline))
		evs = append(evs, ev)
		switch ev.Type {
		case agentcore.EventTurnFinished, agentcore.EventTurnFailed, agentcore.EventTurnCancelled:
			return evs, ev.Type
		}
	}
}

func compactions(t *testing.T, evs []sseEvent) []agentcore.ContextCompacted {
	t.Helper()
	var out []agentcore.ContextCompacted
	for _, ev := range evs {
		if ev.Type == agentcore.EventContextCompacted {
			var c agentcore.ContextCompacted
			if err := json.Unmarshal(eventData(t, ev), &c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
	}
	return out
}

// A conversation on an endpoint with a 12,000-token window (vLLM's wire
// behaviour: the window read from its /v1/models, requests over it
// refused with its 400) survives 20 turns that each read about 8,000
// tokens of files with the real read_file tool: no request exceeds the
// window, every request carries the newest user message, older turns are
// compacted into a summary shown as an event, and the context route
// shows what the last request sent.
func TestLongConversationFitsSmallWindow(t *testing.T) {
	needSandbox(t)
	const window = 12000
	srv := windowServer(t, llmtest.DialectVLLM)
	p, a, convID, s := contextConversation(t, srv, "")
	conv := conversation{ID: convID}

	var all []sseEvent
	for turn := 1; turn <= 20; turn++ {
		before := len(srv.Requests())
		msg := fmt.Sprintf("turn %d: read a%d.go and b%d.go", turn, turn%5, turn%5)
		a.send(conv.ID, msg)
		evs, end := untilTurnEnd(t, s)
		all = append(all, evs...)
		if end != agentcore.EventTurnFinished {
			t.Fatalf("turn %d ended with %s: %s", turn, end, evs[len(evs)-1].Data)
		}
		if !strings.Contains(replyText(t, evs), fmt.Sprintf("Read both files of turn %d.", turn)) {
			t.Fatalf("turn %d: reply %q", turn, replyText(t, evs))
		}
		reqs := srv.Requests()
		for i, req := range reqs[before:] {
			if len(req.Tools) == 0 {
				continue // the compaction's own request
			}
			var users []string
			for _, m := range req.Messages {
				if m.Role == agentcore.RoleUser {
					users = append(users, m.Content)
				}
			}
			if len(users) == 0 || users[len(users)-1] != msg {
				t.Fatalf("turn %d, request %d: the newest user message is missing (user messages %q)", turn, before+i, users)
			}
		}
	}
	tokens := srv.PromptTokens()
	for i, n := range tokens {
		if n >= window {
			t.Errorf("request %d: %d tokens; the window is %d", i, n, window)
		}
	}
	if n := srv.ContextRefusals(); n != 0 {
		t.Errorf("%d requests refused as too long; want none", n)
	}
	stubs := 0
	for _, req := range srv.Requests() {
		for _, m := range req.Messages {
			if m.Role == agentcore.RoleTool && strings.Contains(m.Content, "elided to fit the context window: read_file {\"path\":") && strings.Contains(m.Content, "call it again") {
				stubs++
			}
		}
	}
	if stubs == 0 {
		t.Error("no request carried an elided tool output's stub")
	}
	cs := compactions(t, all)
	if len(cs) == 0 {
		t.Fatal("no context_compacted event in 20 turns")
	}
	for _, c := range cs {
		if c.Summary == "" || c.To <= c.From || c.TokensAfter >= c.TokensBefore || c.Reason != "budget" {
			t.Errorf("compaction %+v; want a summary of a range, fewer tokens after, reason budget", c)
		}
	}
	t.Logf("%d requests (max %d tokens), %d compactions", len(tokens), slices.Max(tokens), len(cs))

	var cv agentcore.Context
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/context", nil, &cv)
	if cv.Window != window || cv.Budget != window-cv.ReplyReserve || cv.ReplyReserve <= 0 || !cv.Fits || cv.Tokens > cv.Budget || !cv.Calibrated {
		t.Errorf("context window %d, reserve %d, budget %d, tokens %d, fits %v, calibrated %v; want the endpoint's %d, within budget, calibrated", cv.Window, cv.ReplyReserve, cv.Budget, cv.Tokens, cv.Fits, cv.Calibrated, window)
	}
	if cv.Summary == nil || cv.Summary.To != cs[len(cs)-1].To || !cv.Messages[0].Summary {
		t.Errorf("context summary %+v; want the last compaction's (to %d) in the system message", cv.Summary, cs[len(cs)-1].To)
	}
	// What the last request sent, plus the reply it got.
	reqs := srv.Requests()
	last := reqs[len(reqs)-1]
	var sent, shown []string
	for _, m := range last.Messages {
		sent = append(sent, string(m.Role))
	}
	sent = append(sent, string(agentcore.RoleAssistant))
	for _, m := range cv.Messages {
		shown = append(shown, string(m.Role))
	}
	if !slices.Equal(sent, shown) {
		t.Errorf("the context route shows %v; the last request sent %v and got a reply", shown, sent)
	}
	// The stored history keeps every message: six a turn (the user's,
	// two calls and their results, the reply).
	if lastIdx := cv.Messages[len(cv.Messages)-1].Index; lastIdx != 20*6-1 {
		t.Errorf("the context's last message is history index %d; want %d", lastIdx, 20*6-1)
	}
	// Owner only.
	b := p.login("bob", pw)
	b.must(http.StatusNotFound, "GET", "/api/v1/conversations/"+conv.ID+"/context", nil, nil)
}

// windowServer is a readingModel endpoint with a 12,000-token window in
// dialect's wire behaviour.
func windowServer(t *testing.T, dialect string) *llmtest.Server {
	t.Helper()
	srv, err := llmtest.StartServer(readingModel(), llmtest.Options{Model: "test", ContextWindow: 12000, Dialect: dialect})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// contextConversation starts a server on srv (with extra llm settings),
// and returns alice's client, a conversation on the file repository and
// its event stream.
func contextConversation(t *testing.T, srv *llmtest.Server, extra string) (*proc, *client, string, *stream) {
	t.Helper()
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n%s", srv.URL(), extra))
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)
	repo := contextRepo(t, admin)
	var conv conversation
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]any{"repository": repo}, &conv)
	s := a.follow(conv.ID, "")
	t.Cleanup(s.close)
	return p, a, conv.ID, s
}

// An endpoint whose window is smaller than the configured one refuses a
// request mid-conversation (vLLM's 400, naming its window): the turn
// recovers with exactly one compaction and one retry, and the window it
// named is kept, so no later request is refused.
func TestContextLengthRefusalRecovers(t *testing.T) {
	needSandbox(t)
	srv := windowServer(t, llmtest.DialectVLLM)
	_, a, conv, s := contextConversation(t, srv, "  context_window: 24000\n")
	refusedIn := 0
	for turn := 1; turn <= 8; turn++ {
		a.send(conv, fmt.Sprintf("turn %d: read both", turn))
		evs, end := untilTurnEnd(t, s)
		if end != agentcore.EventTurnFinished {
			t.Fatalf("turn %d ended with %s: %s", turn, end, evs[len(evs)-1].Data)
		}
		if refusedIn == 0 && srv.ContextRefusals() > 0 {
			refusedIn = turn
			cs := compactions(t, evs)
			if len(cs) != 1 || cs[0].Reason != "context_length" {
				t.Errorf("turn %d, refused once: compactions %+v; want exactly one, reason context_length", turn, cs)
			}
		}
	}
	if refusedIn == 0 || srv.ContextRefusals() != 1 {
		t.Fatalf("%d refusals (first in turn %d); want exactly one", srv.ContextRefusals(), refusedIn)
	}
	var cv agentcore.Context
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/context", nil, &cv)
	if cv.Window != 12000 {
		t.Errorf("context window %d; want the 12000 the endpoint named", cv.Window)
	}
}

// llama.cpp's older refusal names no sizes: one compaction and one retry
// still recover; the retry refused too fails the turn, without another
// request.
func TestContextLengthRefusalRetriesOnce(t *testing.T) {
	needSandbox(t)
	srv := windowServer(t, llmtest.DialectLlamaCpp)
	_, a, conv, s := contextConversation(t, srv, "")
	refusal := llmtest.Fault{Status: 400, Message: "the request exceeds the available context size, try increasing it"}
	for turn := 1; turn <= 2; turn++ {
		a.send(conv, fmt.Sprintf("turn %d: read both", turn))
		if _, end := untilTurnEnd(t, s); end != agentcore.EventTurnFinished {
			t.Fatalf("turn %d: %s", turn, end)
		}
	}
	srv.Inject(refusal)
	a.send(conv, "turn 3: read both")
	evs, end := untilTurnEnd(t, s)
	if cs := compactions(t, evs); end != agentcore.EventTurnFinished || len(cs) != 1 || cs[0].Reason != "context_length" {
		t.Fatalf("after one refusal: %s, compactions %+v; want the turn finished after one compaction", end, cs)
	}
	before := len(srv.Requests())
	srv.Inject(refusal, llmtest.Fault{}, refusal) // the compaction is answered
	a.send(conv, "turn 4: read both")
	evs, end = untilTurnEnd(t, s)
	if end != agentcore.EventTurnFailed || !strings.Contains(string(evs[len(evs)-1].Data), "context") {
		t.Fatalf("after two refusals: %s %s; want turn_failed naming the context", end, evs[len(evs)-1].Data)
	}
	t.Logf("the turn failed: %s", eventData(t, evs[len(evs)-1]))
	// The refused request, the compaction, the retry: then it stops.
	if n := len(srv.Requests()) - before; n != 3 {
		t.Errorf("%d requests after two refusals; want 3 (request, compaction, retry)", n)
	}
}

// A message larger than the whole window fails its turn with an error
// that says so, before any request; the next small message works.
func TestMessageLargerThanWindow(t *testing.T) {
	needSandbox(t)
	srv := windowServer(t, llmtest.DialectVLLM)
	_, a, conv, s := contextConversation(t, srv, "")
	for i, msg := range []string{"turn 1: read both", "turn 2: " + strings.Repeat("word ", 13000)} {
		before := len(srv.Requests())
		a.send(conv, msg)
		evs, end := untilTurnEnd(t, s)
		if i == 0 {
			if end != agentcore.EventTurnFinished {
				t.Fatalf("first turn: %s", end)
			}
			continue
		}
		if data := string(evs[len(evs)-1].Data); end != agentcore.EventTurnFailed || !strings.Contains(data, "does not fit the model's context window") || !strings.Contains(data, "shorter message") {
			t.Fatalf("a message over the window: %s %s; want turn_failed saying it does not fit", end, data)
		}
		t.Logf("the turn failed: %s", eventData(t, evs[len(evs)-1]))
		for _, req := range srv.Requests()[before:] {
			if len(req.Tools) > 0 {
				t.Errorf("a conversation request was sent for the oversized message")
			}
		}
	}
	a.send(conv, "turn 3: read both")
	evs, end := untilTurnEnd(t, s)
	if end != agentcore.EventTurnFinished || !strings.Contains(replyText(t, evs), "Read both files of turn 3.") {
		t.Fatalf("the next small message: %s %q", end, replyText(t, evs))
	}
	if n := srv.ContextRefusals(); n != 0 {
		t.Errorf("%d requests refused as too long; want none", n)
	}
}

// A model profile's context_window replaces the one the endpoint
// reports, and its max_tokens is the reply's share; a window too small is
// refused. Without one, the window is the endpoint's (vLLM's
// max_model_len).
func TestModelProfileContextWindow(t *testing.T) {
	srv := windowServer(t, llmtest.DialectVLLM)
	in := newInstance(t, fmt.Sprintf("plugins: []\nllm:\n  base_url: %[1]s\n  model: test\n  allowed_endpoints: [%[1]s]\n", srv.URL()))
	in.addUser("alice", pw, false)
	a := in.start().login("alice", pw)
	status, res, _ := a.do("PUT", "/api/v1/model-profiles/small", map[string]any{"endpoint": srv.URL(), "model": "test", "context_window": 100})
	if status != http.StatusBadRequest || !strings.Contains(string(res), "context_window") || strings.Contains(string(res), "llm.context_window") {
		t.Errorf("a window of 100 tokens: %d %s; want 400 naming context_window", status, res)
	}
	var prof struct {
		ContextWindow int `json:"context_window"`
	}
	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/small", map[string]any{"endpoint": srv.URL(), "model": "test", "context_window": 8000, "max_tokens": 1000}, &prof)
	a.must(http.StatusOK, "GET", "/api/v1/model-profiles/small", nil, &prof)
	if prof.ContextWindow != 8000 {
		t.Errorf("profile context_window %d; want 8000", prof.ContextWindow)
	}
	for _, tc := range []struct {
		profile       string
		window, reply int
	}{{"small", 8000, 1000}, {"", 12000, 12000 / 8}} {
		var conv conversation
		a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]any{"model_profile": tc.profile}, &conv)
		var cv agentcore.Context
		a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/context", nil, &cv)
		if cv.Window != tc.window || cv.ReplyReserve != tc.reply || cv.Budget != tc.window-tc.reply || len(cv.Messages) != 1 || cv.Messages[0].Role != agentcore.RoleSystem {
			t.Errorf("profile %q: window %d, reserve %d, budget %d, %d messages; want %d, %d, only the system message", tc.profile, cv.Window, cv.ReplyReserve, cv.Budget, len(cv.Messages), tc.window, tc.reply)
		}
	}
}
