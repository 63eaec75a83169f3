package agentcore_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// TestEventPayloads round-trips the data of every event type and checks
// its JSON against the field names the web UI (daemon/web/static) and
// the API documentation use: the wire format stays what it was.
func TestEventPayloads(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	approval := agentcore.Approval{
		ID: "appr_1", User: "u", Conversation: "c", Turn: "t", ToolCallID: "call_1", Agent: "sub1", Tool: "shell",
		Command: "ls\u200b", Invisible: []agentcore.InvisibleChar{{Offset: 2, Code: "U+200B"}}, CommandShown: "ls[U+200B]",
		Kind: agentcore.ApprovalHostNetwork, Cwd: "/workspace", Background: true, Created: at, Expires: at.Add(time.Minute),
		Status: agentcore.ApprovalDecided, Decision: agentcore.DecisionApprove, DecidedBy: "u", Decided: at.Add(time.Second),
		Rule: "ls", ProposedRule: []string{"ls"},
	}
	approvalJSON := `{"id":"appr_1","user":"u","conversation":"c","turn":"t","tool_call_id":"call_1","agent":"sub1","tool":"shell",
		"command":"ls\u200b","invisible":[{"offset":2,"code":"U+200B"}],"command_shown":"ls[U+200B]","kind":"host_network",
		"cwd":"/workspace","background":true,"created":"2026-11-30T12:00:00Z","expires":"2026-11-30T12:01:00Z",
		"status":"decided","decision":"approve","decided_by":"u","decided":"2026-11-30T12:00:01Z",
		"rule":"ls","proposed_rule":["ls"]}`
	egressEv := egress.Event{Time: at, Proto: "connect", Host: "example.com", Port: 443, Addr: "93.184.215.14:443",
		Verdict: egress.Allowed, Reason: "cut at the cap", Sent: 10, Received: 20, Duration: 1500 * time.Millisecond}
	tests := []struct {
		typ  string
		data any
		want string // the JSON, as the emitters wrote it before the payloads were typed
	}{
		{agentcore.EventTurnStarted, agentcore.TurnStarted{User: "u", Content: "hi"}, `{"user":"u","content":"hi"}`},
		{agentcore.EventTextDelta, agentcore.TextDelta{Text: "a"}, `{"text":"a"}`},
		{agentcore.EventToolCallRequested, agentcore.ToolCallRequested{ID: "call_1", Name: "shell", Arguments: `{"command":"ls"}`},
			`{"id":"call_1","name":"shell","arguments":"{\"command\":\"ls\"}"}`},
		{agentcore.EventApprovalPending, approval, approvalJSON},
		{agentcore.EventApprovalDecided, approval, approvalJSON},
		{agentcore.EventToolOutput, agentcore.ToolOutput{ID: "call_1", Name: "shell", Output: "out"}, `{"id":"call_1","name":"shell","output":"out"}`},
		{agentcore.EventToolFinished, agentcore.ToolFinished{ID: "call_1", Name: "shell", Error: "boom"}, `{"id":"call_1","name":"shell","error":"boom"}`},
		{agentcore.EventToolOutputDelta, agentcore.ToolOutputDelta{ID: "call_1", Name: "agent", Text: "x"}, `{"id":"call_1","name":"agent","text":"x"}`},
		{agentcore.EventSubagentStarted, agentcore.SubagentStarted{ID: "call_1", Subagent: "sub1", Task: "look", Isolation: "shared"},
			`{"id":"call_1","subagent":"sub1","task":"look","isolation":"shared"}`},
		{agentcore.EventSubagentFinished, agentcore.SubagentFinished{ID: "call_1", Subagent: "sub1", Error: "boom"}, `{"id":"call_1","subagent":"sub1","error":"boom"}`},
		{agentcore.EventSandboxUnavailable, agentcore.SandboxUnavailable{Error: "no bwrap"}, `{"error":"no bwrap"}`},
		{agentcore.EventSandboxLimit, agentcore.SandboxLimit{ID: "call_1", Name: "shell", Limit: "memory", Message: "out of memory"},
			`{"id":"call_1","name":"shell","limit":"memory","message":"out of memory"}`},
		{agentcore.EventSandboxWaiting, agentcore.SandboxWaiting{ID: "call_1", Name: "shell", Status: "starting", WaitedMS: 2001},
			`{"id":"call_1","name":"shell","status":"starting","waited_ms":2001}`},
		{agentcore.EventSeccompViolation, agentcore.SeccompViolation{ID: "call_1", Name: "shell", Syscall: "ptrace", Command: "strace", Args: "0, 1, 2", Refusal: "EPERM", Count: 3},
			`{"id":"call_1","name":"shell","syscall":"ptrace","command":"strace","args":"0, 1, 2","refusal":"EPERM","count":3}`},
		{agentcore.EventEgress, agentcore.NewEgress("call_1", "shell", egressEv),
			`{"id":"call_1","name":"shell","proto":"connect","host":"example.com","port":443,"addr":"93.184.215.14:443",
			"verdict":"allowed","reason":"cut at the cap","sent":10,"received":20,"duration_ms":1500}`},
		{agentcore.EventUsage, agentcore.Usage{Model: "m", PromptTokens: 10, CompletionTokens: 2, Reported: true},
			`{"model":"m","prompt_tokens":10,"completion_tokens":2,"reported":true}`},
		{agentcore.EventReasoningDelta, agentcore.ReasoningDelta{Text: "hm", Omitted: 7}, `{"text":"hm","omitted":7}`},
		{agentcore.EventContextCompacted, agentcore.ContextCompacted{Summary: "s", From: 1, To: 9, TokensBefore: 900, TokensAfter: 300, Reason: "budget", Agent: "sub1", Last: "msg_9"},
			`{"summary":"s","from":1,"to":9,"tokens_before":900,"tokens_after":300,"reason":"budget","agent":"sub1","last":"msg_9"}`},
		{agentcore.EventWorkspaceReverted, agentcore.WorkspaceReverted{Turn: "turn_1", Reason: "revert"}, `{"turn":"turn_1","reason":"revert"}`},
		{agentcore.EventTurnUsage, agentcore.TurnUsage{Calls: 2, PromptTokens: 100, CompletionTokens: 20, Estimated: 1},
			`{"calls":2,"prompt_tokens":100,"completion_tokens":20,"estimated":1}`},
		{agentcore.EventTurnFinished, agentcore.TurnFinished{Reason: "max_steps", Message: "Stopped after 50 model calls"}, `{"reason":"max_steps","message":"Stopped after 50 model calls"}`},
		{agentcore.EventTurnFailed, agentcore.TurnFailed{Error: "model: 500"}, `{"error":"model: 500"}`},
		{agentcore.EventTurnCancelled, agentcore.TurnCancelled{Reason: "server shutting down"}, `{"reason":"server shutting down"}`},
		{agentcore.EventSetupStarted, agentcore.SetupStarted{Script: ".codumentor/setup.sh", Network: true, Egress: []string{"proxy.golang.org"}},
			`{"script":".codumentor/setup.sh","network":true,"egress":["proxy.golang.org"]}`},
		{agentcore.EventSetupOutput, agentcore.SetupOutput{Text: "ok\n"}, `{"text":"ok\n"}`},
		{agentcore.EventSetupFinished, agentcore.SetupFinished{Cached: true, Script: ".codumentor/setup.sh"}, `{"cached":true,"script":".codumentor/setup.sh"}`},
		{agentcore.EventSetupFailed, agentcore.SetupFailed{Error: "exit status 1"}, `{"error":"exit status 1"}`},
	}
	tested := map[string]bool{}
	for _, tt := range tests {
		tested[tt.typ] = true
		t.Run(tt.typ, func(t *testing.T) {
			// Every field set, so that each is round-tripped and named.
			v := reflect.ValueOf(tt.data)
			for i := range v.NumField() {
				if v.Field(i).IsZero() {
					t.Errorf("%T.%s is zero in the test", tt.data, v.Type().Field(i).Name)
				}
			}
			b, err := json.Marshal(tt.data)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatalf("the test's JSON: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%T marshals to\n%s\nwant\n%s", tt.data, b, tt.want)
			}
			back := reflect.New(v.Type())
			if err := json.Unmarshal(b, back.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Elem().Interface(), tt.data) {
				t.Errorf("round trip: %+v, want %+v", back.Elem().Interface(), tt.data)
			}
		})
	}
	for _, typ := range eventTypes(t) {
		if !tested[typ] {
			t.Errorf("event type %q has no case here: add its payload type and wire JSON", typ)
		}
	}

	// What zero and optional fields look like, as before.
	for _, tt := range []struct {
		data any
		want string
	}{
		{agentcore.TurnCancelled{}, `{}`},
		{agentcore.ToolFinished{ID: "call_1", Name: "shell"}, `{"id":"call_1","name":"shell"}`},
		{agentcore.SubagentFinished{ID: "call_1", Subagent: "sub1"}, `{"id":"call_1","subagent":"sub1"}`},
		{agentcore.SetupFinished{}, `{"cached":false,"script":""}`},
		{agentcore.SetupStarted{Script: "setup.sh"}, `{"script":"setup.sh","network":false,"egress":null}`},
		{agentcore.NewEgress("", "setup", egress.Event{Proto: "socks5", Verdict: egress.Refused, Reason: "not allowed"}),
			`{"id":"","name":"setup","proto":"socks5","host":"","port":0,"addr":"","verdict":"refused","reason":"not allowed","sent":0,"received":0,"duration_ms":0}`},
	} {
		if b, _ := json.Marshal(tt.data); string(b) != tt.want {
			t.Errorf("%T: %s, want %s", tt.data, b, tt.want)
		}
	}
}

// eventTypes are the values of the Event… constants of store.go.
func eventTypes(t *testing.T) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "store.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Event") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					types = append(types, v)
				}
			}
		}
	}
	if len(types) < 20 {
		t.Fatalf("found only %d event types in store.go", len(types))
	}
	return types
}
