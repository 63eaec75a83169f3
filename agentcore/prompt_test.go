package agentcore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// The system message is the first of every request, rendered from the
// operator's template with what the model needs to know.
func TestSystemPrompt(t *testing.T) {
	tmpl, err := agentcore.ParsePrompt(`R={{.Repository}} C={{.Commit}} W={{.Workspace}} A={{.Approval}} N={{join .Network ","}} T={{join .Tools ","}} D={{.Date}}`)
	if err != nil {
		t.Fatal(err)
	}
	pc := func(context.Context, string, string) (agentcore.PromptContext, error) {
		return agentcore.PromptContext{Repository: "acme/widgets", Commit: "0123abc", Network: []string{"proxy.golang.org:443", "pypi.org"}}, nil
	}
	pcRules := func(context.Context, string, string) (agentcore.PromptContext, error) {
		return agentcore.PromptContext{AutoApproved: []string{"make check", "go test …"}}, nil
	}
	tools := "edit_file,list_files,read_file,search_files,shell,shell_kill,shell_output,write_file"
	for _, tc := range []struct {
		name      string
		configure func(*agentcore.Config)
		want      []string // substrings of the system message
		not       []string
	}{
		{"template, approval", func(c *agentcore.Config) { c.SystemPrompt, c.PromptContext = tmpl, pc }, []string{
			"R=acme/widgets C=0123abc W=/workspace A=true N=proxy.golang.org:443,pypi.org T=" + tools + " D=" + time.Now().UTC().Format(time.DateOnly)}, nil},
		{"template, shell_always_allow", func(c *agentcore.Config) { c.SystemPrompt, c.PromptContext, c.ShellAlwaysAllow = tmpl, pc, true }, []string{"A=false"}, nil},
		{"default, repository and network", func(c *agentcore.Config) { c.PromptContext = pc }, []string{
			"repository acme/widgets at commit 0123abc", "Workspace: /workspace", "shell, shell_kill", "waits for the user's approval", "can reach only proxy.golang.org:443, pypi.org"}, []string{"no network"}},
		{"default, empty workspace", nil, []string{"the workspace starts empty (no repository)", "no network access", "waits for the user's approval"}, []string{"at commit"}},
		{"default, shell_always_allow", alwaysAllow, []string{"run without asking"}, []string{"approval"}},
		{"a model's own template", func(c *agentcore.Config) {
			own, err := agentcore.ParsePrompt(`Own R={{.Repository}} T={{join .Tools ","}}`)
			if err != nil {
				t.Fatal(err)
			}
			c.SystemPrompt, c.PromptContext = tmpl, pc
			c.Model = func(context.Context, string, string) (agentcore.LLM, error) {
				return agentcore.WithSystemPrompt(agentcore.WithToolCalls(c.LLM, agentcore.ToolCallsNative), own), nil
			}
		}, []string{"Own R=acme/widgets T=" + tools}, []string{"C=0123abc"}},
		{"default, auto-approved rules", func(c *agentcore.Config) { c.PromptContext = pcRules }, []string{"waits for the user's approval", "These run without asking", "make check; go test …"}, nil},
		{"default, auto-approved rules, shell_always_allow", func(c *agentcore.Config) { c.PromptContext, c.ShellAlwaysAllow = pcRules, true }, []string{"run without asking"}, []string{"make check", "approval"}},
		{"default, host investigation", func(c *agentcore.Config) {
			c.HostReadOnly = func(context.Context, string, string) (bool, error) { return true, nil }
		}, []string{"Host investigation", "filesystem read-only", "unless the user agrees"}, []string{"Workspace: /workspace", "no network access"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{{Text: "a"}, {Text: "b"}}}, tc.configure)
			for range 2 {
				if err := h.wait(h.start("c", "hi")); err != nil {
					t.Fatal(err)
				}
			}
			reqs := h.llm.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			for i, req := range reqs {
				// Every request, the later one with the history after it.
				if m := req.Messages; len(m) != 2+2*i || m[0].Role != agentcore.RoleSystem || m[1].Role != agentcore.RoleUser {
					t.Fatalf("request %d: messages %+v; want the system message first, once", i, m)
				}
			}
			sys := reqs[1].Messages[0].Content
			for _, w := range tc.want {
				if !strings.Contains(sys, w) {
					t.Errorf("system message lacks %q:\n%s", w, sys)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(sys, w) {
					t.Errorf("system message holds %q:\n%s", w, sys)
				}
			}
		})
	}
}

// A template that does not parse, or names a field PromptData has not,
// fails ParsePrompt rather than a turn; a PromptContext that fails fails
// the turn.
func TestSystemPromptErrors(t *testing.T) {
	for _, bad := range []string{"{{.Repo}}", "{{if .Approval}}", "{{.Tools.Name}}", "{{shout .Date}}"} {
		if _, err := agentcore.ParsePrompt(bad); err == nil {
			t.Errorf("ParsePrompt(%q) succeeded", bad)
		}
	}
	if _, err := agentcore.ParsePrompt(agentcore.DefaultPrompt()); err != nil {
		t.Errorf("the default prompt: %v", err)
	}
	// A profile's template is a user's, rendered at every model call:
	// none whose cost is not bounded by its size and the data's lists.
	for _, costly := range []string{
		"{{range 1000000000}}{{end}}",
		"{{$n := 1000000000}}{{range $n}}{{end}}",
		"{{range .Tools}}{{range $.Network}}{{end}}{{end}}",
		"{{range .Tools}}{{with .}}{{range $.Network}}{{end}}{{end}}{{end}}",
		`{{printf "%0999999999d" 1}}`,
		`{{$x := print .Date .Date}}{{$x = print $x $x}}{{$x}}`,
		`{{join .Tools (join .Tools (join .Tools "x"))}}`,
		`{{$s := "ab"}}{{join .Tools $s}}`,
		`{{define "a"}}x{{end}}{{template "a"}}`,
		`{{block "b" .}}x{{end}}`,
	} {
		if _, err := agentcore.ParsePrompt(costly); !errors.Is(err, agentcore.ErrPromptTooCostly) {
			t.Errorf("ParsePrompt(%q): %v; want ErrPromptTooCostly", costly, err)
		}
	}
	for _, fine := range []string{
		"{{if and .Approval (not .HostReadOnly)}}asked{{end}}",
		"{{range .Tools}}- {{.}}\n{{end}}",
		"{{range $i, $t := .Tools}}{{if $i}}, {{end}}{{$t}}{{else}}no tools{{end}}{{range .Network}}{{.}}{{end}}",
		`{{if gt (len .AutoApproved) 0}}{{index .Tools 0}}{{end}}{{join .Network ", "}}`,
	} {
		if _, err := agentcore.ParsePrompt(fine); err != nil {
			t.Errorf("ParsePrompt(%q): %v", fine, err)
		}
	}
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{{Text: "a"}}}, func(c *agentcore.Config) {
		c.PromptContext = func(context.Context, string, string) (agentcore.PromptContext, error) {
			return agentcore.PromptContext{}, errors.New("the repository is gone")
		}
	})
	if err := h.wait(h.start("c", "hi")); err == nil || !strings.Contains(err.Error(), "system prompt: the repository is gone") {
		t.Errorf("turn: %v; want the PromptContext's error", err)
	}
	if n := len(h.llm.requests()); n != 0 {
		t.Errorf("%d requests sent without a system prompt", n)
	}
}

// Without a usage report (the in-process model sends none) a model
// call's usage event is an estimate, marked so, of at least a token per
// 3 bytes.
func TestUsageEstimated(t *testing.T) {
	h := newHarness(t, &llmtest.Script{Steps: []llmtest.Step{{Text: "Twelve bytes"}}}, nil)
	if err := h.wait(h.start("c", "hi")); err != nil {
		t.Fatal(err)
	}
	var u agentcore.Usage
	if err := json.Unmarshal(h.event("c", agentcore.EventUsage).Data, &u); err != nil {
		t.Fatal(err)
	}
	req := h.llm.requests()[0]
	if u.Reported || u.PromptTokens*3 < len(req.Messages[0].Content)+len("hi") || u.CompletionTokens != (len("assistant")+len("Twelve bytes")+2)/3 {
		t.Errorf("usage %+v; want an estimate (reported false)", u)
	}
}
