package daemon_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRenderMarkdownBounded: POST /render/markdown is answered in
// bounded time whatever the texts: goldmark takes time growing with the
// square of some inputs (nested lists on one line, unclosed "[]("), so a
// long text comes back as typed, and once the request has spent its
// budget formatting, the rest too.
func TestRenderMarkdownBounded(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("alice", pw, false)
	p := in.start()
	c := p.login("alice", pw)

	// Each text is under the per-text bound but costs formatting time
	// (unclosed links); one is over it (nested lists, ~25 s to parse).
	texts := []string{strings.Repeat("- ", 100_000) + "<b>x</b>"}
	for range 60 {
		texts = append(texts, strings.Repeat("[](", 10_000))
	}
	texts = append(texts, "*last*")
	body, _ := json.Marshal(map[string]any{"texts": texts})
	req, _ := http.NewRequest("POST", p.URL+"/api/v1/render/markdown", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	// Before the bounds, this request took minutes of CPU.
	res, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("render of hostile texts: %v", err)
	}
	defer res.Body.Close()
	observe("POST", "/api/v1/render/markdown", res.StatusCode)
	var out struct {
		HTML []string `json:"html"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusOK || len(out.HTML) != len(texts) {
		t.Fatalf("status %d, %d texts, %v", res.StatusCode, len(out.HTML), err)
	}
	if h := out.HTML[0]; !strings.HasPrefix(h, "<pre") || strings.Contains(h, "<ul>") || !strings.Contains(h, "&lt;b&gt;x&lt;/b&gt;") {
		t.Errorf("the long text renders as %.100q…", h)
	}
	// The budget is spent before the end: the last text is shown as typed.
	if h := out.HTML[len(texts)-1]; h != `<pre tabindex="0" class="plain">*last*</pre>` {
		t.Errorf("the last text renders as %q", h)
	}
}
