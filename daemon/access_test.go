package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/integrations/ldap/ldaptest"
)

const unknownRepo = "repo_000000000000000000000000"

// toolModel is a scripted model whose reply to the n-th request (n
// counts the assistant messages in it) is next(n); it records the last
// message of every request (a tool's result, after a tool call).
type toolModel struct {
	mu   sync.Mutex
	next func(n int) (llmtest.Step, error)
	last []string
}

func (m *toolModel) config(t *testing.T) string {
	t.Helper()
	srv, err := llmtest.StartServer(&llmtest.Script{Reply: func(req agentcore.Request) (llmtest.Step, error) {
		n := 0
		for _, msg := range req.Messages {
			if msg.Role == agentcore.RoleAssistant {
				n++
			}
		}
		m.mu.Lock()
		m.last = append(m.last, req.Messages[len(req.Messages)-1].Content)
		next := m.next
		m.mu.Unlock()
		return next(n)
	}}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n", srv.URL())
}

func (m *toolModel) results() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.last)
}

func searchCall(args map[string]string) llmtest.Step {
	b, _ := json.Marshal(args)
	return llmtest.Step{Text: "Searching.", ToolCalls: []agentcore.ToolCall{{Name: "search_code", Arguments: string(b)}}}
}

// TestRepositoryAccessSweep: for a user without access, every route under
// /api/v1/repositories/{id} (enumerated from the OpenAPI document, which
// TestOpenAPILint keeps equal to the router's routes) answers exactly as
// for an unknown repository; the list leaves it out; search, the
// search_code tool, conversation creation and a sync job's progress show
// nothing of it. A member of a local group with read access sees it, and
// may not sync it or change its access; a repository admin may, until
// their access goes.
func TestRepositoryAccessSweep(t *testing.T) {
	var repoID string
	var idMu sync.Mutex
	model := &toolModel{next: func(n int) (llmtest.Step, error) {
		idMu.Lock()
		id := repoID
		idMu.Unlock()
		switch n {
		case 0:
			return searchCall(map[string]string{"query": "loadSettings", "repository": id}), nil
		case 1:
			return searchCall(map[string]string{"query": "loadSettings", "repository": unknownRepo}), nil
		case 2:
			return searchCall(map[string]string{"query": "loadSettings"}), nil
		}
		return llmtest.Step{Text: "Nothing to see."}, nil
	}}
	in := newInstance(t, model.config(t)+"repositories:\n  default_access: admins\n")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	in.addUser("bob", pw, false)
	in.addUser("carol", pw, false)
	p := in.start()
	root, alice, bob, carol := p.login("root", pw), p.login("alice", pw), p.login("bob", pw), p.login("carol", pw)

	dir, _ := searchRepo(t)
	id := addRepo(t, root, "secret-project", "file://"+dir)
	idMu.Lock()
	repoID = id
	idMu.Unlock()

	// default_access admins: nobody but admins until entries are added.
	var list struct{ Repositories []struct{ ID string } }
	bob.must(http.StatusOK, "GET", "/api/v1/repositories", nil, &list)
	if len(list.Repositories) != 0 {
		t.Fatalf("bob sees %+v before any access entry", list.Repositories)
	}
	root.must(http.StatusCreated, "POST", "/api/v1/admin/groups", map[string]string{"name": "Devs"}, nil)
	root.must(http.StatusNoContent, "PUT", "/api/v1/admin/groups/devs/members/bob", nil, nil)
	alice.must(http.StatusForbidden, "PUT", "/api/v1/admin/groups/devs/members/alice", nil, nil)
	var entries struct {
		Entries []struct{ Kind, Name, Level string }
	}
	root.must(http.StatusOK, "PUT", "/api/v1/repositories/"+id+"/access", map[string]any{"entries": []map[string]string{
		{"kind": "group", "name": "devs", "level": "read"}, {"kind": "user", "name": "carol", "level": "admin"}}}, &entries)
	if len(entries.Entries) != 2 || entries.Entries[0].Kind != "group" || entries.Entries[0].Name != "devs" || entries.Entries[1].Name != "carol" || entries.Entries[1].Level != "admin" {
		t.Fatalf("entries %+v", entries.Entries)
	}
	for _, bad := range []map[string]string{{"kind": "user", "name": "nobody", "level": "read"}, {"kind": "group", "name": "devs", "level": "owner"}, {"kind": "team", "name": "x", "level": "read"}} {
		root.must(http.StatusBadRequest, "PUT", "/api/v1/repositories/"+id+"/access", map[string]any{"entries": []map[string]string{bad}}, nil)
	}

	// Every repository route, for alice: the same answer as for an
	// unknown ID, byte for byte.
	var doc struct {
		Paths map[string]map[string]json.RawMessage
	}
	alice.must(http.StatusOK, "GET", "/api/v1/openapi.json", nil, &doc)
	swept := 0
	for path, ops := range doc.Paths {
		if !strings.HasPrefix(path, "/api/v1/repositories/{id}") {
			continue
		}
		for method := range ops {
			if method == "parameters" {
				continue
			}
			m := strings.ToUpper(method)
			body := any(nil)
			if m == "PUT" || m == "POST" {
				body = map[string]any{"entries": []any{}}
			}
			s1, b1, _ := alice.do(m, strings.Replace(path, "{id}", id, 1), body)
			s2, b2, _ := alice.do(m, strings.Replace(path, "{id}", unknownRepo, 1), body)
			if s1 != http.StatusNotFound || s1 != s2 || string(b1) != string(b2) {
				t.Errorf("%s %s without access: %d %s; unknown: %d %s", m, path, s1, b1, s2, b2)
			}
			swept++
		}
	}
	if swept < 5 {
		t.Fatalf("swept %d repository routes; the document lists at least GET, DELETE, sync and GET/PUT access", swept)
	}
	alice.must(http.StatusOK, "GET", "/api/v1/repositories", nil, &list)
	if len(list.Repositories) != 0 {
		t.Errorf("alice lists %+v", list.Repositories)
	}

	// bob (devs: read) sees it, may not sync it nor edit its access.
	bob.must(http.StatusOK, "GET", "/api/v1/repositories", nil, &list)
	if len(list.Repositories) != 1 || list.Repositories[0].ID != id {
		t.Fatalf("bob lists %+v", list.Repositories)
	}
	bob.must(http.StatusOK, "GET", "/api/v1/repositories/"+id, nil, nil)
	bob.must(http.StatusForbidden, "POST", "/api/v1/repositories/"+id+"/sync", nil, nil)
	bob.must(http.StatusForbidden, "GET", "/api/v1/repositories/"+id+"/access", nil, nil)
	bob.must(http.StatusForbidden, "DELETE", "/api/v1/repositories/"+id, nil, nil)

	// Search: bob finds the snippet; alice finds nothing, and naming it
	// is as naming an unknown repository.
	var found struct {
		Results []agentcore.Hit `json:"results"`
	}
	bob.must(http.StatusOK, "GET", "/api/v1/search?q=loadSettings", nil, &found)
	if len(found.Results) != 1 || !strings.Contains(found.Results[0].Snippet, "func loadSettings") {
		t.Fatalf("bob's search: %+v", found.Results)
	}
	b := alice.must(http.StatusOK, "GET", "/api/v1/search?q=loadSettings", nil, nil)
	if string(b) != `{"results":[]}` {
		t.Errorf("alice's search: %s", b)
	}
	_, b1, _ := alice.do("GET", "/api/v1/search?q=loadSettings&repository="+id, nil)
	_, b2, _ := alice.do("GET", "/api/v1/search?q=loadSettings&repository="+unknownRepo, nil)
	if string(b1) != string(b2) || !strings.Contains(string(b1), `"not_found"`) {
		t.Errorf("alice's search naming it: %s; naming an unknown one: %s", b1, b2)
	}

	// Conversation creation: by ID and by name, as for unknown ones.
	s1, b1, _ := alice.do("POST", "/api/v1/conversations", map[string]string{"repository": id})
	_, b2, _ = alice.do("POST", "/api/v1/conversations", map[string]string{"repository": unknownRepo})
	if s1 != http.StatusNotFound || strings.ReplaceAll(string(b1), id, unknownRepo) != string(b2) {
		t.Errorf("a conversation on it: %d %s; on an unknown one: %s", s1, b1, b2)
	}
	s1, b1, _ = alice.do("POST", "/api/v1/conversations", map[string]string{"repository": "secret-project"})
	if s1 != http.StatusNotFound || string(b1) != `{"error":{"code":"not_found","message":"no repository \"secret-project\""}}` {
		t.Errorf("a conversation on it by name: %d %s", s1, b1)
	}

	// search_code in alice's conversation: naming it is as naming an
	// unknown repository, and searching everything finds nothing.
	var conv struct{ ID string }
	alice.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{}, &conv)
	st := alice.follow(conv.ID, "")
	alice.send(conv.ID, "where are the settings loaded?")
	st.until(agentcore.EventTurnFinished, 60*time.Second)
	st.close()
	rs := model.results()
	if len(rs) != 4 {
		t.Fatalf("the model saw %d requests: %q", len(rs), rs)
	}
	if strings.ReplaceAll(rs[1], id, unknownRepo) != rs[2] || !strings.Contains(rs[1], "no such repository") {
		t.Errorf("search_code naming it: %q; naming an unknown one: %q", rs[1], rs[2])
	}
	if !strings.Contains(rs[3], "no matches") {
		t.Errorf("search_code over everything alice may read: %q", rs[3])
	}
	for _, r := range rs {
		if strings.Contains(r, "loadSettings reads") || strings.Contains(r, "conf/load.go") {
			t.Errorf("a tool result shows the repository's code: %q", r)
		}
	}

	// carol (admin access) syncs it and reads her job; once her entry
	// goes, the job is as unknown.
	var sync struct{ Job jobs.Job }
	carol.must(http.StatusAccepted, "POST", "/api/v1/repositories/"+id+"/sync", nil, &sync)
	waitJobDone(t, carol, sync.Job.ID)
	carol.must(http.StatusOK, "GET", "/api/v1/repositories/"+id+"/access", nil, nil)
	root.must(http.StatusOK, "PUT", "/api/v1/repositories/"+id+"/access", map[string]any{"entries": []map[string]string{{"kind": "group", "name": "devs", "level": "read"}}}, nil)
	_, b1, _ = carol.do("GET", "/api/v1/jobs/"+sync.Job.ID, nil)
	_, b2, _ = carol.do("GET", "/api/v1/jobs/job_000000000000000000000000", nil)
	if string(b1) != string(b2) || !strings.Contains(string(b1), `"not_found"`) {
		t.Errorf("carol's sync job after her access went: %s; an unknown job: %s", b1, b2)
	}

	// The changes are audit records, with the entries before and after.
	var page struct {
		Records []struct {
			Kind string
			Data json.RawMessage
		}
	}
	root.must(http.StatusOK, "GET", "/api/v1/admin/audit?kind=admin", nil, &page)
	var changes []string
	for _, r := range page.Records {
		if strings.Contains(string(r.Data), `"repository_access"`) {
			changes = append(changes, string(r.Data))
		}
	}
	if len(changes) != 2 || !strings.Contains(strings.Join(changes, "\n"), `"name":"carol"`) {
		t.Errorf("access audit records: %q", changes)
	}
}

// TestRepositoryAccessRevokedMidConversation: bob's access goes during
// a turn (the model's search then finds nothing of the repository), and
// after it the conversation keeps its history and workspace but refuses
// turns and push with repository_access_lost; with read access back,
// turns work again and push is refused as no_push_access.
func TestRepositoryAccessRevokedMidConversation(t *testing.T) {
	needSandbox(t)
	var root *client
	var id string
	var revoked error
	model := &toolModel{}
	model.next = func(n int) (llmtest.Step, error) {
		switch n {
		case 0:
			return searchCall(map[string]string{"query": "loadSettings"}), nil
		case 1:
			return llmtest.Step{Text: "Found it."}, nil
		case 2:
			// Mid-turn: the access entries go before the model's call
			// runs.
			status, b, _ := root.do("PUT", "/api/v1/repositories/"+id+"/access", map[string]any{"entries": []any{}})
			if status != http.StatusOK {
				revoked = fmt.Errorf("revoking: %d %s", status, b)
			}
			return searchCall(map[string]string{"query": "loadSettings"}), nil
		}
		return llmtest.Step{Text: "It is gone."}, nil
	}
	in := newInstance(t, model.config(t))
	in.addUser("root", pw, true)
	in.addUser("bob", pw, false)
	p := in.start()
	root = p.login("root", pw)
	bob := p.login("bob", pw)
	dir, _ := searchRepo(t)
	id = addRepo(t, root, "project", "file://"+dir)
	// default_access all: everyone at push, as before access entries.
	var entries struct {
		Entries []struct{ Kind, Level string }
	}
	root.must(http.StatusOK, "GET", "/api/v1/repositories/"+id+"/access", nil, &entries)
	if len(entries.Entries) != 1 || entries.Entries[0].Kind != "all" || entries.Entries[0].Level != "push" {
		t.Fatalf("a new repository's entries: %+v", entries.Entries)
	}

	var conv struct{ ID string }
	bob.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": id}, &conv)
	st := bob.follow(conv.ID, "")
	bob.send(conv.ID, "find the settings")
	st.until(agentcore.EventTurnFinished, 60*time.Second)
	bob.send(conv.ID, "and again")
	st.until(agentcore.EventTurnFinished, 60*time.Second)
	st.close()
	if revoked != nil {
		t.Fatal(revoked)
	}
	rs := model.results()
	if len(rs) != 4 || !strings.Contains(rs[1], "conf/load.go") || !strings.Contains(rs[3], "no such repository") || strings.Contains(rs[3], "loadSettings reads") {
		t.Fatalf("search_code before and after the revocation: %q", rs)
	}

	base := "/api/v1/conversations/" + conv.ID
	lost := func(method, path string, body any) {
		t.Helper()
		s, b, _ := bob.do(method, path, body)
		if s != http.StatusForbidden || !strings.Contains(string(b), `"code":"repository_access_lost"`) {
			t.Errorf("%s %s after the revocation: %d %s", method, path, s, b)
		}
	}
	lost("POST", base+"/messages", map[string]string{"content": "once more"})
	push := map[string]string{"branch": "codumentor/x", "message": "m", "diff_sha256": strings.Repeat("0", 64)}
	lost("POST", base+"/workspace/push", push)
	bob.must(http.StatusNotFound, "GET", "/api/v1/search?q=loadSettings&repository="+id, nil, nil)
	// History and workspace stay.
	var msgs struct{ Messages []json.RawMessage }
	bob.must(http.StatusOK, "GET", base+"/messages", nil, &msgs)
	if len(msgs.Messages) < 4 {
		t.Fatalf("the history after the revocation: %d messages", len(msgs.Messages))
	}
	var first struct{ ID string }
	if err := json.Unmarshal(msgs.Messages[0], &first); err != nil || first.ID == "" {
		t.Fatalf("the first message %s: %v", msgs.Messages[0], err)
	}
	lost("POST", base+"/messages/"+first.ID+"/fork", nil)
	lost("POST", base+"/messages/"+first.ID+"/regenerate", nil)
	if got := bob.must(http.StatusOK, "GET", base+"/workspace/files?path=conf/load.go", nil, nil); !strings.Contains(string(got), "func loadSettings") {
		t.Errorf("the workspace after the revocation: %q", got)
	}

	// Read access again: turns start; push is still refused, saying why.
	root.must(http.StatusOK, "PUT", "/api/v1/repositories/"+id+"/access", map[string]any{"entries": []map[string]string{{"kind": "user", "name": "bob", "level": "read"}}}, nil)
	s, b, _ := bob.do("POST", base+"/workspace/push", push)
	if s != http.StatusForbidden || !strings.Contains(string(b), `"code":"no_push_access"`) {
		t.Errorf("push with read access: %d %s", s, b)
	}
	st = bob.follow(conv.ID, "")
	bob.send(conv.ID, "back again")
	st.until(agentcore.EventTurnFinished, 60*time.Second)
	st.close()
}

// TestRepositoryAccessLDAPGroup: access through a group of a real slapd
// (a group search), refreshed at each sign-in, and auth.admin_groups
// (memberOf) making and unmaking an admin.
func TestRepositoryAccessLDAPGroup(t *testing.T) {
	dir := ldaptest.Start(t)
	carolDN := dir.AddUser(t, "carol", "carol password", "Carol", "")
	daveDN := dir.AddUser(t, "dave", "dave password", "Dave", "")
	otherDN := dir.AddUser(t, "other", "other password", "Other", "")
	dir.AddGroup(t, "Devs", carolDN, otherDN)
	dir.AddGroup(t, "ops", daveDN, otherDN)
	in := newInstance(t, fmt.Sprintf("  admin_groups: [ops]\n  ldap:\n    url: %s\n    bind_dn: uid={username},%s\n    group_attribute: memberOf\n"+
		"    group_search_base_dn: %s\n    group_search_filter: (member={dn})\n", dir.URL, dir.PeopleDN, dir.GroupsDN)+
		"repositories:\n  default_access: admins\n")
	in.addUser("root", pw, true)
	p := in.start()
	root := p.login("root", pw)
	remote, _ := searchRepo(t)
	id := addRepo(t, root, "team", "file://"+remote)
	root.must(http.StatusOK, "PUT", "/api/v1/repositories/"+id+"/access", map[string]any{"entries": []map[string]string{{"kind": "group", "name": "devs", "level": "read"}}}, nil)

	carol := p.login("carol", "carol password")
	var list struct{ Repositories []struct{ ID string } }
	carol.must(http.StatusOK, "GET", "/api/v1/repositories", nil, &list)
	if len(list.Repositories) != 1 || list.Repositories[0].ID != id {
		t.Fatalf("carol (LDAP group devs) lists %+v", list.Repositories)
	}
	var found struct{ Results []agentcore.Hit }
	carol.must(http.StatusOK, "GET", "/api/v1/search?q=loadSettings&repository="+id, nil, &found)
	if len(found.Results) != 1 {
		t.Fatalf("carol's search: %+v", found.Results)
	}
	var groups struct {
		Groups []struct {
			Name    string
			Members []struct{ User, Source string }
		}
	}
	root.must(http.StatusOK, "GET", "/api/v1/admin/groups", nil, &groups)
	if len(groups.Groups) != 1 || groups.Groups[0].Name != "devs" || len(groups.Groups[0].Members) != 1 || groups.Groups[0].Members[0].User != "carol" || groups.Groups[0].Members[0].Source != "ldap" {
		t.Fatalf("groups after carol's sign-in: %+v", groups.Groups)
	}

	// dave is in ops: an admin, until the directory says otherwise.
	var me auth.User
	p.login("dave", "dave password").must(http.StatusOK, "GET", "/api/v1/me", nil, &me)
	if me.Role != auth.RoleAdmin {
		t.Fatalf("dave (ops) is %s", me.Role)
	}
	dir.RemoveMember(t, "ops", daveDN)
	dave := p.login("dave", "dave password")
	dave.must(http.StatusOK, "GET", "/api/v1/me", nil, &me)
	if me.Role != auth.RoleUser {
		t.Fatalf("dave out of ops is %s", me.Role)
	}
	dave.must(http.StatusNotFound, "GET", "/api/v1/repositories/"+id, nil, nil)

	// Out of devs in the directory: at carol's next sign-in the
	// repository is gone for her.
	dir.RemoveMember(t, "Devs", carolDN)
	carol = p.login("carol", "carol password")
	carol.must(http.StatusOK, "GET", "/api/v1/repositories", nil, &list)
	if len(list.Repositories) != 0 {
		t.Fatalf("carol out of devs lists %+v", list.Repositories)
	}
	carol.must(http.StatusNotFound, "GET", "/api/v1/repositories/"+id, nil, nil)
	carol.must(http.StatusNotFound, "GET", "/api/v1/search?q=loadSettings&repository="+url.QueryEscape(id), nil, nil)
}
