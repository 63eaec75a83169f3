package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The system prompt template and the sampling settings are checked as
// the configuration loads; each error names its key.
func TestPromptAndSamplingValidated(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.tmpl")
	os.WriteFile(good, []byte("Repo {{.Repository}} at {{.Commit}}; tools {{join .Tools \", \"}}."), 0o600)
	bad := filepath.Join(dir, "bad.tmpl")
	os.WriteFile(bad, []byte("{{.Repo}}"), 0o600)
	big := filepath.Join(dir, "big.tmpl")
	os.WriteFile(big, make([]byte, MaxPromptTemplate+1), 0o600)
	for _, tc := range []struct {
		name, yaml, wantErr string
	}{
		{"defaults", "", ""},
		{"inline", "llm:\n  system_prompt: \"You work on {{.Repository}}{{if .Approval}}, asking first{{end}}.\"\n", ""},
		{"file", "llm:\n  system_prompt_file: " + good + "\n", ""},
		{"does not parse", "llm:\n  system_prompt: \"{{if .Approval}}unclosed\"\n", "llm.system_prompt:"},
		{"unknown field", "llm:\n  system_prompt: \"{{.Repo}}\"\n", "llm.system_prompt:"},
		{"unknown function", "llm:\n  system_prompt: \"{{shout .Repository}}\"\n", "llm.system_prompt:"},
		{"unknown field in file", "llm:\n  system_prompt_file: " + bad + "\n", "llm.system_prompt_file:"},
		{"missing file", "llm:\n  system_prompt_file: " + filepath.Join(dir, "none") + "\n", "llm.system_prompt_file:"},
		{"file too large", "llm:\n  system_prompt_file: " + big + "\n", "llm.system_prompt_file:"},
		{"both", "llm:\n  system_prompt: x\n  system_prompt_file: " + good + "\n", "both set"},
		{"sampling in range", "llm:\n  temperature: 0\n  top_p: 1\n  max_tokens: 1\n  stop: [\"\\n\\n\"]\n", ""},
		{"temperature too high", "llm:\n  temperature: 2.5\n", "llm.temperature"},
		{"temperature negative", "llm:\n  temperature: -0.1\n", "llm.temperature"},
		{"top_p zero", "llm:\n  top_p: 0\n", "llm.top_p"},
		{"top_p above 1", "llm:\n  top_p: 1.5\n", "llm.top_p"},
		{"max_tokens zero", "llm:\n  max_tokens: 0\n", "llm.max_tokens"},
		{"empty stop", "llm:\n  stop: [\"\"]\n", "llm.stop[0]"},
		{"extra_body", "llm:\n  extra_body:\n    chat_template_kwargs: {enable_thinking: false}\n    top_k: 20\n", ""},
		{"extra_body not a mapping", "llm:\n  extra_body: [top_k]\n", "llm.extra_body must be a mapping"},
		{"extra_body sets model", "llm:\n  extra_body: {model: other}\n", `llm.extra_body must not set "model"`},
		{"extra_body sets stream_options", "llm:\n  extra_body: {stream_options: {include_usage: false}}\n", `llm.extra_body must not set "stream_options"`},
		{"tool call modes", "llm:\n  tool_calls: text\n  max_steps: 5\n  repeat_limit: 2\n", ""},
		{"tool call mode misspelt", "llm:\n  tool_calls: txt\n", "llm.tool_calls"},
		{"repeat_limit 1", "llm:\n  repeat_limit: 1\n", "llm.repeat_limit"},
		{"max_steps 0", "llm:\n  max_steps: 0\n", "llm.max_steps"},
		{"context window", "llm:\n  context_window: 12000\n  max_tokens: 2000\n", ""},
		{"context window negative", "llm:\n  context_window: -1\n", "llm.context_window"},
		{"context window tiny", "llm:\n  context_window: 100\n", "llm.context_window"},
		{"context window misspelt", "llm:\n  context_windows: 12000\n", "context_windows"},
		{"max_tokens fills the window", "llm:\n  context_window: 4000\n  max_tokens: 3000\n", "llm.max_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Parse: %v; want no error", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Parse: %v; want an error naming %q", err, tc.wantErr)
			}
		})
	}
	c, err := Parse([]byte("llm:\n  temperature: 0\n"))
	if err != nil || c.LLM.Sampling.Temperature == nil || *c.LLM.Sampling.Temperature != 0 || c.LLM.Sampling.TopP != nil {
		t.Errorf("temperature 0: %+v, %v; want it set to 0 and top_p unset", c.LLM.Sampling, err)
	}
}
