package daemon_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// checkPage checks the page the tab shows in the light and the dark
// scheme, at each screenshot size: axe-core finds no violation of any
// impact, nothing is wider than the viewport, and a screenshot is
// saved (name-WxH.png, name-dark-WxH.png), scrolled to the element show
// selects (none: as the page is). ready is the page's loaded condition.
func (w *webUI) checkPage(name, ready, show string) {
	w.t.Helper()
	for _, scheme := range []string{"light", "dark"} {
		w.theme(scheme)
		for _, size := range screenshotSizes {
			w.do(chromedp.EmulateViewport(size[0], size[1]))
			w.until(ready, 20*time.Second)
			if !eval[bool](w, "typeof axe !== 'undefined'") {
				eval[chromedp.Void](w, w.axe)
			}
			where := fmt.Sprintf("%s, %s, %dx%d", name, scheme, size[0], size[1])
			for _, v := range eval[[]axeViolation](w, `axe.run(document, {resultTypes: ['violations']}).then(r => r.violations)`) {
				w.t.Errorf("%s: axe %s (%s): %s on %v", where, v.ID, v.Impact, v.Help, v.Nodes)
			}
			if wide := eval[int](w, "document.documentElement.scrollWidth"); wide > int(size[0]) {
				w.t.Errorf("%s: the page is %d px wide (wider: %s)", where, wide, eval[string](w, wideNodes))
			}
			if show != "" {
				eval[chromedp.Void](w, fmt.Sprintf("document.querySelector(%q).scrollIntoView({block: 'center'})", show))
			}
			shot := name
			if scheme == "dark" {
				shot += "-dark"
			}
			screenshot(w.t, w.ctx, shot)
		}
	}
	w.do(chromedp.EmulateViewport(1280, 800))
	if _, err := chromedp.Call(w.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{}); err != nil {
		w.t.Fatal(err)
	}
}

// webPage is a page to check: its path, its screenshots' name and its
// loaded condition.
type webPage struct{ path, name, ready string }

// visit opens each page and checks it (checkPage).
func (w *webUI) visit(pages ...webPage) {
	w.t.Helper()
	for _, p := range pages {
		w.open(p.path, p.ready)
		w.checkPage(p.name, p.ready, "")
	}
}

// wideNodes names what reaches past the viewport's right edge: elements
// and text.
const wideNodes = `(() => {
  const out = [];
  const name = (e) => e.tagName + (e.id ? '#' + e.id : '') + (e.className ? '.' + e.className : '');
  for (const e of document.querySelectorAll('body *')) if (e.getBoundingClientRect().right > innerWidth + 1) out.push(name(e));
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const r = document.createRange();
  for (let n; (n = walk.nextNode());) { r.selectNodeContents(n); if (r.getBoundingClientRect().right > innerWidth + 1) out.push('text in ' + name(n.parentElement) + ': ' + n.textContent.slice(0, 40)); }
  return out.slice(0, 8).join(', ');
})()`

// press focuses sel and types keys (a key per character; "\r" is
// Enter), as a keyboard-only user does.
func (w *webUI) press(sel, keys string) {
	w.t.Helper()
	w.until(fmt.Sprintf("document.querySelector(%q)", sel), 20*time.Second)
	eval[chromedp.Void](w, fmt.Sprintf("document.querySelector(%q).focus()", sel))
	if got := eval[bool](w, fmt.Sprintf("document.activeElement === document.querySelector(%q)", sel)); !got {
		w.t.Fatalf("%s takes no focus", sel)
	}
	w.do(chromedp.KeyEvent(keys))
}

// TestWebPages drives the workspace, code search, usage, audit log,
// doctor and MCP pages in headless Chromium against the real server,
// keyboard only where a person would type, and checks every page the
// UI has but the conversation (TestWebUI's) with axe-core, light and
// dark, at desktop and phone sizes.
func TestWebPages(t *testing.T) {
	needSandbox(t)
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	for name, body := range map[string]string{
		"README.md":           "hello\n",
		".gitignore":          "build/\n*.log\n",
		"src/config/parse.go": "package config\n\n// parseConfig reads the settings file.\nfunc parseConfig(path string) error {\n\treturn nil\n}\n",
		"docs/guide.md":       "# Guide\n\nCall parse_config to read the settings.\n",
		// Over the 1 MiB an ignore file may hold.
		"big/.gitignore": strings.Repeat("*.tmp\n", 200_000),
		"big/data.txt":   "data\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(work, name)), 0o755)
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "initial")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	other := filepath.Join(dir, "other.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", filepath.Join(dir, "o"))
	os.WriteFile(filepath.Join(dir, "o", "notes.txt"), []byte("nothing to see\n"), 0o644)
	gitCmd(t, filepath.Join(dir, "o"), "add", "-A")
	gitCmd(t, filepath.Join(dir, "o"), "commit", "-q", "-m", "o")
	gitCmd(t, dir, "clone", "-q", "--bare", filepath.Join(dir, "o"), other)

	write := func(path, content string) agentcore.ToolCall {
		return agentcore.ToolCall{Name: "write_file", Arguments: fmt.Sprintf(`{"path":%q,"content":%q}`, path, content)}
	}
	script := &llmtest.Script{Steps: []llmtest.Step{
		{Text: "Building.", ToolCalls: []agentcore.ToolCall{write("build/out.txt", "artifact\n")}},
		{ToolCalls: []agentcore.ToolCall{write("run.log", "log line\n")}},
		{ToolCalls: []agentcore.ToolCall{write("src/config/extra.go", "package config\n\nconst extra = 1\n")}},
		{ToolCalls: []agentcore.ToolCall{{Name: "edit_file", Arguments: `{"path":"README.md","old_string":"hello","new_string":"hello world"}`}}},
		{Text: "Done."},
	}}
	llm, err := llmtest.StartServer(script, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(llm.Close)
	// webretrieve and mermaid_render share the browser: the doctor shows
	// its check once.
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n  allowed_endpoints: [\"http://127.0.0.1:9/v1\"]\nplugins:\n  - workspace_isolation\n  - webretrieve\n  - mermaid_render\n", llm.URL()))
	in.addUser("alice", pw, false)
	in.addUser("root", pw, true)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)
	repo := addRepo(t, admin, "demo", "file://"+bare)
	otherRepo := addRepo(t, admin, "other", "file://"+other)
	var repoInfo struct {
		IndexedCommit string `json:"indexed_commit"`
	}
	a.must(http.StatusOK, "GET", "/api/v1/repositories/"+repo, nil, &repoInfo)
	if repoInfo.IndexedCommit == "" {
		t.Fatal("the repository was not indexed by its sync")
	}

	var conv conversation
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"title": "Build it", "repository": repo}, &conv)
	s := a.follow(conv.ID, "")
	a.send(conv.ID, "build it")
	s.until(agentcore.EventTurnFinished, 120*time.Second)
	s.close()

	w := newWebUI(t, p.URL)
	w.open("/", "document.getElementById('username')")
	w.checkPage("login", "document.getElementById('signin')", "")
	w.signIn("alice", pw)
	w.checkPage("conversations", "document.querySelectorAll('#conversations li').length > 0", "")

	t.Run("workspace", func(t *testing.T) {
		defer w.as(t)()
		// The API marks what the rules ignore, as the diff leaves it out.
		var ls struct {
			Entries []struct {
				Name    string
				Ignored bool
			}
		}
		a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=", nil, &ls)
		var ignored []string
		for _, e := range ls.Entries {
			if e.Ignored {
				ignored = append(ignored, e.Name)
			}
		}
		if !slices.Equal(ignored, []string{".git", "build", "run.log"}) {
			t.Errorf("the API marks %q ignored (of %+v), want .git, build and run.log", ignored, ls.Entries)
		}
		// Rules over their bounds: nothing marked, and why.
		var big struct {
			Entries []struct {
				Name    string
				Ignored bool
			}
			IgnoreError string `json:"ignore_error"`
		}
		a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=big", nil, &big)
		if len(big.Entries) != 2 || big.Entries[0].Ignored || big.Entries[1].Ignored || !strings.Contains(big.IgnoreError, ".gitignore rules are over their limits") {
			t.Errorf("big/ with an ignore file over its bound: %+v", big)
		}
		w.open("/c/"+conv.ID+"/workspace", `document.querySelector('#tree [data-path="src"]')`)
		// The root's entries; what the .gitignore ignores says so.
		top := eval[[]string](w, `[...document.querySelectorAll('#tree > li > button')].map(b => b.dataset.path + (b.parentElement.classList.contains('ignored') ? ' (ignored)' : ''))`)
		want := []string{".git (ignored)", ".gitignore", "README.md", "big", "build (ignored)", "docs", "run.log (ignored)", "src"}
		if !slices.Equal(top, want) {
			t.Errorf("the tree's root shows %q, want %q", top, want)
		}
		if got := eval[string](w, `document.querySelector('#tree li.ignored').innerText`); !strings.Contains(got, "ignored") {
			t.Errorf("an ignored entry reads %q: it does not say so in words", got)
		}
		// Keyboard only: Enter opens src, then src/config, in place; the
		// root stays.
		w.press(`#tree [data-path="src"]`, "\r")
		w.until(`document.querySelector('#tree [data-path="src"]').getAttribute('aria-expanded') === 'true' && document.querySelector('#tree [data-path="src/config"]')`, 20*time.Second)
		w.press(`#tree [data-path="src/config"]`, "\r")
		w.until(`document.querySelector('#tree [data-path="src/config/parse.go"]') && document.querySelector('#tree [data-path="src/config/extra.go"]') && document.querySelector('#tree [data-path="README.md"]')`, 20*time.Second)
		w.press(`#tree [data-path="src/config/extra.go"]`, "\r")
		w.until(`document.getElementById('file').innerText.includes('const extra = 1')`, 20*time.Second)
		w.checkPage("workspace-tree", `document.querySelector('#file pre')`, "")
		// Closed again: its entries are hidden, not gone.
		w.press(`#tree [data-path="src"]`, "\r")
		w.until(`document.querySelector('#tree [data-path="src"]').getAttribute('aria-expanded') === 'false' && !document.querySelector('#tree [data-path="src/config"]').checkVisibility()`, 10*time.Second)
		w.press(`#tree [data-path="big"]`, "\r")
		w.until(`document.querySelector('#tree [data-path="big/data.txt"]') && document.querySelector('#tree [data-path="big"]').parentElement.querySelector('li.hint').textContent.includes('over their limits')`, 20*time.Second)
		// A directory the rules ignore opens too, its entries ignored.
		w.press(`#tree [data-path="build"]`, "\r")
		w.until(`document.querySelector('#tree li.ignored [data-path="build/out.txt"]')`, 20*time.Second)

		// The diff, a part per file; the ignored files are not in it.
		w.press("#load-diff", "\r")
		w.until(`document.querySelectorAll('#diff details.diff-file').length > 0 && document.querySelector('#diff pre')`, 20*time.Second)
		files := eval[[]string](w, `[...document.querySelectorAll('#diff details.diff-file summary .filename')].map(e => e.textContent)`)
		if !slices.Equal(files, []string{"README.md", "src/config/extra.go"}) {
			t.Errorf("the diff's files: %q", files)
		}
		if st := eval[string](w, `document.querySelector('#diff details.diff-file summary').innerText`); !strings.Contains(st, "+1") || !strings.Contains(st, "\u22121") {
			t.Errorf("README.md's summary %q does not count +1 and \u22121", st)
		}
		w.until(`document.getElementById('diff').innerText.includes('+hello world') && document.getElementById('diff').innerText.includes('+const extra = 1')`, 20*time.Second)
		w.checkPage("workspace-diff", `document.querySelectorAll('#diff details.diff-file pre').length === 2`, "")
		// One file collapsed by its summary (keyboard), then all.
		w.press(`#diff details.diff-file summary`, "\r")
		w.until(`!document.querySelector('#diff details.diff-file').open && !document.getElementById('diff').innerText.includes('+hello world') && document.getElementById('diff').innerText.includes('+const extra = 1')`, 10*time.Second)
		w.press("#diff-collapse", "\r")
		w.until(`[...document.querySelectorAll('#diff details.diff-file')].every(d => !d.open)`, 10*time.Second)
		w.press("#diff-collapse", "\r")
		w.until(`[...document.querySelectorAll('#diff details.diff-file')].every(d => d.open) && document.getElementById('diff').innerText.includes('+hello world')`, 10*time.Second)
		// Side by side, per file too.
		w.press("#diff-mode", "\r")
		w.until(`document.querySelectorAll('#diff details.diff-file table.sbs').length === 2 && document.querySelector('#diff td.del').textContent === 'hello' && document.querySelector('#diff td.add').textContent === 'hello world'`, 10*time.Second)
		w.checkPage("workspace-side-by-side", `document.querySelectorAll('#diff table.sbs').length === 2`, "")
	})

	t.Run("search", func(t *testing.T) {
		defer w.as(t)()
		var api struct{ Results []agentcore.Hit }
		a.must(http.StatusOK, "GET", "/api/v1/search?q="+url.QueryEscape("parse config")+"&k=25", nil, &api)
		if len(api.Results) < 2 {
			t.Fatalf("the API finds %d results for parse config, want parse.go and guide.md", len(api.Results))
		}
		w.open("/search", `document.querySelector('#search-repo option[value="`+otherRepo+`"]')`)
		// Keyboard only: the form in order, its syntax help opens.
		w.press("#q", "")
		var order []string
		for range 6 {
			order = append(order, eval[string](w, "document.activeElement.id || document.activeElement.tagName"))
			w.do(chromedp.KeyEvent("\t"))
		}
		if strings.Join(order, " ") != "q search-repo search-branch search-k search-go syntax-h" {
			t.Errorf("focus order on the search page: %q", order)
		}
		w.press("#syntax-h", "\r")
		w.until("document.querySelector('details.syntax').open && document.querySelector('details.syntax').innerText.includes('parse_config') && document.querySelector('details.syntax').innerText.includes('sym:parseConfig')", 10*time.Second)
		w.checkPage("search-empty", "document.getElementById('q')", "")
		w.press("#q", "parse config\r")
		w.until("document.querySelectorAll('#search-results .hit-file').length > 0", 20*time.Second)
		// Grouped by file, each once, in the API's order.
		var wantFiles []string
		for _, h := range api.Results {
			if !slices.Contains(wantFiles, h.Path) {
				wantFiles = append(wantFiles, h.Path)
			}
		}
		gotFiles := eval[[]string](w, `[...document.querySelectorAll('#search-results .hit-path')].map(h => h.lastChild.textContent)`)
		if !slices.Equal(gotFiles, wantFiles) {
			t.Errorf("the page groups the results as %q, want %q", gotFiles, wantFiles)
		}
		// Line numbers from the API's, the words marked.
		for _, h := range api.Results {
			sel := fmt.Sprintf(`[...[...document.querySelectorAll('#search-results .hit-file')].find(s => s.querySelector('.hit-path').lastChild.textContent === %q)`, h.Path)
			lines := eval[[]string](w, sel+`.querySelectorAll('.snippet tr')].map(r => r.cells[0].textContent + ' ' + r.cells[1].textContent)`)
			first := strings.SplitN(h.Snippet, "\n", 2)[0]
			if !slices.Contains(lines, fmt.Sprint(h.StartLine, " ", first)) {
				t.Errorf("%s's snippet starts %q, want line %d: %q", h.Path, lines, h.StartLine, first)
			}
		}
		marks := eval[[]string](w, `[...document.querySelectorAll('#search-results mark')].map(m => m.textContent.toLowerCase())`)
		if !slices.Contains(marks, "parse") || !slices.Contains(marks, "config") {
			t.Errorf("the marked words are %q, want parse and config among them", marks)
		}
		if got := eval[string](w, "location.search"); got != "?q=parse+config&k=25" {
			t.Errorf("the search's address is %q", got)
		}
		w.checkPage("search", "document.querySelectorAll('#search-results .hit-file').length > 0", "")
		// Another repository: nothing there.
		eval[chromedp.Void](w, fmt.Sprintf("document.getElementById('search-repo').value = %q", otherRepo))
		w.press("#search-go", "\r")
		w.until("document.getElementById('search-summary').textContent === 'Nothing found.' && !document.querySelector('#search-results .hit-file')", 20*time.Second)
		// A branch no repository has: nothing, and the address keeps it.
		eval[chromedp.Void](w, "document.getElementById('search-repo').value = ''")
		w.fill("#search-branch", "release-1.x")
		w.press("#search-go", "\r")
		w.until("document.getElementById('search-summary').textContent === 'Nothing found.' && location.search.includes('branch=release-1.x')", 20*time.Second)
		w.fill("#search-branch", "")
		// The server's refusal, said on the page.
		w.fill("#q", "!!!")
		w.press("#search-go", "\r")
		w.until("document.getElementById('search-summary').classList.contains('error') && document.getElementById('search-summary').textContent.length > 10", 20*time.Second)
		// The query language: a regular expression with a path filter
		// finds the one file; a syntax error says where it is.
		eval[chromedp.Void](w, "document.getElementById('search-repo').value = ''")
		w.fill("#q", "/func parse\\w+\\(/ path:src/")
		w.press("#search-go", "\r")
		w.until("document.querySelectorAll('#search-results .hit-file').length === 1 && document.querySelector('#search-results .hit-path').lastChild.textContent === 'src/config/parse.go'", 20*time.Second)
		w.fill("#q", `parse "config`)
		w.press("#search-go", "\r")
		w.until("document.getElementById('search-summary').classList.contains('error') && document.getElementById('search-summary').textContent.includes('column 7')", 20*time.Second)
		// A search's address shows its results; open one in a
		// conversation on the repository at the indexed commit.
		w.open("/search?q=parseConfig&repository="+repo, "document.querySelector('#search-results .open-conv')")
		if v := eval[string](w, "document.getElementById('search-repo').value"); v != repo {
			t.Errorf("the repository filter from the address is %q", v)
		}
		w.press("#search-results .open-conv", "\r")
		w.until("location.pathname.startsWith('/c/')", 20*time.Second)
		id := strings.TrimPrefix(eval[string](w, "location.pathname"), "/c/")
		var c struct {
			Title      string
			Repository string
			BaseCommit string `json:"base_commit"`
		}
		a.must(http.StatusOK, "GET", "/api/v1/conversations/"+id, nil, &c)
		if c.Repository != repo || c.BaseCommit != repoInfo.IndexedCommit || !strings.HasPrefix(c.Title, "src/config/parse.go:") {
			t.Errorf("the conversation opened from a result: %+v, want on %s at %s", c, repo, repoInfo.IndexedCommit)
		}
	})

	t.Run("usage", func(t *testing.T) {
		defer w.as(t)()
		w.open("/usage", "document.querySelector('#mine tbody tr th')")
		if got := eval[[]string](w, "[...document.querySelectorAll('#mine tbody tr')].map(r => r.cells[0].textContent + ' ' + r.cells[1].textContent)"); len(got) != 1 || got[0] != "test 5" {
			t.Errorf("alice's usage by model: %q, want the 5 calls to test", got)
		}
		if eval[bool](w, "!!document.getElementById('all-form')") {
			t.Error("alice sees everyone's usage")
		}
		if q := eval[string](w, "document.getElementById('quota').textContent"); !strings.Contains(q, "used today") {
			t.Errorf("alice's quota line: %q", q)
		}
		eval[chromedp.Void](w, "document.getElementById('mine-group').value = 'day'")
		w.press("#mine-form button", "\r")
		w.until("document.querySelector('#mine thead').innerText.includes('Day') && /^\\d{4}-\\d\\d-\\d\\d$/.test(document.querySelector('#mine tbody th').textContent)", 20*time.Second)
		w.checkPage("usage", "document.querySelector('#mine tbody th')", "")
	})

	t.Run("secrets-profiles", func(t *testing.T) {
		defer w.as(t)()
		w.visit(
			webPage{"/secrets", "secrets", "document.querySelector('#secrets li')"},
			webPage{"/profiles", "profiles", "document.querySelector('#profile-endpoint option')"})
	})

	w.signIn("root", pw)
	t.Run("admin-usage", func(t *testing.T) {
		defer w.as(t)()
		w.open("/usage", "document.querySelector('#all tbody tr th')")
		if got := eval[[]string](w, "[...document.querySelectorAll('#all tbody tr')].map(r => r.cells[0].textContent + ' ' + r.cells[1].textContent)"); !slices.Contains(got, "alice 5") {
			t.Errorf("everyone's usage by user: %q, want alice's 5 calls", got)
		}
		w.fill("#all-user", "alice")
		eval[chromedp.Void](w, "document.getElementById('all-group').value = 'model'")
		w.press("#all-form button", "\r")
		w.until("document.querySelector('#all tbody th') && document.querySelector('#all tbody th').textContent === 'test' && document.getElementById('all-quota').textContent.includes('used today')", 20*time.Second)
		w.checkPage("usage-admin", "document.querySelector('#all tbody th')", "")
	})

	t.Run("audit", func(t *testing.T) {
		defer w.as(t)()
		admin.must(http.StatusBadRequest, "GET", "/api/v1/admin/audit/verify?head=nonsense", nil, nil)
		a.must(http.StatusForbidden, "GET", "/api/v1/admin/audit/verify", nil, nil)
		w.open("/admin/audit", "document.getElementById('audit-verdict').textContent.startsWith('Intact') && document.querySelectorAll('#audit tbody tr').length > 3")
		if v := eval[string](w, "document.getElementById('audit-verdict').textContent"); !strings.Contains(v, "records checked") || !strings.Contains(v, "Newest: ") {
			t.Errorf("the verdict says %q", v)
		}
		if cur := eval[string](w, `[...document.querySelectorAll('nav [aria-current=page]')].map(a => a.textContent).join(' ')`); cur != "Admin Audit log" {
			t.Errorf("the navigation marks %q as the current page", cur)
		}
		// Filters: kind, user (by name), time.
		w.fill("#audit-kind", "login")
		w.press("#audit-filter button", "\r")
		w.until("[...document.querySelectorAll('#audit tbody tr')].every(r => r.cells[2].textContent === 'login') && document.querySelectorAll('#audit tbody tr').length >= 2", 20*time.Second)
		w.fill("#audit-user", "alice")
		w.press("#audit-filter button", "\r")
		w.until("document.querySelectorAll('#audit tbody tr').length >= 1 && [...document.querySelectorAll('#audit tbody tr')].every(r => r.cells[2].textContent === 'login' && r.cells[3].textContent === 'alice')", 20*time.Second)
		w.checkPage("audit", "document.querySelectorAll('#audit tbody tr').length >= 1", "")
		w.fill("#audit-since", time.Now().Add(time.Hour).Format("2006-01-02T15:04:05"))
		w.press("#audit-filter button", "\r")
		w.until("document.querySelectorAll('#audit tbody tr').length === 0 && !document.getElementById('audit-empty').hidden", 20*time.Second)
		// A head kept earlier, then an edited record: the verdict names it.
		head := strings.TrimPrefix(eval[string](w, "document.getElementById('audit-verdict').textContent"), "")
		_, head, _ = strings.Cut(head, "Newest: ")
		w.fill("#verify-head", head)
		w.press("#verify-form button", "\r")
		w.until(fmt.Sprintf("document.getElementById('audit-verdict').textContent.includes(%q)", "reaches the head "+head), 20*time.Second)
		var rec struct {
			Records []struct{ Seq int64 }
		}
		admin.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=login&user=alice", nil, &rec)
		if len(rec.Records) == 0 {
			t.Fatal("no login of alice in the audit log")
		}
		seq := rec.Records[0].Seq
		var data []byte
		if err := in.auditDB().Raw(`SELECT data FROM audit_log WHERE seq = ?`, seq).Row().Scan(&data); err != nil {
			t.Fatal(err)
		}
		if err := in.auditDB().Exec(`UPDATE audit_log SET data = ? WHERE seq = ?`, bytes.ReplaceAll(data, []byte("alice"), []byte("mallory")), seq).Error; err != nil {
			t.Fatal(err)
		}
		w.fill("#verify-head", "")
		w.press("#verify-form button", "\r")
		w.until(fmt.Sprintf("document.getElementById('audit-verdict').textContent.startsWith('Broken at record %d: ') && document.getElementById('audit-verdict').classList.contains('bad')", seq), 20*time.Second)
		w.checkPage("audit-broken", "document.getElementById('audit-verdict').classList.contains('bad')", "")
		// A record under a key the server does not have.
		if err := in.auditDB().Exec(`UPDATE audit_log SET key_id = '00000000' WHERE seq = 1`).Error; err != nil {
			t.Fatal(err)
		}
		var v struct {
			Intact   bool
			Records  int64
			BrokenAt int64 `json:"broken_at"`
			Problem  string
		}
		admin.must(http.StatusOK, "GET", "/api/v1/admin/audit/verify", nil, &v)
		if v.Intact || v.Records != 0 || !strings.Contains(v.Problem, "record 1 is MACed under key ID 00000000") {
			t.Errorf("the verdict on a record under an unknown key: %+v", v)
		}
		w.press("#verify-form button", "\r")
		w.until("document.getElementById('audit-verdict').textContent.includes('key ID 00000000')", 20*time.Second)
	})

	t.Run("doctor", func(t *testing.T) {
		defer w.as(t)()
		w.open("/admin/doctor", "document.querySelector('#checks tbody tr')")
		names := eval[[]string](w, "[...document.querySelectorAll('#checks tbody tr')].map(r => r.cells[0].textContent)")
		if n := len(slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s != "browser" })); n != 1 {
			t.Errorf("the doctor lists the browser %d times: %q", n, names)
		}
		w.checkPage("doctor", "document.querySelector('#checks tbody tr')", "")
	})

	t.Run("admin-pages", func(t *testing.T) {
		defer w.as(t)()
		w.visit(
			webPage{"/admin/mcp", "mcp", "!document.getElementById('mcp-off').hidden || document.querySelector('#mcp tbody tr')"},
			webPage{"/admin/users", "users", "document.querySelectorAll('#users tbody tr').length >= 2"},
			webPage{"/admin/repositories", "repositories", "document.querySelectorAll('#repos tbody tr:not([hidden])').length === 2"},
			webPage{"/admin/system-prompt", "sysprompt", "document.getElementById('prompt-rendered').textContent.length > 0"})
	})

	if pr := w.seen(&w.problems); len(pr) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(pr, "\n"))
	}
	if o := w.seen(&w.outside); len(o) > 0 {
		t.Errorf("requests left for outside hosts: %q", o)
	}
}
