package daemon_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

const metricsToken = "metrics-test-token-0123456789"

// scrape reads /metrics with token ("" for none) and parses it.
func (p *proc) scrape(token string) map[string]*dto.MetricFamily {
	p.t.Helper()
	c := p.anon().with(token)
	status, body, _ := c.do("GET", "/metrics", nil)
	if status != http.StatusOK {
		p.t.Fatalf("/metrics: %d %.600s", status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		p.t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// sample is the value of family name's metric whose labels include
// labels (name=value pairs), and whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// After traffic, /metrics (behind metrics.token) counts refusals of the
// auth layer under the route called, rate-limited sign-ins, the
// sandboxes (starts, the limit that stopped a command, running ones),
// the jobs, the database's connections and the instance's free space.
func TestMetricsAfterTraffic(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, "  login_limits: {address_failures: 3}\n"+llm(t, shellCall("yes > big"), llmtest.Step{Text: "Done."})+
		"trusted_proxies: [\"127.0.0.0/8\"]\nmetrics: {token: "+metricsToken+"}\n"+
		"sandbox:\n  shell_always_allow: true\n  limits: {disk: 16MiB}\n")
	in.addUser("alice", pw, false)
	p := in.start()

	if status, _, _ := p.anon().do("GET", "/metrics", nil); status != http.StatusUnauthorized {
		t.Fatalf("/metrics without metrics.token: %d, want 401", status)
	}
	if status, _, _ := p.anon().with("wrong").do("GET", "/metrics", nil); status != http.StatusUnauthorized {
		t.Fatalf("/metrics with a wrong token: %d, want 401", status)
	}

	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "fill the disk")
	s.until(agentcore.EventTurnFinished, 120*time.Second)
	s.close()

	// Refused by the auth layer (401 without a token, 403 not admin).
	p.anon().do("POST", "/api/v1/conversations/"+conv+"/messages", map[string]string{"content": "x"})
	a.do("GET", "/api/v1/admin/users", nil)
	// Three failures, then the address is refused.
	for range 4 {
		p.loginStatus("alice", "wrong guess", "X-Forwarded-For", "198.51.100.7")
	}

	fams := p.scrape(metricsToken)
	for _, c := range []struct {
		what   string
		name   string
		labels []string
		min    float64
	}{
		{"401 under its route", "codumentor_http_requests_total", []string{"route", "/api/v1/conversations/:id/messages", "status", "401"}, 1},
		{"403 under its route", "codumentor_http_requests_total", []string{"route", "/api/v1/admin/users", "status", "403"}, 1},
		{"rate-limited sign-ins", "codumentor_logins_total", []string{"result", "rate_limited"}, 1},
		{"refused sign-ins", "codumentor_logins_total", []string{"result", "refused"}, 3},
		{"sandbox sessions started", "codumentor_sandbox_starts_total", []string{"kind", "session"}, 1},
		{"commands started in a session", "codumentor_sandbox_starts_total", []string{"kind", "session-command"}, 1},
		{"commands the disk budget stopped", "codumentor_sandbox_limit_kills_total", []string{"limit", "disk"}, 1},
		{"the conversation's sandbox, running", "codumentor_sandboxes_running", nil, 1},
		{"free bytes of the database's file system", "codumentor_storage_free_bytes", []string{"dir", "data"}, 1},
		{"size of the workspaces' file system", "codumentor_storage_size_bytes", []string{"dir", "workspaces"}, 1},
		{"the database's open connections", "go_sql_open_connections", []string{"db_name", "codumentor"}, 1},
		{"the database's busy errors", "codumentor_database_errors_total", []string{"kind", "busy"}, 0},
		{"jobs by kind and status", "codumentor_jobs", nil, 1},
	} {
		if v, ok := sample(fams, c.name, c.labels...); !ok || v < c.min {
			t.Errorf("%s: %s%v = %v (present %v), want at least %v", c.what, c.name, c.labels, v, ok, c.min)
		}
	}
	if v, ok := sample(fams, "codumentor_http_requests_total", "route", "/api/v1", "status", "401"); ok {
		t.Errorf("%v 401s counted under the group /api/v1 instead of their route", v)
	}
}
