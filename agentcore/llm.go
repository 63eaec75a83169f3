package agentcore

import (
	"context"
	"encoding/json"
)

// Role is who wrote a Message.
type Role string

const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the conversation sent to the model.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID names the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Turn is the turn that wrote the message (the engine sets it).
	Turn string `json:"turn,omitempty"`
	// ID and Parent are set by a BranchStore on read: the message's ID in
	// its conversation, and the ID of the message before it in its branch
	// ("" for the first). Neither is sent to a model.
	ID     string `json:"id,omitempty"`
	Parent string `json:"parent,omitempty"`
}

// ToolCall is one complete tool call of a model reply.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON object, as the model wrote it
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON Schema of the arguments object
}

// Request is one chat completion request.
type Request struct {
	Messages []Message
	Tools    []ToolSpec
}

// Chunk is one piece of a streamed reply: text, a reasoning model's
// thinking, a complete tool call, the reason the reply ended, or what the
// call used. Exactly one field is set.
type Chunk struct {
	Text string
	// Reasoning is a piece of a reasoning model's thinking before its
	// answer (reasoning_content or reasoning in OpenAI-compatible
	// streams): shown and stored, never sent back to the model.
	Reasoning    string
	ToolCall     *ToolCall
	FinishReason string
	// Usage, if the LLM sends it, follows the FinishReason: the model's
	// name and, when the endpoint reported them (Reported), the tokens.
	// Without reported numbers the engine estimates them.
	Usage *Usage
}

// Usage is what one model call used: the payload of EventUsage.
type Usage struct {
	Model            string `json:"model"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	// Reported: the endpoint reported the numbers; otherwise they are
	// estimated, generously, as a token per 3 bytes.
	Reported bool `json:"reported"`
}

// Stream is a reply being received.
type Stream interface {
	// Next returns the next chunk of the reply, or io.EOF after the last.
	// A tool call is returned only once all its streamed pieces arrived.
	Next() (Chunk, error)
	// Close releases the stream; it is safe after io.EOF and more than once.
	Close() error
}

// LLM is a chat model that streams replies and may call tools.
//
// Stream must honour ctx: cancelling it ends the stream with ctx's error.
// Errors must say what failed (endpoint, status) without echoing the
// request, which can hold user content.
type LLM interface {
	Stream(ctx context.Context, req Request) (Stream, error)
}
