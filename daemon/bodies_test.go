package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/integrations/office/officetest"
)

// flood is n connections that each send one request with a body to
// 127.0.0.1.
type flood struct {
	path, contentType, token string
	// declared is the Content-Length; 0 sends the body chunked.
	declared int64
	// send is how many bytes of body are sent; with hold, the
	// connection then stays open until release.
	send int64
	hold bool
	// start is the body's first bytes (a multipart form's part header).
	start []byte
}

// run starts n connections of f against addr and returns what each
// answered (0: no answer, the connection was closed or reset) once all
// have ended, and a func that ends held connections.
func (f flood) run(addr string, n int) (wait func() map[int]int, release func()) {
	done := make(chan struct{})
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	piece := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	for range n {
		wg.Go(func() {
			status := 0
			defer func() { mu.Lock(); counts[status]++; mu.Unlock() }()
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			var h strings.Builder
			fmt.Fprintf(&h, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: %s\r\n", f.path, f.contentType)
			if f.token != "" {
				fmt.Fprintf(&h, "Authorization: Bearer %s\r\n", f.token)
			}
			if f.declared > 0 {
				fmt.Fprintf(&h, "Content-Length: %d\r\n\r\n", f.declared)
			} else {
				h.WriteString("Transfer-Encoding: chunked\r\n\r\n")
			}
			c.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := io.WriteString(c, h.String()); err != nil {
				return
			}
			answered := make(chan int, 1)
			go func() {
				res, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					answered <- 0
					return
				}
				res.Body.Close()
				answered <- res.StatusCode
			}()
			for sent := int64(0); sent < f.send; {
				p := piece[:min(int64(len(piece)), f.send-sent)]
				if sent == 0 && len(f.start) > 0 {
					p = f.start[:min(int64(len(f.start)), f.send)]
				}
				if f.declared <= 0 {
					fmt.Fprintf(c, "%x\r\n", len(p))
				}
				if _, err := c.Write(p); err != nil {
					break // the server closed the connection
				}
				if f.declared <= 0 {
					io.WriteString(c, "\r\n")
				}
				sent += int64(len(p))
			}
			if f.declared <= 0 && !f.hold {
				io.WriteString(c, "0\r\n\r\n")
			}
			if f.hold {
				select {
				case <-done:
					return
				case status = <-answered:
					return
				}
			}
			status = <-answered
		})
	}
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	return func() map[int]int { wg.Wait(); mu.Lock(); defer mu.Unlock(); return counts }, release
}

// The review's reproductions, through the real server with the office
// plugin (uploads up to 25 MiB): 40 connections that each send a 25 MiB
// body, and 40 that declare 25 MiB, send 8 bytes and wait, to a route
// without authentication, with a bad token and with a good one, and to
// the upload route; chunked bodies too, which declare no length. The
// server's peak resident memory stays within 100 MB of where it was,
// and a normal client is answered all along.
func TestRequestBodyFlood(t *testing.T) {
	const n, big = 40, 25 << 20
	mp := "multipart/form-data; boundary=xyz"
	for _, r := range []struct {
		who, ct string
		path    func(conv string) string
		token   func(alice *client) string
	}{
		{"login", "application/json", func(string) string { return "/api/v1/auth/login" }, nil},
		{"upload-unauthenticated", mp, uploadPath, nil},
		{"upload-bad-token", mp, uploadPath, func(*client) string { return "forged" }},
		{"messages-authenticated", "application/json", func(conv string) string { return "/api/v1/conversations/" + conv + "/messages" }, func(c *client) string { return c.token }},
		{"upload-authenticated", mp, uploadPath, func(c *client) string { return c.token }},
	} {
		for _, v := range []struct {
			name           string
			declared, send int64
			hold           bool
		}{
			{"25MiB-bodies", big, big, false},
			{"declared-25MiB-sent-8B", big, 8, true},
			{"chunked-25MiB", 0, big, false},
		} {
			t.Run(r.who+"/"+v.name, func(t *testing.T) {
				// A server of its own: memory a flood took is not given
				// back at once, and would hide the next flood's.
				in := newInstance(t, officePlugin)
				in.addUser("alice", pw, false)
				p := in.start()
				alice := p.login("alice", pw)
				conv := alice.newConversation()
				f := flood{path: r.path(conv), contentType: r.ct, declared: v.declared, send: v.send, hold: v.hold}
				if r.ct == mp {
					// A form whose file part goes on to the end: read whole,
					// as a file, by a server that pre-parses forms.
					f.start = []byte("--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.docx\"\r\nContent-Type: application/octet-stream\r\n\r\n")
				}
				if r.token != nil {
					f.token = r.token(alice)
				}
				pid := p.cmd.Process.Pid
				base := procStatus(t, pid, "VmRSS")
				// VmHWM from here on: writing 5 to clear_refs resets it.
				if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
					t.Fatal(err)
				}
				wait, release := f.run(strings.TrimPrefix(p.URL, "http://"), n)
				defer release()
				ended := make(chan map[int]int, 1)
				go func() { ended <- wait() }()
				// A normal client meanwhile: while a held flood is held
				// (2 s, long enough for the server to read every
				// header), else until the flood ends; at least 3 rounds.
				start := time.Now()
				var counts map[int]int
				for round := 0; counts == nil; round++ {
					if st, b, _ := alice.do("GET", "/api/v1/me", nil); st != http.StatusOK {
						t.Errorf("GET /me during the flood: %d %s", st, b)
					}
					// A small body may meet a full budget: the client is
					// told to retry, and does.
					for try := 0; ; try++ {
						st, b, h := alice.do("POST", "/api/v1/conversations", map[string]string{"title": "meanwhile"})
						if st == http.StatusCreated {
							break
						}
						if st != http.StatusServiceUnavailable || !strings.Contains(string(b), `"busy"`) || h.Get("Retry-After") == "" || try == 20 {
							t.Fatalf("POST /conversations during the flood: %d %s %v", st, b, h)
						}
						time.Sleep(100 * time.Millisecond)
					}
					if round < 3 || v.hold && time.Since(start) < 2*time.Second {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					release()
					select {
					case counts = <-ended:
					case <-time.After(50 * time.Millisecond):
					}
				}
				hwm := procStatus(t, pid, "VmHWM")
				t.Logf("answers %v; RSS %d MiB before, peak %d MiB", counts, base>>20, hwm>>20)
				if hwm-base > 100<<20 {
					t.Errorf("the server's resident memory peaked %d MiB above the %d MiB before the flood, want at most 100 MB more", (hwm-base)>>20, base>>20)
				}
				if counts[http.StatusOK]+counts[http.StatusCreated] > 0 {
					t.Errorf("a flood request was accepted: %v", counts)
				}
				p.healthy()
			})
		}
	}
}

func uploadPath(conv string) string { return "/api/v1/conversations/" + conv + "/attachments" }

// largeDOCX is a valid document of about size bytes: a short text and
// an incompressible image.
func largeDOCX(size int) []byte {
	img := make([]byte, size)
	rand.NewChaCha8([32]byte{1}).Read(img)
	return officetest.DOCX([]officetest.DOCXPara{{Style: "Heading1", Text: "Large report"}, {Text: "The image below is large."}},
		officetest.File{Name: "word/media/image1.png", Body: string(img)})
}

// An upload of a valid 24 MiB document is streamed to disk, not held in
// the server's memory, and parsed.
func TestLargeUploadStreamed(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, officePlugin)
	in.addUser("alice", pw, false)
	p := in.start()
	alice := p.login("alice", pw)
	conv := alice.newConversation()
	pid := p.cmd.Process.Pid

	doc := largeDOCX(24 << 20)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "large.docx")
	fw.Write(doc)
	mw.Close()
	path := "/api/v1/conversations/" + conv + "/attachments"
	base := procStatus(t, pid, "VmRSS")
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	for _, chunked := range []bool{false, true} {
		var r io.Reader = bytes.NewReader(body.Bytes())
		if chunked {
			r = io.MultiReader(r) // no length: sent chunked
		}
		req, _ := http.NewRequest("POST", p.URL+path, r)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("Authorization", "Bearer "+alice.token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		observe("POST", path, res.StatusCode)
		var at attachment
		if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &at) != nil {
			t.Fatalf("upload of %d bytes (chunked %v): %d %s", len(doc), chunked, res.StatusCode, b)
		}
		if at.Kind != "docx" || at.Bytes != int64(len(doc)) {
			t.Errorf("upload (chunked %v): %+v", chunked, at)
		}
		text := alice.must(http.StatusOK, "GET", path+"/"+at.ID+"/text", nil, nil)
		if !strings.Contains(string(text), "The image below is large.") {
			t.Errorf("text: %.300q", text)
		}
	}
	hwm := procStatus(t, pid, "VmHWM")
	t.Logf("two uploads of %d MiB: RSS %d MiB before, peak %d MiB", len(doc)>>20, base>>20, hwm>>20)
	if hwm-base > 16<<20 {
		t.Errorf("the server's resident memory peaked %d MiB above the %d MiB before two uploads of %d MiB: the body was held in memory", (hwm-base)>>20, base>>20, len(doc)>>20)
	}
	// Over office.max_bytes and its 1 MiB of form: refused by its
	// declared length as soon as the body begins.
	c, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n--%s\r\n", path, alice.token, mw.FormDataContentType(), 26<<20+1, mw.Boundary())
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("an upload declaring 26 MiB + 1: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	observe("POST", path, res.StatusCode)
	if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "too_large") || !res.Close {
		t.Errorf("an upload declaring 26 MiB + 1: %d %v %s", res.StatusCode, res.Header, b)
	}
}
