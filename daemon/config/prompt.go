package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/template"

	"github.com/codumentor/codumentor/agentcore"
)

// maxPromptFile bounds llm.system_prompt_file.
const maxPromptFile = 64 << 10

// Prompt parses the system prompt template of llm.system_prompt or
// llm.system_prompt_file; nil, nil when neither is set (agentcore's
// default applies). The error names the key.
func (l LLM) Prompt() (*template.Template, error) {
	text, key := l.SystemPrompt, "llm.system_prompt"
	switch {
	case l.SystemPrompt != "" && l.SystemPromptFile != "":
		return nil, errors.New("llm.system_prompt and llm.system_prompt_file are both set: keep one")
	case l.SystemPromptFile != "":
		key = "llm.system_prompt_file"
		f, err := os.Open(l.SystemPromptFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxPromptFile+1))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if len(b) > maxPromptFile {
			return nil, fmt.Errorf("%s: %s is larger than %d bytes", key, l.SystemPromptFile, maxPromptFile)
		}
		text = string(b)
	case l.SystemPrompt == "":
		return nil, nil
	}
	t, err := agentcore.ParsePrompt(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (the template sees .Repository, .Commit, .Workspace, .Tools, .Approval, .Network, .HostReadOnly and .Date)", key, err)
	}
	return t, nil
}
