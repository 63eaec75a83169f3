package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/integrations/browser"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func needChrome(t *testing.T) {
	t.Helper()
	if _, err := browser.FindChrome(""); err != nil {
		sandboxtest.SkipOrFail(t, "%v", err)
	}
}

// TestBrowserPlugins: the scripted model reads a local page with
// fetch_urls; a redirect to the metadata address and a page whose script
// calls the server's own port are refused (the server sees no request
// from the page); diagrams render through the API; the Chrome sandbox
// verdict is logged once across two browser launches.
func TestBrowserPlugins(t *testing.T) {
	needChrome(t)
	var serverURL atomic.Pointer[url.URL]
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><head><title>Local page</title></head><body><main>Hello from the test page</main></body></html>`)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(500 * time.Millisecond) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	})
	mux.HandleFunc("/script", func(w http.ResponseWriter, r *http.Request) {
		target := serverURL.Load().String() + "/healthz"
		fmt.Fprintf(w, `<html><body><p id="out">waiting</p><script>
fetch(%q).then(r => r.text()).then(t => { out.textContent = 'LEAKED ' + t; }, e => { out.textContent = 'fetch blocked'; });
</script><img src="/slow"></body></html>`, target)
	})
	site := httptest.NewServer(mux)
	defer site.Close()

	args := fmt.Sprintf(`{"urls":[%q,%q,%q]}`, site.URL+"/page", site.URL+"/redirect", site.URL+"/script")
	in := newInstance(t, llm(t,
		llmtest.Step{Text: "Reading.", ToolCalls: []agentcore.ToolCall{{Name: "fetch_urls", Arguments: args}}},
		llmtest.Step{Text: "done"},
	)+"plugins: [webretrieve, mermaid_render]\nwebretrieve:\n  allow_private: true\nbrowser:\n  idle_timeout: 200ms\n")
	alice := in.addUser("alice", pw, false)
	in.addUser("root", pw, true)
	p := in.start()
	u, _ := url.Parse(p.URL)
	serverURL.Store(u)
	a := p.login("alice", pw)

	conv := a.newConversation()
	s := a.follow(conv, "")
	a.send(conv, "read these")
	var output string
	for _, ev := range s.until(agentcore.EventTurnFinished, 60*time.Second) {
		if ev.Type == agentcore.EventToolOutput {
			var d struct{ Output string }
			json.Unmarshal(eventData(t, ev), &d)
			output += d.Output
		}
	}
	for _, want := range []string{"Hello from the test page", "169.254.169.254 is a link-local or cloud metadata address", "is the server's own port", "fetch blocked"} {
		if !strings.Contains(output, want) {
			t.Errorf("fetch_urls output lacks %q:\n%s", want, output)
		}
	}
	if strings.Contains(output, "LEAKED") {
		t.Errorf("a page reached the server:\n%s", output)
	}

	// The browser stops when idle (idle_timeout), so the render starts it
	// again.
	sandboxtest.Eventually(t, 30*time.Second, func() error {
		if pid := childRunning(p.cmd.Process.Pid, "\x00--remote-debugging-"); pid != 0 {
			return fmt.Errorf("the browser (pid %d) still runs", pid)
		}
		return nil
	})
	status, svg, h := a.do("POST", "/api/v1/render/diagram", map[string]string{"source": "graph TD\n  A[Client] --> B[Server]\n"})
	if status != http.StatusOK || !bytes.HasPrefix(svg, []byte("<svg")) || h.Get("Content-Type") != "image/svg+xml" || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("render svg = %d %s %.200s", status, h, svg)
	}
	status, img, h := a.do("POST", "/api/v1/render/diagram", map[string]string{"source": "graph TD\n  A[Client] --> B[Server]\n", "format": "png"})
	if status != http.StatusOK || h.Get("Content-Type") != "image/png" {
		t.Fatalf("render png = %d %s", status, h)
	}
	if _, err := png.Decode(bytes.NewReader(img)); err != nil {
		t.Errorf("png: %v", err)
	}
	for _, tc := range []struct {
		body   map[string]string
		status int
		code   string
	}{
		{map[string]string{"source": "graph TD\n  A -->"}, http.StatusUnprocessableEntity, "unrenderable"},
		{map[string]string{"source": "graph TD\n  A --> B", "format": "gif"}, http.StatusBadRequest, "bad_request"},
		{map[string]string{"source": ""}, http.StatusUnprocessableEntity, "unrenderable"},
	} {
		status, body, _ := a.do("POST", "/api/v1/render/diagram", tc.body)
		if status != tc.status || !strings.Contains(string(body), `"code":"`+tc.code+`"`) {
			t.Errorf("render %v = %d %s, want %d %s", tc.body, status, body, tc.status, tc.code)
		}
	}
	// A directive cannot turn HTML labels back on (a foreignObject with
	// the author's <img>), and its PNG renders too.
	pinned := "%%{init: {\"htmlLabels\": true, \"flowchart\": {\"htmlLabels\": true}}}%%\ngraph TD\n  A[\"<img src='" + site.URL + "/img'> label\"] --> B\n"
	for _, f := range []string{"svg", "png"} {
		status, body, _ := a.do("POST", "/api/v1/render/diagram", map[string]string{"source": pinned, "format": f})
		if status != http.StatusOK || bytes.Contains(bytes.ToLower(body), []byte("foreignobject")) || bytes.Contains(body, []byte("<img")) {
			t.Errorf("render %s with htmlLabels directive = %d %.300s", f, status, body)
		}
	}
	if n := strings.Count(p.stderr.String(), "Chrome sandbox"); n != 1 {
		t.Errorf("the log states the Chrome sandbox verdict %d times, want once:\n%s", n, p.stderr)
	}
	// Both starts of the browser are in the audit log, with the sandbox
	// verdict, for who caused them: the conversation's fetch_urls, then
	// alice's render.
	var page api.AuditPage
	p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=browser_launch", nil, &page)
	var got []string
	for _, r := range page.Records {
		var d map[string]string
		json.Unmarshal(r.Data, &d)
		if r.User != alice.ID || (d["sandbox"] != "on" && d["sandbox"] != "off") || d["binary"] == "" {
			t.Errorf("browser_launch record by %q: %v", r.User, d)
		}
		got = append(got, d["conversation"])
	}
	if len(got) < 2 || got[0] != conv || got[len(got)-1] != "" {
		t.Errorf("browser_launch records for conversations %q, want %s's fetch then the render's", got, conv)
	}
}

// TestRenderDiagramNotEnabled: without the plugin the route says so.
func TestRenderDiagramNotEnabled(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("alice", pw, false)
	p := in.start()
	status, body, _ := p.login("alice", pw).do("POST", "/api/v1/render/diagram", map[string]string{"source": "graph TD\n  A --> B"})
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "not_enabled") {
		t.Errorf("render = %d %s, want 503 not_enabled", status, body)
	}
}

// TestBrowserSandboxWarning: while the browser runs without Chrome's
// sandbox (here CODUMENTOR_CHROME_SANDBOX=0), the doctor's browser row
// is a warning with its remedy, and the warnings say so; with
// browser.require_sandbox the server refuses that environment.
func TestBrowserSandboxWarning(t *testing.T) {
	needChrome(t)
	in := newInstance(t, llm(t)+"plugins: [mermaid_render]\n")
	in.addUser("root", pw, true)
	p := in.start(browser.EnvSandbox + "=0")
	root := p.login("root", pw)
	doctor := func() (api.Check, api.Readiness) {
		var r api.Readiness
		root.must(http.StatusOK, "GET", "/api/v1/admin/doctor", nil, &r)
		for _, c := range r.Checks {
			if c.Name == "browser" {
				return c, r
			}
		}
		t.Fatalf("no browser check: %+v", r)
		return api.Check{}, r
	}
	// Not started yet: nothing to warn of.
	if c, _ := doctor(); !c.OK || c.Warning {
		t.Errorf("browser row before the first start = %+v", c)
	}
	if status, body, _ := root.do("POST", "/api/v1/render/diagram", map[string]string{"source": "graph TD\n  a --> b"}); status != http.StatusOK {
		t.Fatalf("render = %d %s", status, body)
	}
	c, r := doctor()
	if !c.OK || !c.Warning || !strings.Contains(c.Detail, "Chrome sandbox off") || !strings.Contains(c.Remedy, "browser.require_sandbox: true") || !r.Ready {
		t.Errorf("browser row while running with --no-sandbox = %+v (ready %v), want OK with a warning", c, r.Ready)
	}
	if !slices.ContainsFunc(r.Warnings, func(w string) bool {
		return strings.HasPrefix(w, "browser: ") && strings.Contains(w, "Chrome sandbox off")
	}) {
		t.Errorf("warnings = %q, want the browser's", r.Warnings)
	}
	p.stop()

	in2 := newInstance(t, llm(t)+"plugins: [mermaid_render]\nbrowser:\n  require_sandbox: true\n")
	if p, err := in2.run(browser.EnvSandbox + "=0"); err == nil {
		p.stop()
		t.Errorf("require_sandbox with %s=0 started", browser.EnvSandbox)
	} else if !strings.Contains(err.Error(), "browser.require_sandbox is set") {
		t.Errorf("require_sandbox with %s=0: %v", browser.EnvSandbox, err)
	}
}
