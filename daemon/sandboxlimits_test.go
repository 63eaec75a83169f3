package daemon_test

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// TestLimitsForkBombServer: a fork bomb in one user's conversation stops
// at its sandbox's pid limit; meanwhile the server answers /healthz and
// another user's command in another conversation completes; the bomb's
// tool result and a sandbox_limit event name the limit.
// (Latency under load is measured by scripts/bench, not here.)
func TestLimitsForkBombServer(t *testing.T) {
	needSandbox(t)
	// A request picks its step by the conversation's assistant messages:
	// a first turn runs steps 0-1, a second one steps 2-3.
	in := newInstance(t, llm(t,
		shellCall("echo second-user-ok"), llmtest.Step{Text: "Done."},
		shellCall("bash -c ':(){ :|:& };:; sleep 6'"), llmtest.Step{Text: "Done."},
	)+"sandbox:\n  shell_always_allow: true\n  seccomp: enforce\n")
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	p := in.start()
	alice, bob := p.login("alice", pw), p.login("bob", pw)

	ac := alice.newConversation()
	as := alice.follow(ac, "")
	alice.send(ac, "warm up")
	as.until(agentcore.EventTurnFinished, 60*time.Second)
	alice.send(ac, "bomb")
	as.until(agentcore.EventToolCallRequested, 30*time.Second)
	time.Sleep(time.Second)

	// /healthz answers throughout, from another goroutine.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed, answered int
	var lat []time.Duration
	wg.Go(func() {
		c := &http.Client{Timeout: 5 * time.Second}
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			start := time.Now()
			res, err := c.Get(p.URL + "/healthz")
			lat = append(lat, time.Since(start))
			if err != nil || res.StatusCode != http.StatusOK {
				failed++
			} else {
				answered++
			}
			if res != nil {
				res.Body.Close()
			}
		}
	})
	bc := bob.newConversation()
	bs := bob.follow(bc, "")
	bob.send(bc, "echo")
	evs := bs.until(agentcore.EventTurnFinished, 30*time.Second)
	if !slices.ContainsFunc(evs, func(e sseEvent) bool {
		return e.Type == agentcore.EventToolOutput && strings.Contains(string(e.Data), "second-user-ok")
	}) {
		t.Errorf("bob's command during the bomb: %v", evs)
	}
	evs = as.until(agentcore.EventTurnFinished, 60*time.Second)
	close(stop)
	wg.Wait()
	if failed > 0 || answered < 5 {
		t.Errorf("/healthz during the bomb: %d failed, %d answered", failed, answered)
	}
	// Reported, not asserted: timing belongs to benchmarks.
	slices.Sort(lat)
	t.Logf("/healthz during the bomb: %d requests, p50 %v, p99 %v", len(lat), lat[len(lat)/2], lat[len(lat)*99/100])
	var out, limit string
	for _, e := range evs {
		switch e.Type {
		case agentcore.EventToolOutput:
			out = string(e.Data)
		case agentcore.EventSandboxLimit:
			limit = string(e.Data)
		}
	}
	if !strings.Contains(out, "[sandbox limit: the sandbox's process limit (512 processes") || !strings.Contains(limit, `"limit":"pids"`) {
		t.Errorf("bomb's tool output ends %q\nsandbox_limit event %s", out[max(0, len(out)-300):], limit)
	}
}

// TestLimitsWithoutDelegation: with no delegated cgroup /readyz stays
// ready and says "limits: rlimits only" with the remedy; with
// sandbox.require_limits it is not ready and the shell refuses.
func TestLimitsWithoutDelegation(t *testing.T) {
	needSandbox(t)
	const cfg = "sandbox:\n  shell_always_allow: true\n  limits:\n    cgroup: codumentor/no-such-user\n"
	type readiness struct {
		Ready  bool
		Checks []struct {
			Name, Detail, Remedy string
			OK                   bool
		}
		Warnings []string
	}
	in := newInstance(t, llm(t, shellCall("echo ran"), llmtest.Step{Text: "Done."})+cfg)
	in.addUser("root", pw, true)
	p := in.start()
	// The public /readyz says ready; the warning and its remedy are the
	// admin's (admin/doctor), as are all details.
	var r readiness
	p.anon().must(http.StatusOK, "GET", "/readyz", nil, &r)
	if !r.Ready {
		t.Fatalf("readyz without delegation: %+v", r)
	}
	p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/admin/doctor", nil, &r)
	if !r.Ready || !slices.ContainsFunc(r.Warnings, func(w string) bool {
		return strings.HasPrefix(w, "limits: rlimits only") && strings.Contains(w, "setup-cgroups")
	}) {
		t.Fatalf("admin/doctor without delegation: %+v", r)
	}
	p.stop()

	in = newInstance(t, llm(t, shellCall("echo ran"), llmtest.Step{Text: "Done."})+cfg+"  require_limits: true\n")
	in.addUser("alice", pw, false)
	in.addUser("root", pw, true)
	p = in.start()
	status, body, _ := p.anon().do("GET", "/readyz", nil)
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "sandbox/limits") {
		t.Fatalf("readyz with require_limits: %d %s", status, body)
	}
	body = p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/admin/doctor", nil, nil)
	if !strings.Contains(string(body), "require_limits") {
		t.Fatalf("admin/doctor with require_limits: %s", body)
	}
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "run")
	evs := s.until(agentcore.EventSandboxUnavailable, 30*time.Second)
	if ev := evs[len(evs)-1]; !strings.Contains(string(ev.Data), "resource limits unavailable") && !strings.Contains(string(ev.Data), "limits") {
		t.Errorf("sandbox_unavailable: %s", ev.Data)
	}
}
