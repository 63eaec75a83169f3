package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/template"

	"github.com/codumentor/codumentor/agentcore"
)

// MaxPromptTemplate bounds a system prompt template, in bytes:
// llm.system_prompt's and llm.system_prompt_file's.
const MaxPromptTemplate = 64 << 10

// Where a system prompt template comes from (LLM.PromptText).
const (
	PromptBuiltin = "built-in"
	PromptInline  = "llm.system_prompt"
	PromptFile    = "llm.system_prompt_file"
)

// PromptText is the system prompt template in effect and where it comes
// from: PromptInline, PromptFile, or PromptBuiltin (agentcore's
// default). The error names the key.
func (l LLM) PromptText() (text, source string, err error) {
	switch {
	case l.SystemPrompt != "" && l.SystemPromptFile != "":
		return "", "", errors.New("llm.system_prompt and llm.system_prompt_file are both set: keep one")
	case l.SystemPromptFile != "":
		f, err := os.Open(l.SystemPromptFile)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", PromptFile, err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, MaxPromptTemplate+1))
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", PromptFile, err)
		}
		if len(b) > MaxPromptTemplate {
			return "", "", fmt.Errorf("%s: %s is larger than %d bytes", PromptFile, l.SystemPromptFile, MaxPromptTemplate)
		}
		return string(b), PromptFile, nil
	case l.SystemPrompt != "":
		return l.SystemPrompt, PromptInline, nil
	}
	return agentcore.DefaultPrompt(), PromptBuiltin, nil
}

// Prompt parses the system prompt template of llm.system_prompt or
// llm.system_prompt_file; nil, nil when neither is set (agentcore's
// default applies). The error names the key.
func (l LLM) Prompt() (*template.Template, error) {
	text, source, err := l.PromptText()
	if err != nil || source == PromptBuiltin {
		return nil, err
	}
	return ParsePrompt(source, text, MaxPromptTemplate)
}

// ParsePrompt parses a system prompt template of at most max bytes (see
// agentcore.ParsePrompt); the error names key and what the template may
// use.
func ParsePrompt(key, text string, max int) (*template.Template, error) {
	if len(text) > max {
		return nil, fmt.Errorf("%s is %d bytes; the limit is %d", key, len(text), max)
	}
	t, err := agentcore.ParsePrompt(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (the template sees .Repository, .Commit, .Workspace, .Tools, .Approval, .AutoApproved, .Network, .HostReadOnly and .Date)", key, err)
	}
	return t, nil
}
