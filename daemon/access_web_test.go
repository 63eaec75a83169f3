package daemon_test

import (
	"net/http"
	"testing"
	"time"
)

// The repositories page's access editor shows a repository's entries,
// and saving replaces them: here the entry for all goes and a group gets
// push, which the API then shows and a user outside the group feels.
func TestWebRepositoryAccess(t *testing.T) {
	in := newInstance(t, "")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	root, alice := p.login("root", pw), p.login("alice", pw)
	var repo struct{ ID string }
	root.must(http.StatusCreated, "POST", "/api/v1/repositories", map[string]string{"name": "web-access", "url": "file:///nonexistent/r.git", "branch": "main"}, &repo)

	w := newWebUI(t, p.URL)
	w.signIn("root", pw)
	w.open("/admin/repositories", "document.querySelector('#repos tbody tr')")
	w.click("#repos .access-open")
	w.until("document.querySelectorAll('.access-entries .row').length === 1", 20*time.Second)
	if got := eval[string](w, "(r => r.querySelector('select').value + ' ' + r.querySelectorAll('select')[1].value)(document.querySelector('.access-entries .row'))"); got != "all push" {
		t.Fatalf("the editor shows %q, want the entry for all at push", got)
	}
	w.checkPage("repository-access", "document.querySelector('.access-entries .row')", "")
	w.click(".access-entries .row button") // remove the entry for all
	w.click(".access-add")
	w.fill(".access-entries .row:last-child input", "Devs")
	eval[any](w, "document.querySelector('.access-entries .row:last-child select:last-of-type').value = 'push'")
	w.click(".access-save")
	w.until("document.getElementById('status').textContent === 'Access to web-access saved.'", 20*time.Second)
	if got := eval[string](w, "[...document.querySelectorAll('.access-entries .row')].map(r => [...r.querySelectorAll('select, input')].map(e => e.value).join(' ')).join('; ')"); got != "group devs push" {
		t.Errorf("the editor after saving shows %q", got)
	}

	var entries struct {
		Entries []struct{ Kind, Name, Level string }
	}
	root.must(http.StatusOK, "GET", "/api/v1/repositories/"+repo.ID+"/access", nil, &entries)
	if len(entries.Entries) != 1 || entries.Entries[0] != (struct{ Kind, Name, Level string }{"group", "devs", "push"}) {
		t.Fatalf("entries after the editor: %+v", entries.Entries)
	}
	alice.must(http.StatusNotFound, "GET", "/api/v1/repositories/"+repo.ID, nil, nil)
	if pr := w.seen(&w.problems); len(pr) > 0 {
		t.Errorf("the page's problems: %q", pr)
	}
}
