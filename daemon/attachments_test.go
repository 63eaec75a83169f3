package daemon_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/integrations/office/officetest"
)

const officePlugin = "plugins:\n  - office\n"

// upload posts data as the multipart field "file" named name.
func (c *client) upload(conv, name string, data []byte) (int, []byte) {
	c.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("file", name)
	if err != nil {
		c.t.Fatal(err)
	}
	fw.Write(data)
	mw.Close()
	path := "/api/v1/conversations/" + conv + "/attachments"
	req, err := http.NewRequest("POST", c.base+path, &body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("upload %s: %v", name, err)
	}
	defer res.Body.Close()
	observe("POST", path, res.StatusCode)
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

type attachment struct {
	ID, Name, Kind string
	Bytes          int64
	TextBytes      int64 `json:"text_bytes"`
	Parts          []struct {
		Title     string
		TextBytes int `json:"text_bytes"`
	}
}

func readCall(id string, part int) llmtest.Step {
	return llmtest.Step{Text: "Reading it.", ToolCalls: []agentcore.ToolCall{{Name: "read_attachment", Arguments: fmt.Sprintf(`{"id":%q,"part":%d}`, id, part)}}}
}

// finish follows s until the turn ends and requires it to finish.
func finish(t *testing.T, s *stream) []sseEvent {
	t.Helper()
	var evs []sseEvent
	for {
		ev := s.next(90 * time.Second)
		evs = append(evs, ev)
		switch ev.Type {
		case agentcore.EventTurnFinished:
			return evs
		case agentcore.EventTurnFailed, agentcore.EventTurnCancelled:
			t.Fatalf("turn ended %s: %s", ev.Type, ev.Data)
		}
	}
}

// TestAttachments: each kind, uploaded under a misleading name, is parsed
// by the worker end to end through the API, listed, served as text, and
// read by the model with read_attachment (each step's Expect proves the
// text reached it); another user sees none of it.
func TestAttachments(t *testing.T) {
	needSandbox(t)
	files := []struct {
		name, kind string
		data       []byte
		part       int
		expect     string
	}{
		{"budget.docx", "xlsx", officetest.GoodXLSX(), 1, "Total\t3500"},
		{"report.pdf", "docx", officetest.GoodDOCX(), 2, "| North | 1200 |"},
		{"deck.xlsx", "pptx", officetest.GoodPPTX(), 2, "Notes:\nMention the sandbox limits."},
		{"review.pptx", "pdf", officetest.GoodPDF(), 1, "Add a second DNS resolver."},
	}
	steps := []llmtest.Step{}
	for i, f := range files {
		s := readCall(f.name, f.part)
		if i > 0 {
			s.Expect = files[i-1].expect
		}
		steps = append(steps, s)
	}
	steps = append(steps, llmtest.Step{Expect: files[len(files)-1].expect, Text: "All read."})
	in := newInstance(t, llm(t, steps...)+officePlugin)
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	in.addUser("root", pw, true)
	p := in.start()
	alice, bob := p.login("alice", pw), p.login("bob", pw)
	conv := alice.newConversation()

	for _, f := range files {
		status, body := alice.upload(conv, f.name, f.data)
		var at attachment
		if status != http.StatusCreated || json.Unmarshal(body, &at) != nil {
			time.Sleep(300 * time.Millisecond) // the server logs the failure after it answers
			t.Fatalf("upload %s: %d %s\nserver log:\n%s", f.name, status, body, p.stderr)
		}
		if at.Kind != f.kind || at.Name != f.name || at.Bytes != int64(len(f.data)) || at.TextBytes == 0 || len(at.Parts) < f.part {
			t.Fatalf("upload %s: %+v", f.name, at)
		}
		text := alice.must(http.StatusOK, "GET", fmt.Sprintf("/api/v1/conversations/%s/attachments/%s/text?part=%d", conv, at.ID, f.part), nil, nil)
		if !strings.Contains(string(text), f.expect) {
			t.Errorf("%s part %d: %q", f.name, f.part, text)
		}
		alice.must(http.StatusBadRequest, "GET", fmt.Sprintf("/api/v1/conversations/%s/attachments/%s/text?part=99", conv, at.ID), nil, nil)
		bob.must(http.StatusNotFound, "GET", fmt.Sprintf("/api/v1/conversations/%s/attachments/%s/text", conv, at.ID), nil, nil)
	}
	var list struct{ Attachments []attachment }
	alice.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/attachments", nil, &list)
	if len(list.Attachments) != len(files) || list.Attachments[0].Name != "budget.docx" {
		t.Fatalf("list: %+v", list)
	}
	bob.must(http.StatusNotFound, "GET", "/api/v1/conversations/"+conv+"/attachments", nil, nil)
	// Each attachment is in the audit log with its digest.
	var audited struct {
		Records []struct {
			User string
			Data struct {
				Conversation, Name, SHA256 string
			}
		}
	}
	p.login("root", pw).must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=attachment", nil, &audited)
	if len(audited.Records) != len(files) {
		t.Fatalf("audit records of kind attachment: %+v", audited.Records)
	}
	for i, r := range audited.Records {
		sum := sha256.Sum256(files[i].data)
		if r.Data.Conversation != conv || r.Data.Name != files[i].name || r.Data.SHA256 != hex.EncodeToString(sum[:]) || r.User == "" {
			t.Errorf("audit record %d: %+v", i, r)
		}
	}
	if status, body := bob.upload(conv, "x.docx", officetest.GoodDOCX()); status != http.StatusNotFound {
		t.Fatalf("bob uploads to alice's conversation: %d %s", status, body)
	}
	alice.must(http.StatusNotFound, "GET", "/api/v1/conversations/"+conv+"/attachments/att_000000000000000000000000/text", nil, nil)

	s := alice.follow(conv, "")
	alice.send(conv, "read all four")
	evs := finish(t, s)
	outputs := 0
	for _, ev := range evs {
		if ev.Type == agentcore.EventToolFinished && strings.Contains(string(ev.Data), "read_attachment") {
			outputs++
			if strings.Contains(string(ev.Data), `"error"`) {
				t.Errorf("read_attachment failed: %s", ev.Data)
			}
		}
	}
	if outputs != len(files) {
		t.Errorf("%d read_attachment calls finished, want %d", outputs, len(files))
	}
	entries, _ := os.ReadDir(filepath.Join(in.dir, "attachments"))
	if len(entries) != 0 {
		t.Errorf("uploads left on disk: %v", entries)
	}
}

// TestAttachmentsHostile: each hostile document is refused with 422
// unparseable naming its limit, while another client's requests keep
// being answered; nothing is kept, on disk or in the list.
func TestAttachmentsHostile(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, officePlugin)
	in.addUser("alice", pw, false)
	p := in.start()
	alice := p.login("alice", pw)
	conv := alice.newConversation()

	stop := make(chan struct{})
	var answered, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		c := &http.Client{Timeout: 10 * time.Second}
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			req, _ := http.NewRequest("GET", p.URL+"/api/v1/conversations/"+conv+"/attachments", nil)
			req.Header.Set("Authorization", "Bearer "+alice.token)
			res, err := c.Do(req)
			if err != nil || res.StatusCode != http.StatusOK {
				failed.Add(1)
			} else {
				answered.Add(1)
			}
			if res != nil {
				res.Body.Close()
			}
		}
	})
	for _, h := range officetest.Hostile() {
		before := answered.Load()
		status, body := alice.upload(conv, h.Name, h.Data())
		var e struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(body, &e)
		if status != http.StatusUnprocessableEntity || e.Error.Code != "unparseable" || !strings.Contains(e.Error.Message, "(limit: "+h.Limit+")") {
			t.Errorf("%s: %d %s, want 422 unparseable naming %s", h.Name, status, body, h.Limit)
		}
		t.Logf("%s: %s (%d parallel answers meanwhile)", h.Name, e.Error.Message, answered.Load()-before)
	}
	close(stop)
	wg.Wait()
	if failed.Load() > 0 || answered.Load() < 5 {
		t.Errorf("parallel requests: %d answered, %d failed", answered.Load(), failed.Load())
	}
	var list struct{ Attachments []attachment }
	alice.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/attachments", nil, &list)
	if len(list.Attachments) != 0 {
		t.Errorf("refused documents listed: %+v", list)
	}
	entries, _ := os.ReadDir(filepath.Join(in.dir, "attachments"))
	if len(entries) != 0 {
		t.Errorf("uploads left on disk: %v", entries)
	}
}

// TestAttachmentsFailClosed: with the office plugin enabled and bwrap
// unavailable, an upload is refused (503 sandbox_unavailable) and
// nothing is parsed; /readyz says which check fails. An upload beyond
// office.max_bytes is refused before anything.
func TestAttachmentsFailClosed(t *testing.T) {
	in := newInstance(t, officePlugin+"sandbox:\n  bwrap: /nonexistent/bwrap\noffice:\n  max_bytes: 100000\n")
	in.addUser("alice", pw, false)
	p := in.start()
	alice := p.login("alice", pw)
	conv := alice.newConversation()
	status, body := alice.upload(conv, "report.docx", officetest.GoodDOCX())
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"sandbox_unavailable"`) {
		t.Fatalf("upload without bwrap: %d %s", status, body)
	}
	if status, body := alice.upload(conv, "big.docx", bytes.Repeat([]byte("x"), 100001)); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("upload beyond max_bytes: %d %s", status, body)
	}
	var list struct{ Attachments []attachment }
	alice.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/attachments", nil, &list)
	if len(list.Attachments) != 0 {
		t.Errorf("listed: %+v", list)
	}
	st, b, _ := p.anon().do("GET", "/readyz", nil)
	if st != http.StatusServiceUnavailable || !strings.Contains(string(b), "office/sandbox") {
		t.Errorf("readyz: %d %s", st, b)
	}
	if !strings.Contains(p.stderr.String(), "office plugin is enabled but its sandbox is unavailable") {
		t.Errorf("no error in the log")
	}
}

// TestAttachmentsDisabled: without the office plugin uploads are
// refused with office_disabled.
func TestAttachmentsDisabled(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("alice", pw, false)
	p := in.start()
	alice := p.login("alice", pw)
	conv := alice.newConversation()
	status, body := alice.upload(conv, "report.docx", officetest.GoodDOCX())
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"office_disabled"`) {
		t.Fatalf("upload without the plugin: %d %s", status, body)
	}
}

// TestCompressedBodyRefused: a gzip request body is refused (415) on
// every route before anything inflates it; Fiber's c.Body() would
// inflate it in memory without a bound. A body beyond 2 MiB is still
// refused on routes other than the upload.
func TestCompressedBodyRefused(t *testing.T) {
	in := newInstance(t, officePlugin)
	in.addUser("alice", pw, false)
	p := in.start()
	alice := p.login("alice", pw)
	conv := alice.newConversation()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte{' '}, 8<<20))
	zw.Close()
	// A connection of its own for each request: the server closes one
	// after refusing its body, and a POST written to a pooled connection
	// the server has just closed fails with a reset, not with its answer.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, path := range []string{"/api/v1/auth/login", "/api/v1/conversations/" + conv + "/messages", "/api/v1/conversations/" + conv + "/attachments"} {
		req, _ := http.NewRequest("POST", p.URL+path, bytes.NewReader(gz.Bytes()))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		req.Header.Set("Authorization", "Bearer "+alice.token)
		res, err := fresh.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(b), "unsupported_encoding") {
			t.Errorf("%s: %d %s", path, res.StatusCode, b)
		}
	}
	alice.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv+"/attachments", nil, nil)
	// Uploads may be larger than other bodies; those stay at 2 MiB. The
	// server answers 413 without reading the body and closes the
	// connection: a client still writing it may see the reset instead of
	// the answer (the kernel drops what it had not read).
	big := `{"content":"` + strings.Repeat("x", 3<<20) + `"}`
	req, _ := http.NewRequest("POST", p.URL+"/api/v1/conversations/"+conv+"/messages", strings.NewReader(big))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+alice.token)
	if res, err := fresh.Do(req); err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a 3 MiB message: %d %s", res.StatusCode, b)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Errorf("a 3 MiB message: %v; want 413 or the connection closed", err)
	}
}
