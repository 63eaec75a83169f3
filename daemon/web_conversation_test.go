package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// theme emulates prefers-color-scheme.
func (w *webUI) theme(scheme string) {
	w.t.Helper()
	if _, err := chromedp.Call(w.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}}); err != nil {
		w.t.Fatal(err)
	}
}

// key presses one key (with modifiers) in the focused element.
func (w *webUI) key(k string, mods ...chromedp.Modifier) {
	w.t.Helper()
	var m chromedp.Modifier
	for _, x := range mods {
		m |= x
	}
	w.do(chromedp.KeyEvent(k, chromedp.KeyModifiers(m)))
}

// clipboard is what the page's last copy put on the clipboard.
func (w *webUI) clipboard() string {
	w.t.Helper()
	return eval[string](w, "navigator.clipboard.readText()")
}

// The conversation page driven as a person would, by keyboard where a
// key is offered: Enter and Shift+Enter, Esc, "?", the approval taking
// focus and the tab's title, tool output in terminal colours folded
// behind "Show all", Markdown blocks, copying, renaming and switching
// the model; axe-core finds nothing in light or dark mode in each state.
func TestWebConversation(t *testing.T) {
	needSandbox(t)
	const (
		reply = "Here is the plan.\n\n| step | state |\n|:--|--:|\n| read | done |\n| write | next |\n\n> Quoted from the README.\n\n" +
			"- [x] looked\n- [ ] fixed\n\n```go\nfunc main() { fmt.Println(\"hi\", 42) } // a comment\n```\n\n```python\nx = None  # nothing\n```\n"
		// The tool's output: colours, an OSC title, a screen clear, HTML,
		// a progress line rewritten by carriage returns, a bell, 60 lines.
		command = `printf '\033[31mred\033[0m \033[1;32mbold green\033[0m \033[4;38;5;33munder\033[0m\n\033]0;pwned-title\007\033[2J\033[Hcleared\n<img src=x onerror=alert(1)>\n10%%\r50%%\r100%%\n\a'; seq 1 60`
		slow    = "This reply takes its time, a word at a time, "
	)
	main, err := llmtest.StartServer(&llmtest.Script{Reply: func(req agentcore.Request) (llmtest.Step, error) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == agentcore.RoleTool:
			return llmtest.Step{Text: "Done, the output is above."}, nil
		case strings.Contains(last.Content, "show me"):
			return llmtest.Step{Reasoning: "The user wants the plan and the output.", Text: reply,
				ToolCalls: []agentcore.ToolCall{{Name: "shell", Arguments: fmt.Sprintf(`{"command":%q}`, command)}}}, nil
		case strings.Contains(last.Content, "slowly"):
			return llmtest.Step{Text: strings.Repeat(slow, 8), Stall: true}, nil
		}
		return llmtest.Step{Text: "OK."}, nil
	}}, llmtest.Options{ChunkDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(main.Close)
	other, err := llmtest.StartServer(&llmtest.Script{Reply: func(agentcore.Request) (llmtest.Step, error) {
		return llmtest.Step{Text: "From the other model."}, nil
	}}, llmtest.Options{Model: "other-model"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n  allowed_endpoints: [%s]\n", main.URL(), other.URL()))
	in.addUser("alice", pw, false)
	in.addUser("root", pw, true)
	p := in.start()
	a := p.login("alice", pw)
	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/other", map[string]string{"endpoint": other.URL(), "model": "other-model"}, nil)
	conv := a.newConversation()

	w := newWebUI(t, p.URL)
	for _, perm := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.Call(w.ctx, browser.SetPermission, browser.SetPermissionParams{Origin: w.base,
			Permission: &browser.PermissionDescriptor{Name: perm}, Setting: browser.PermissionSettingGranted}); err != nil {
			t.Fatal(err)
		}
	}
	// The clipboard needs a focused page.
	focus := func(on bool) {
		t.Helper()
		if _, err := chromedp.Call(w.ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: on}); err != nil {
			t.Fatal(err)
		}
	}
	focus(true)
	w.signIn("alice", pw)
	w.open("/c/"+conv, "window.codumentor && codumentor.opens > 0 && !document.querySelector('.model-switch').hidden")
	if n := firstLoadBytes(w, "/c/"+conv); n > maxFirstLoad {
		t.Errorf("the conversation page ships %d bytes on first load, over the budget of %d", n, maxFirstLoad)
	}
	w.checkPage("conversation-empty", "document.getElementById('message')", "#message")
	if eval[bool](w, "document.getElementById('rename-form').checkVisibility()") {
		t.Error("the rename form shows before Rename is pressed")
	}

	// Shift+Enter is a new line, Enter sends. At phone size: the
	// approval to come must be scrolled to.
	w.do(chromedp.EmulateViewport(390, 844))
	w.do(chromedp.Focus(chromedp.ID("message")))
	w.do(chromedp.KeyEvent("show me"))
	w.key("\r", chromedp.ModifierShift)
	w.do(chromedp.KeyEvent("the output"))
	if got := eval[string](w, "document.getElementById('message').value"); got != "show me\nthe output" {
		t.Fatalf("after Shift+Enter the box holds %q", got)
	}
	if n := eval[int](w, "document.querySelectorAll('.msg.user').length"); n != 0 {
		t.Fatal("Shift+Enter sent the message")
	}
	w.key("\r")
	w.until("document.querySelector('.msg.user') && document.getElementById('message').value === ''", 20*time.Second)
	if got := eval[string](w, "document.querySelector('.msg.user .role').textContent"); got != "You" {
		t.Errorf("the user message's heading says %q", got)
	}
	// The reasoning, collapsed, then the reply in pieces.
	w.until("document.querySelector('details.reasoning') && document.querySelector('.msg.assistant .md') && document.querySelector('.msg.assistant .md').textContent.length > 10", 30*time.Second)
	if eval[bool](w, "document.querySelector('details.reasoning').open") {
		t.Error("the reasoning is shown expanded")
	}
	if got := eval[string](w, "document.querySelector('.msg.assistant .role').textContent"); !strings.HasPrefix(got, "Assistant") {
		t.Errorf("the reply's heading says %q", got)
	}

	// The approval: announced, scrolled to, focused; the background
	// tab's title says it waits.
	w.until("document.querySelector('.approval .approve')", 60*time.Second)
	if got := eval[string](w, "document.activeElement.id"); !strings.HasPrefix(got, "approval-") {
		t.Errorf("the focus is on %q, not the approval card", got)
	}
	if !eval[bool](w, "(r => r.top >= 0 && r.top < innerHeight)(document.querySelector('.approval').getBoundingClientRect())") {
		t.Error("at 390x844 the approval card is not on screen")
	}
	if got := eval[string](w, "document.getElementById('announce').textContent"); !strings.HasPrefix(got, "Approval needed: run printf") {
		t.Errorf("the live region says %q", got)
	}
	if got := eval[string](w, "document.getElementById('announce').getAttribute('aria-live')"); got != "assertive" {
		t.Errorf("the announcement's aria-live is %q", got)
	}
	w.do(chromedp.EmulateViewport(1280, 800))
	title := eval[string](w, "document.title")
	if strings.Contains(title, "Approval") {
		t.Errorf("the visible tab's title is %q", title)
	}
	// The window minimized (and the focus no longer emulated, which
	// keeps a page visible): the page is in the background.
	win, err := chromedp.Call(w.ctx, browser.GetWindowForTarget, browser.GetWindowForTargetParams{})
	if err != nil {
		t.Fatal(err)
	}
	setWindow := func(state browser.WindowState) {
		t.Helper()
		if _, err := chromedp.Call(w.ctx, browser.SetWindowBounds, browser.SetWindowBoundsParams{WindowID: win.WindowID, Bounds: &browser.Bounds{WindowState: state}}); err != nil {
			t.Fatal(err)
		}
	}
	focus(false)
	setWindow(browser.WindowStateMinimized)
	w.until("document.visibilityState === 'hidden' && document.title === '(1) Approval waiting · "+title+"'", 10*time.Second)
	setWindow(browser.WindowStateNormal)
	focus(true)
	w.until("document.visibilityState === 'visible' && document.title === '"+title+"'", 10*time.Second)
	if got := eval[string](w, "document.querySelector('.approval .allow-rule') ? 'offered' : 'none'"); got != "none" {
		// No user_rules configured: the server proposes none.
		t.Errorf("the card offers a rule the server cannot add: %s", got)
	}
	w.checkPage("conversation-approval", "document.querySelector('.approval .approve')", ".approval")
	w.click(".approval .approve")
	w.until("document.getElementById('turn-state').textContent === '' && document.getElementById('transcript').innerText.includes('Done, the output is above.')", 60*time.Second)
	if got := eval[string](w, "document.title"); got != title {
		t.Errorf("after the approval the title is %q", got)
	}

	// The tool output as a terminal shows it.
	out := "document.querySelector('details.tool .output')"
	if got := eval[string](w, out+".textContent"); strings.ContainsAny(got, "\x1b\x07\r") || strings.Contains(got, "pwned-title") || strings.Contains(got, "10%") || strings.Contains(got, "50%") ||
		!strings.HasPrefix(got, "red bold green under\ncleared\n<img src=x onerror=alert(1)>\n100%\n1\n2\n") || !strings.HasSuffix(got, "\n60\n[exit status 0]") {
		t.Errorf("the tool output reads %q", got)
	}
	if got := eval[string](w, "[...document.querySelectorAll('details.tool .output span')].map(s => s.className + '=' + s.textContent).join('|')"); got != "t-fg-1=red|t-fg-2 t-b=bold green|t-fg-6 t-u=under" {
		t.Errorf("the output's styled spans: %q", got)
	}
	if n := eval[int](w, out+".querySelectorAll('*:not(span)').length"); n != 0 {
		t.Errorf("the output holds %d elements other than spans", n)
	}
	eval[chromedp.Void](w, "document.querySelectorAll('details').forEach(d => { d.open = true })")
	more := "document.querySelector('details.tool .show-all')"
	if got := eval[string](w, more+".textContent + ' ' + "+more+".getAttribute('aria-expanded') + ' ' + "+out+".classList.contains('folded')"); got != "Show all 65 lines false true" {
		t.Errorf("the long output's fold: %q", got)
	}
	if !eval[bool](w, out+".scrollHeight > "+out+".clientHeight + 100") {
		t.Error("the folded output shows it all")
	}
	w.checkPage("conversation-tool-output", "document.querySelector('details.tool[open] .output.folded')", "details.tool .output")
	eval[chromedp.Void](w, "document.querySelector('details.tool .show-all').focus()")
	w.key("\r")
	w.until(more+".getAttribute('aria-expanded') === 'true' && !"+out+".classList.contains('folded') && "+more+".textContent === 'Show less'", 5*time.Second)
	w.checkPage("conversation-tool-output-all", "document.querySelector('details.tool[open] .output:not(.folded)')", "details.tool .show-all")

	// The reply: the model's name, its Markdown blocks, its tokens.
	if got := eval[string](w, "document.querySelector('.msg.assistant .role').textContent"); got != "Assistant · test" {
		t.Errorf("the reply's heading says %q", got)
	}
	if got := eval[string](w, "[...document.querySelectorAll('.msg.assistant figure.code figcaption')].map(c => c.textContent).join()"); got != "go,python" {
		t.Errorf("the code blocks' languages: %q", got)
	}
	for sel, want := range map[string]int{
		".msg.assistant table th":                                 2,
		".msg.assistant blockquote":                               1,
		".msg.assistant input[type=checkbox][aria-label=done]":    1,
		".msg.assistant input[type=checkbox][aria-label='to do']": 1,
		".msg.assistant figure.code > button.copy":                2,
		"#transcript .usage":                                      1,
	} {
		if n := eval[int](w, fmt.Sprintf("document.querySelectorAll(%q).length", sel)); n != want {
			t.Errorf("%d of %s, want %d", n, sel, want)
		}
	}
	// Copying: a code block, the reply (its Markdown), the message.
	w.click(".msg.assistant figure.code button.copy")
	w.until("document.getElementById('status').textContent === 'The code copied.'", 10*time.Second)
	if got := w.clipboard(); got != "func main() { fmt.Println(\"hi\", 42) } // a comment\n" {
		t.Errorf("Copy on the go block copied %q", got)
	}
	w.click(".msg.assistant .actions button.copy")
	w.until("document.getElementById('status').textContent === 'The reply copied.'", 10*time.Second)
	if got := w.clipboard(); got != reply {
		t.Errorf("Copy on the reply copied %q", got)
	}
	w.click(".msg.user .actions button.copy")
	w.until("document.getElementById('status').textContent === 'Your message copied.'", 10*time.Second)
	if got := w.clipboard(); got != "show me\nthe output" {
		t.Errorf("Copy on the message copied %q", got)
	}

	// "?" outside a text field lists the shortcuts; Esc closes the list.
	eval[chromedp.Void](w, "document.activeElement.blur()")
	w.do(chromedp.KeyEvent("?"))
	w.until("document.getElementById('help').open", 5*time.Second)
	if got := eval[string](w, "document.getElementById('help').innerText"); !strings.Contains(got, "Shift + Enter") || !strings.Contains(got, "Stop the running turn") {
		t.Errorf("the shortcuts list says %q", got)
	}
	w.checkPage("conversation-shortcuts", "document.getElementById('help').open", "#help")
	w.key("\x1b")
	w.until("!document.getElementById('help').open", 5*time.Second)
	w.do(chromedp.Focus(chromedp.ID("message")))
	w.do(chromedp.KeyEvent("?"))
	if eval[bool](w, "document.getElementById('help').open") || eval[string](w, "document.getElementById('message').value") != "?" {
		t.Error("'?' typed in the message box opened the shortcuts")
	}
	eval[chromedp.Void](w, "document.getElementById('message').value = ''")

	// Streaming (the reply stalls part-way), then Esc stops the turn.
	w.do(chromedp.KeyEvent("tell it slowly\r"))
	w.until("!document.getElementById('cancel').hidden && document.querySelectorAll('.msg.assistant').length === 3", 30*time.Second)
	w.checkPage("conversation-streaming", "!document.getElementById('cancel').hidden", "#turn-state")
	// While it runs the model cannot change: the switch says so and goes
	// back.
	eval[chromedp.Void](w, "(s => { s.value = 'other'; s.dispatchEvent(new Event('change')) })(document.getElementById('model-profile'))")
	w.until("document.getElementById('status').classList.contains('error') && document.getElementById('model-profile').value === ''", 10*time.Second)
	w.do(chromedp.Focus(chromedp.ID("message")))
	w.key("\x1b")
	w.until("document.getElementById('cancel').hidden && document.getElementById('transcript').innerText.includes('Stopped.')", 30*time.Second)

	// Rename, by the keyboard: Esc leaves it, Enter saves.
	w.click("#rename")
	w.until("document.activeElement.id === 'new-title'", 5*time.Second)
	w.key("\x1b")
	w.until("!document.getElementById('rename-form').checkVisibility() && document.activeElement.id === 'rename'", 5*time.Second)
	w.key("\r")
	w.until("document.activeElement.id === 'new-title'", 5*time.Second)
	w.checkPage("conversation-rename", "!document.getElementById('rename-form').hidden", "#rename-form")
	eval[chromedp.Void](w, "document.getElementById('new-title').focus()")
	w.do(chromedp.KeyEvent("Renamed by hand\r"))
	w.until("document.querySelector('.titlebar h1').textContent === 'Renamed by hand' && document.title.startsWith('Renamed by hand')", 10*time.Second)
	var c struct{ Title string }
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv, nil, &c)
	if c.Title != "Renamed by hand" {
		t.Errorf("the conversation's title is %q", c.Title)
	}

	// The model profile switch: the next turn is the other model's.
	eval[chromedp.Void](w, "(s => { s.value = 'other'; s.dispatchEvent(new Event('change')) })(document.getElementById('model-profile'))")
	w.until("document.getElementById('status').textContent === 'The next turn uses other (other-model).'", 10*time.Second)
	var c2 struct {
		ModelProfile string `json:"model_profile"`
	}
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv, nil, &c2)
	if c2.ModelProfile != "other" {
		t.Fatalf("the conversation's model profile is %q", c2.ModelProfile)
	}
	w.do(chromedp.Focus(chromedp.ID("message")), chromedp.KeyEvent("and you?\r"))
	w.until("document.querySelectorAll('.msg.assistant').length === 4 && document.getElementById('turn-state').textContent === ''", 30*time.Second)
	if got := eval[string](w, "[...document.querySelectorAll('.msg.assistant')].pop().innerText"); !strings.Contains(got, "· other-model") || !strings.Contains(got, "From the other model.") {
		t.Errorf("the last reply reads %q", got)
	}
	// Edit and resend by the keyboard: Esc leaves the editor, Enter
	// sends the edit (the conversation branches there).
	eval[chromedp.Void](w, "[...document.querySelectorAll('.msg.user button.edit')].pop().click()")
	w.until("document.activeElement.matches('form.editor textarea')", 5*time.Second)
	w.key("\x1b")
	w.until("!document.querySelector('form.editor') && document.activeElement.matches('.msg.user button.edit')", 5*time.Second)
	w.key("\r")
	w.until("document.activeElement.matches('form.editor textarea')", 5*time.Second)
	w.do(chromedp.KeyEvent(" Tell me more.\r"))
	w.until("document.querySelectorAll('.msg.assistant').length === 5 && document.getElementById('turn-state').textContent === ''", 30*time.Second)
	var hist struct{ Messages []agentcore.Message }
	a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/messages", nil, &hist)
	if got := strings.Join(contents(hist.Messages), " | "); !strings.HasSuffix(got, "user: and you? Tell me more. | assistant: From the other model.") || strings.Contains(got, "user: and you? |") {
		t.Errorf("the active history after the edit: %s", got)
	}
	// The switch is filled once the profiles are read, after the
	// messages.
	w.open("/c/"+conv, "document.querySelectorAll('.msg.assistant').length === 5 && document.getElementById('model-profile').options.length > 1")
	if got := eval[string](w, "document.getElementById('model-profile').value"); got != "other" {
		t.Errorf("reloaded, the switch shows %q", got)
	}

	// A project setup's output is terminal output too.
	t.Run("setup output", func(t *testing.T) {
		defer w.as(t)()
		bare := setupRepo(t, filepath.Join(t.TempDir(), "marker"), `printf '\033[32mgreen setup\033[0m \033]0;title\007done\n'`+"\n")
		repo := addSetupRepo(t, p.login("root", pw), "demo", "file://"+bare, "main")
		var c conversation
		a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &c)
		w.open("/c/"+c.ID, "document.getElementById('transcript').innerText.includes('Project setup finished.')")
		setup := "document.querySelector('pre.output.setup')"
		if got := eval[string](w, setup+".textContent"); !strings.HasPrefix(got, "installing deps\ngreen setup done\n") || strings.ContainsAny(got, "\x1b\x07") || strings.Contains(got, "title") {
			t.Errorf("the setup output reads %q", got)
		}
		if got := eval[string](w, "[..."+setup+".querySelectorAll('*')].map(s => s.tagName + '.' + s.className + '=' + s.textContent).join('|')"); got != "SPAN.t-fg-2=green setup" {
			t.Errorf("the setup output's elements: %q", got)
		}
	})

	if pr := w.seen(&w.problems); len(pr) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(pr, "\n"))
	}
}

// terminal.js, the tool output's parser, on hostile and split input: the
// output holds only text nodes and spans of its own classes.
func TestWebTerminal(t *testing.T) {
	in := newInstance(t, "")
	p := in.start()
	w := newWebUI(t, p.URL)
	w.open("/login", "document.getElementById('username')")
	cases := []struct {
		name  string
		parts []string
		want  string // text nodes as they are, spans as [classes]text, joined by |
	}{
		{"colours", []string{"\x1b[31mred\x1b[0m plain"}, "[t-fg-1]red| plain"},
		{"a sequence split between pieces", []string{"\x1b[1;3", "2mgreen\x1b[m"}, "[t-fg-2 t-b]green"},
		{"reset, then a colour", []string{"\x1b[1;31mA\x1b[0;32mB"}, "[t-fg-1 t-b]A|[t-fg-2]B"},
		{"bright colours and defaults", []string{"\x1b[91;44mA\x1b[39mB\x1b[49mC"}, "[t-fg-9 t-bg-4]A|[t-bg-4]B|C"},
		{"256 colours and RGB", []string{"\x1b[38;5;196mx\x1b[48;2;0;0;255my"}, "[t-fg-9]x|[t-fg-9 t-bg-4]y"},
		{"inverse", []string{"\x1b[7mz\x1b[31;7mw"}, "[t-fg-inv t-bg-inv]z|[t-fg-inv t-bg-1]w"},
		{"dim, unless coloured", []string{"\x1b[2mdim\x1b[22;2;33mx"}, "[t-d]dim|[t-fg-3]x"},
		{"styles", []string{"\x1b[3;4;9mx\x1b[23;24;29my"}, "[t-i t-u t-s]x|y"},
		{"window title and hyperlink dropped", []string{"a\x1b]0;title\x07b\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"}, "ablink"},
		{"cursor moves and erases dropped", []string{"\x1b[2J\x1b[H\x1b[?25lx\x1b[K\x1b7\x1b(B"}, "x"},
		{"device control string dropped", []string{"a\x1bPq#0;2;0;0;0\x1b\\b"}, "ab"},
		{"control characters dropped", []string{"a\x07\x08\x00b\x7fc\u009b31md"}, "abc31md"},
		{"carriage returns rewrite the line", []string{"10%\r50%\r100%\ndone\r\n"}, "100%\n|done\n"},
		{"CRLF split between pieces", []string{"a\r", "\nb"}, "a|\n|b"},
		{"an unfinished OSC waits for its end", []string{"\x1b]0;ti", "tle\x07ok"}, "ok"},
		{"an overlong unfinished sequence is shown", []string{"\x1b]" + strings.Repeat("x", 5000)}, "]" + strings.Repeat("x", 5000)},
		{"a malformed CSI is dropped", []string{"\x1b[31\x01mX"}, "mX"},
		{"an SGR with intermediates is not one", []string{"\x1b[1 mX"}, "X"},
		{"parameters past 32 are ignored", []string{"\x1b[" + strings.Repeat("1;", 40) + "31mX"}, "[t-b]X"},
		{"HTML is text", []string{"<img src=x onerror=alert(1)><b>x</b>"}, "<img src=x onerror=alert(1)><b>x</b>"},
		{"a tab is kept", []string{"a\tb"}, "a\tb"},
	}
	var parts [][]string
	for _, c := range cases {
		parts = append(parts, c.parts)
	}
	js, err := json.Marshal(parts)
	if err != nil {
		t.Fatal(err)
	}
	got := eval[[]string](w, fmt.Sprintf(`import('/static/terminal.js').then(({Terminal}) => %s.map((parts) => {
  const pre = document.createElement('pre');
  const term = new Terminal(pre);
  parts.forEach((p) => term.write(p));
  return [...pre.childNodes].map((n) => n.nodeType === 3 ? n.textContent : n.tagName === 'SPAN' && !n.children.length ? '[' + n.className + ']' + n.textContent : '<' + n.tagName + '>').join('|');
}))`, js))
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("%s: %q shows as %q, want %q", c.name, c.parts, got[i], c.want)
		}
	}
}
