package retrieval

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
)

// search_code: scoped to the conversation's repository by default (the
// Scope hook), another readable repository by argument, an unreadable
// one refused like an unknown one; results name path and lines.
func TestSearchCodeTool(t *testing.T) {
	dirA, commitA := makeRepo(t, []repoFile{{path: "pkg/config.go", content: "package pkg\n\n// loadConfig reads settings.\nfunc loadConfig() {}\n"}})
	dirB, commitB := makeRepo(t, []repoFile{{path: "lib/config.py", content: "def load_config():\n    return {}\n"}})
	ix, err := New(Options{Backend: backends[0].open(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ id, dir, commit string }{{"a", dirA, commitA}, {"b", dirB, commitB}, {"secret", dirB, commitB}} {
		if err := ix.Ingest(t.Context(), r.id, r.dir, "", r.commit, nil); err != nil {
			t.Fatal(err)
		}
	}
	s := &Searcher{
		Index: ix,
		Readable: func(_ context.Context, user string) ([]string, bool, error) {
			switch user {
			case "alice":
				return []string{"a", "b"}, false, nil
			case "root":
				return nil, true, nil
			}
			return nil, false, nil
		},
		Scope: func(_ context.Context, user, conv string) (Scope, error) {
			if conv == "conv_on_a" {
				return Scope{Repository: "a"}, nil
			}
			return Scope{}, nil
		},
	}
	tool := s.Tool()
	if tool.Spec().Name != "search_code" || !json.Valid(tool.Spec().Parameters) {
		t.Fatalf("spec %+v", tool.Spec())
	}
	run := func(user, conv, args string) (string, error) {
		return tool.Run(t.Context(), &agentcore.Call{Name: "search_code", User: user, Conversation: conv, Arguments: json.RawMessage(args)})
	}
	for _, tc := range []struct {
		user, conv, args string
		want, notWant    []string
		err              string
	}{
		{"alice", "conv_on_a", `{"query":"load config"}`, []string{"pkg/config.go:1-4 (repository a)", "func loadConfig()"}, []string{"lib/config.py"}, ""},
		{"alice", "conv_on_a", `{"query":"load_config","repository":"b"}`, []string{"lib/config.py:1-2 (repository b)"}, []string{"pkg/config.go"}, ""},
		{"alice", "conv_plain", `{"query":"loadConfig"}`, []string{"pkg/config.go", "lib/config.py"}, nil, ""},
		{"alice", "conv_on_a", `{"query":"load config","repository":"secret"}`, nil, nil, "no such repository"},
		{"alice", "conv_on_a", `{"query":"load config","repository":"nope"}`, nil, nil, "no such repository"},
		{"bob", "conv_plain", `{"query":"loadConfig"}`, []string{"no matches"}, nil, ""},
		// bob may read nothing: naming a repository is as naming an
		// unknown one, not an empty answer.
		{"bob", "conv_plain", `{"query":"loadConfig","repository":"a"}`, nil, nil, "no such repository"},
		{"root", "conv_plain", `{"query":"loadConfig","repository":"secret"}`, []string{"lib/config.py:1-2 (repository secret)"}, nil, ""},
		{"root", "conv_plain", `{"query":"load_config"}`, []string{"(repository b)", "(repository secret)"}, nil, ""},
		{"bob", "conv_plain", `{"query":"loadConfig","repository":"nope"}`, nil, nil, "no such repository"},
		{"alice", "conv_on_a", `{"query":"* ^ ( :"}`, nil, nil, "no words"},
		// The query language: a phrase is verbatim (a "*" in it too), sym:
		// finds definitions, errors say where.
		{"alice", "conv_on_a", `{"query":"\"*\""}`, []string{"no matches"}, nil, ""},
		{"alice", "conv_on_a", `{"query":"sym:load_config","repository":"b"}`, []string{"lib/config.py:1-2 (repository b)"}, nil, ""},
		{"alice", "conv_plain", `{"query":"/load_?config/ lang:python"}`, []string{"lib/config.py"}, []string{"pkg/config.go"}, ""},
		{"alice", "conv_plain", `{"query":"config -path:lib/"}`, []string{"pkg/config.go"}, []string{"lib/config.py"}, ""},
		// repo: narrows what the user may read, never widens it.
		{"alice", "conv_plain", `{"query":"load_config repo:secret"}`, []string{"no matches"}, []string{"secret"}, ""},
		{"root", "conv_plain", `{"query":"load_config repo:secret"}`, []string{"(repository secret)"}, []string{"(repository b)"}, ""},
		{"alice", "conv_on_a", `{"query":"load \"config"}`, nil, nil, "bad query: column 6: unterminated phrase"},
		{"alice", "conv_on_a", `{"query":1}`, nil, nil, "invalid arguments"},
	} {
		out, err := run(tc.user, tc.conv, tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %s: %q, %v; want error %q", tc.user, tc.args, out, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %s: %v", tc.user, tc.args, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s %s: output lacks %q:\n%s", tc.user, tc.args, w, out)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(out, w) {
				t.Errorf("%s %s: output has %q:\n%s", tc.user, tc.args, w, out)
			}
		}
	}
	// The Retriever view: every readable repository.
	hits, err := s.Search(t.Context(), "alice", "config", 10)
	if err != nil || len(hits) != 2 {
		t.Errorf("Search: %+v, %v; want 2 hits", hits, err)
	}
	if _, err := s.SearchIn(t.Context(), "alice", "secret", "config", 10); !errors.Is(err, ErrNoRepository) {
		t.Errorf("SearchIn secret: %v, want ErrNoRepository", err)
	}
}
