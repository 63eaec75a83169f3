package daemon_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// What a sandbox can do to GET …/workspace/diff and …/workspace/files: a
// file it made unreadable is marked in the patch (the diff answered 500
// for good), a big directory comes in pages through ?cursor=, and a
// sparse file past the patch's byte budget is refused at once with 422
// patch_too_large instead of a patch read byte by byte.
func TestWorkspaceDiffAndPagesAPI(t *testing.T) {
	needSandbox(t)
	in := newInstance(t, llm(t,
		shellCall("seq -f 'f%04g' 1 1500 | xargs touch && echo s3cret > locked && chmod 000 locked"), llmtest.Step{Text: "Done."},
		shellCall("truncate -s 1G big"), llmtest.Step{Text: "Done."},
	)+"sandbox:\n  shell_always_allow: true\n")
	in.addUser("alice", pw, false)
	p := in.start()
	a := p.login("alice", pw)
	conv := a.newConversation()
	s := a.follow(conv, "")
	defer s.close()
	a.send(conv, "make files")
	s.until(agentcore.EventTurnFinished, 60*time.Second)

	base := "/api/v1/conversations/" + conv + "/workspace/"
	diff := string(a.must(http.StatusOK, "GET", base+"diff", nil, nil))
	for _, want := range []string{"unreadable", "#   locked\n", "diff --git a/f0001 b/f0001", "diff --git a/f1500 b/f1500"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q", want)
		}
	}
	if strings.Contains(diff, "s3cret") {
		t.Error("diff shows the unreadable file's content")
	}

	var names []string
	cursor, pages := "", 0
	for {
		var dir agentcore.WorkspaceFile
		a.must(http.StatusOK, "GET", base+"files?path=&cursor="+url.QueryEscape(cursor), nil, &dir)
		if pages++; len(dir.Entries) > agentcore.WorkspacePageSize || pages > 3 {
			t.Fatalf("page %d: %d entries, next %q", pages, len(dir.Entries), dir.NextCursor)
		}
		for _, e := range dir.Entries {
			names = append(names, e.Name)
		}
		if cursor = dir.NextCursor; cursor == "" {
			break
		}
	}
	if pages != 2 || len(names) != 1501 || names[0] != "f0001" || names[1499] != "f1500" || names[1500] != "locked" {
		t.Errorf("%d pages, %d names, first %q, last %q; want 2 pages of f0001…f1500 and locked", pages, len(names), names[0], names[len(names)-1])
	}

	a.send(conv, "make a sparse file")
	s.until(agentcore.EventTurnFinished, 60*time.Second)
	start := time.Now()
	status, body, _ := a.do("GET", base+"diff", nil)
	if status != http.StatusUnprocessableEntity || !strings.Contains(string(body), "patch_too_large") || !strings.Contains(string(body), "big") {
		t.Errorf("diff with a 1 GiB sparse file: %d %s; want 422 patch_too_large naming big", status, body)
	}
	t.Logf("refused in %v", time.Since(start))
}
