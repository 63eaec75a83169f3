package daemon_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// An endpoint (or a proxy before it) that echoes the request's headers,
// Authorization included, in a huge error with control characters: the
// user reads turn_failed and the operator the log, and neither gets the
// API key, a forged log line or 10 MB.
func TestEndpointErrorReachesNoOne(t *testing.T) {
	const key = "sk-proj-LEAKCANARY0123456789abcdef"
	srv, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "unused"}}}, llmtest.Options{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Inject(llmtest.Fault{Status: 400, Message: "rejected\r\nlevel=ERROR msg=forged\x1b\x00", EchoHeaders: true, ErrorBytes: 10 << 20})
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n  api_key: %s\n", srv.URL(), key))
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "hello")
	evs := s.until(agentcore.EventTurnFailed, 30*time.Second)
	var failed struct{ Error string }
	if err := json.Unmarshal(eventData(t, evs[len(evs)-1]), &failed); err != nil {
		t.Fatal(err)
	}
	msg := failed.Error
	if !strings.Contains(msg, "400 Bad Request: rejected level=ERROR msg=forged; request headers: ") || len(msg) > 512 ||
		strings.Contains(msg, key[:16]) || strings.ContainsFunc(msg, unicode.IsControl) {
		t.Errorf("turn_failed error (%d bytes): %.600q", len(msg), msg)
	}
	p.stop()
	log := p.stderr.String()
	if strings.Contains(log, key[:16]) || strings.Contains(log, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx") ||
		strings.Contains(log, "\nlevel=ERROR msg=forged") || len(log) > 64<<10 {
		t.Errorf("the log holds the key, the padding or a forged line (%d bytes): %.2000s", len(log), log)
	}
}
