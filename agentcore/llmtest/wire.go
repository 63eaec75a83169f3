package llmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/codumentor/codumentor/agentcore"
)

// The OpenAI chat completions wire format, as much of it as clients send
// and read.

type wireRequest struct {
	Model         string        `json:"model"`
	Messages      []wireMessage `json:"messages"`
	Tools         []wireTool    `json:"tools,omitempty"`
	Stream        bool          `json:"stream"`
	MaxTokens     *int          `json:"max_tokens,omitempty"`
	MaxCompletion *int          `json:"max_completion_tokens,omitempty"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
}

type wireMessage struct {
	Role string `json:"role"`
	// Content is a string, null, or an array of parts ({"type":"text","text":…}).
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

// content decodes a message's content: a string, null, or text parts
// joined (other part kinds, such as images, carry no text).
func content(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content is neither a string nor an array of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// request converts a decoded wire request to what agentcore sent.
func (w *wireRequest) request() (agentcore.Request, error) {
	var req agentcore.Request
	for i, m := range w.Messages {
		c, err := content(m.Content)
		if err != nil {
			return req, fmt.Errorf("messages[%d]: %v", i, err)
		}
		msg := agentcore.Message{Role: agentcore.Role(m.Role), Content: c, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, agentcore.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range w.Tools {
		req.Tools = append(req.Tools, agentcore.ToolSpec{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return req, nil
}

type wireChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []wireChunkChoice `json:"choices"`
	Usage   *wireUsage        `json:"usage,omitempty"`
}

type wireChunkChoice struct {
	Index        int       `json:"index"`
	Delta        wireDelta `json:"delta"`
	FinishReason *string   `json:"finish_reason"` // null until the last chunk
}

type wireDelta struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	Reasoning        string         `json:"reasoning,omitempty"` // newer vLLM's name
	ToolCalls        []wireToolCall `json:"tool_calls,omitempty"`
}

type wireCompletion struct {
	ID      string                 `json:"id"`
	Object  string                 `json:"object"`
	Created int64                  `json:"created"`
	Model   string                 `json:"model"`
	Choices []wireCompletionChoice `json:"choices"`
	Usage   wireUsage              `json:"usage"`
}

type wireCompletionChoice struct {
	Index   int `json:"index"`
	Message struct {
		Role             string         `json:"role"`
		Content          *string        `json:"content"` // null when the reply only calls tools
		ReasoningContent string         `json:"reasoning_content,omitempty"`
		Reasoning        string         `json:"reasoning,omitempty"`
		ToolCalls        []wireToolCall `json:"tool_calls,omitempty"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type wireError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

type wireEmbeddingRequest struct {
	Input          json.RawMessage `json:"input"`
	Model          string          `json:"model"`
	EncodingFormat string          `json:"encoding_format,omitempty"`
	Dimensions     int             `json:"dimensions,omitempty"`
}

type wireEmbeddingResponse struct {
	Object string          `json:"object"`
	Data   []wireEmbedding `json:"data"`
	Model  string          `json:"model"`
	Usage  wireUsage       `json:"usage"`
}

type wireEmbedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string of little-endian float32s
}

type wireModels struct {
	Object string      `json:"object"`
	Data   []wireModel `json:"data"`
}

type wireModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// MaxModelLen is vLLM's context length; Meta llama.cpp's model data.
	MaxModelLen int            `json:"max_model_len,omitempty"`
	Meta        map[string]int `json:"meta,omitempty"`
}

// maxTokens is the request's max_tokens (or max_completion_tokens), 0
// when unset.
func (w *wireRequest) maxTokens() int {
	switch {
	case w.MaxCompletion != nil:
		return *w.MaxCompletion
	case w.MaxTokens != nil:
		return *w.MaxTokens
	}
	return 0
}
