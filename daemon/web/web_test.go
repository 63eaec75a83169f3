package web

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// The pages need nothing the CSP forbids: no inline script, no style
// attribute or element, no event-handler attribute; and the scripts set
// HTML in one place only (render, with the server's sanitized Markdown).
func TestAssetsFitTheCSP(t *testing.T) {
	inline := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>[^<\s]|<style|\sstyle=|\son[a-z]+=|javascript:`)
	fs.WalkDir(templateFS, "templates", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := templateFS.ReadFile(p)
		if m := inline.Find(b); m != nil {
			t.Errorf("%s: %q is refused by the CSP", p, m)
		}
		return nil
	})
	fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") {
			return err
		}
		b, _ := staticFS.ReadFile(p)
		s := string(b)
		for _, bad := range []string{"eval(", "new Function", "outerHTML", "insertAdjacentHTML", "document.write", ".style."} {
			if strings.Contains(s, bad) {
				t.Errorf("%s uses %s", p, bad)
			}
		}
		if n := strings.Count(s, "innerHTML"); n > 0 && !(p == "static/app.js" && n == 1 && strings.Contains(s, "t.innerHTML = r.data.html[i]")) {
			t.Errorf("%s sets innerHTML %d times outside render", p, n)
		}
		return nil
	})
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"": "/", "/": "/", "/c/x?y=1": "/c/x?y=1", "//evil.example": "/", "/\\evil.example": "/",
		"https://evil.example": "/", "javascript:alert(1)": "/", "/x\r\nSet-Cookie: a=b": "/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every page links its icon, and /favicon.ico (which browsers ask for
// whatever a page links) answers it: a 404 there is a console error on
// every page.
func TestFavicon(t *testing.T) {
	app := fiber.New()
	Mount(app, nil)
	for _, p := range []string{"/favicon.ico", "/static/favicon.svg"} {
		resp, err := app.Test(httptest.NewRequest(http.MethodGet, p, nil))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(fiber.HeaderContentType) != "image/svg+xml" || !bytes.HasPrefix(body, []byte("<svg")) {
			t.Errorf("GET %s: %d %q %.40q", p, resp.StatusCode, resp.Header.Get(fiber.HeaderContentType), body)
		}
	}
	layout, _ := templateFS.ReadFile("templates/layout.html")
	if !bytes.Contains(layout, []byte(`<link rel="icon" href="/static/favicon.svg"`)) {
		t.Error("layout.html links no icon")
	}
}
