package agentcore

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/codumentor/codumentor/sandboxkit"
)

// PromptData is what a system prompt template is executed with, once per
// model call.
type PromptData struct {
	// Repository is the name of the repository the workspace shows, and
	// Commit its commit; both "" for an empty workspace.
	Repository string
	Commit     string
	// Workspace is where the workspace is inside the sandbox.
	Workspace string
	// Tools are the names of the tools of the request, sorted.
	Tools []string
	// Approval: shell commands wait for their owner's approval
	// (Config.ShellAlwaysAllow is off).
	Approval bool
	// AutoApproved are the approval rules that let a shell command run
	// without asking, described for the model (e.g. "git status",
	// "go test …"); empty: none.
	AutoApproved []string
	// Network lists what the sandbox's commands may reach; empty: no
	// network at all.
	Network []string
	// HostReadOnly: a host read-only investigation (Config.HostReadOnly):
	// commands see the host read-only, there is no workspace, and the
	// network is shared only if the user agrees when asked.
	HostReadOnly bool
	// Date is today's date, UTC, as 2006-01-02.
	Date string
}

// PromptContext is what only the caller knows of a conversation, for its
// system prompt (see Config.PromptContext).
type PromptContext struct {
	Repository, Commit string
	Network            []string
	AutoApproved       []string
}

//go:embed prompt.tmpl
var defaultPrompt string

// DefaultPrompt is the system prompt template used when Config.SystemPrompt
// is nil.
func DefaultPrompt() string { return defaultPrompt }

// promptFuncs are the functions a system prompt template may call.
var promptFuncs = template.FuncMap{"join": strings.Join}

// ParsePrompt parses a system prompt template (Go text/template, executed
// with PromptData; the function join is strings.Join) and executes it once
// on sample data, so that a template naming a field PromptData does not
// have fails here, not at a turn. A template whose rendering could be
// costly is refused with ErrPromptTooCostly: it may range only over a
// field and not within another range, call only join (with a quoted
// separator) and the builtins that compare or count, and define no
// templates.
func ParsePrompt(text string) (*template.Template, error) {
	t, err := template.New("system_prompt").Funcs(promptFuncs).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	if err := checkPromptCost(t); err != nil {
		return nil, err
	}
	samples := []PromptData{{}, {Repository: "r", Commit: "c", Workspace: sandboxkit.WorkspaceDir, Tools: []string{"shell"}, Approval: true, AutoApproved: []string{"ls …"}, Network: []string{"example.org:443"}, HostReadOnly: true, Date: "2006-01-02"}}
	for _, d := range samples {
		if err := t.Execute(io.Discard, d); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// WithSystemPrompt returns l with its own system prompt template (from
// ParsePrompt), which replaces Config.SystemPrompt for the turns it
// serves (see Config.Model): e.g. a model profile's.
func WithSystemPrompt(l LLM, t *template.Template) LLM {
	m := asModeLLM(l)
	m.prompt = t
	return m
}

// maxPrompt bounds a rendered system prompt: it is sent with every
// request, so a runaway template must not fill the model's context.
const maxPrompt = 64 << 10

var parsedDefault = template.Must(ParsePrompt(defaultPrompt))

// systemPrompt renders the turn's system message for a request offering
// tools.
func (e *Engine) systemPrompt(t *Turn, tools []ToolSpec) (string, error) {
	d := PromptData{Workspace: sandboxkit.WorkspaceDir, Approval: !e.cfg.ShellAlwaysAllow, Date: time.Now().UTC().Format(time.DateOnly)}
	for _, s := range tools {
		d.Tools = append(d.Tools, s.Name)
	}
	slices.Sort(d.Tools)
	if e.cfg.PromptContext != nil {
		pc, err := e.cfg.PromptContext(t.ctx, t.User, t.Conversation)
		if err != nil {
			return "", fmt.Errorf("system prompt: %w", err)
		}
		d.Repository, d.Commit, d.Network = pc.Repository, pc.Commit, pc.Network
		if d.Approval {
			d.AutoApproved = pc.AutoApproved
		}
	}
	if e.cfg.HostReadOnly != nil {
		host, err := e.cfg.HostReadOnly(t.ctx, t.User, t.Conversation)
		if err != nil {
			return "", fmt.Errorf("system prompt: reading the conversation's mode: %w", err)
		}
		d.HostReadOnly = host
	}
	tmpl := e.cfg.SystemPrompt
	if m, ok := t.llm.(modeLLM); ok && m.prompt != nil {
		tmpl = m.prompt
	}
	if m := t.c.prompt.Load(); m != nil && m.tmpl == tmpl && m.data.equal(d) {
		return m.text, nil
	}
	text, err := renderPrompt(tmpl, d)
	if err != nil {
		return "", err
	}
	t.c.prompt.Store(&promptMemo{tmpl: tmpl, data: d, text: text})
	return text, nil
}

// PreviewPrompt renders the server's system prompt (Config.SystemPrompt)
// as the first request of a workspace conversation would carry it, with
// the tools the engine offers and pc for what only the caller knows (an
// example repository, say).
func (e *Engine) PreviewPrompt(ctx context.Context, pc PromptContext) (string, error) {
	t := &Turn{ctx: ctx, secrets: map[string]string{}}
	d := PromptData{Workspace: sandboxkit.WorkspaceDir, Approval: !e.cfg.ShellAlwaysAllow, Date: time.Now().UTC().Format(time.DateOnly), Repository: pc.Repository, Commit: pc.Commit, Network: pc.Network}
	for _, s := range e.specs(t) {
		d.Tools = append(d.Tools, s.Name)
	}
	slices.Sort(d.Tools)
	if d.Approval {
		d.AutoApproved = pc.AutoApproved
	}
	return renderPrompt(e.cfg.SystemPrompt, d)
}

// renderPrompt executes tmpl (nil: the default) with d, bounded.
func renderPrompt(tmpl *template.Template, d PromptData) (string, error) {
	if tmpl == nil {
		tmpl = parsedDefault
	}
	b := &cappedBuffer{max: maxPrompt}
	if err := tmpl.Execute(b, d); err != nil {
		if errors.Is(err, errPromptTooLong) {
			return "", fmt.Errorf("system prompt: more than %d bytes rendered; that is the limit", maxPrompt)
		}
		return "", fmt.Errorf("system prompt: %w", err)
	}
	return b.String(), nil
}

// promptMemo is a conversation's last system prompt and what it was
// rendered from: a template's output depends on its data alone, so the
// next model call renders it again only when that changed (a commit,
// the date).
type promptMemo struct {
	tmpl *template.Template
	data PromptData
	text string
}

func (d PromptData) equal(o PromptData) bool {
	return d.Repository == o.Repository && d.Commit == o.Commit && d.Workspace == o.Workspace &&
		d.Approval == o.Approval && d.HostReadOnly == o.HostReadOnly && d.Date == o.Date &&
		slices.Equal(d.Tools, o.Tools) && slices.Equal(d.Network, o.Network) && slices.Equal(d.AutoApproved, o.AutoApproved)
}

var errPromptTooLong = errors.New("rendered system prompt too long")

// cappedBuffer refuses to grow past max bytes, which stops the template's
// execution there.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, errPromptTooLong
	}
	return b.Buffer.Write(p)
}

// withSystem puts the system message first in msgs, joined with a system
// message msgs already starts with (a subagent's): some chat templates
// accept only one, and only first.
func withSystem(sys string, msgs []Message) []Message {
	if len(msgs) > 0 && msgs[0].Role == RoleSystem {
		out := slices.Clone(msgs)
		out[0].Content = sys + "\n\n" + msgs[0].Content
		return out
	}
	return append([]Message{{Role: RoleSystem, Content: sys}}, msgs...)
}
