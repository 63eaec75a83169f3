package agentcore

import (
	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// The payloads of the events (Event.Data), one type per event type (see
// the Event… constants). Their JSON is a contract with the web UI and
// API clients: add fields, never rename or retype one.

// TurnStarted is the data of EventTurnStarted: a user's message began a
// turn.
type TurnStarted struct {
	User    string `json:"user"`
	Content string `json:"content"`
}

// TextDelta is the data of EventTextDelta: the next piece of the
// model's reply.
type TextDelta struct {
	Text string `json:"text"`
}

// ToolCallRequested is the data of EventToolCallRequested: the model
// called a tool (Arguments as the model wrote them, redacted).
type ToolCallRequested struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolOutput is the data of EventToolOutput: what the model is given as
// the call's result, redacted and capped.
type ToolOutput struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Output string `json:"output"`
}

// ToolFinished is the data of EventToolFinished; Error is set when the
// call failed.
type ToolFinished struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Error string `json:"error,omitempty"`
}

// ToolOutputDelta is the data of EventToolOutputDelta: output of a
// running tool (an external agent), redacted, before its tool_output.
type ToolOutputDelta struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Text string `json:"text"`
}

// SubagentStarted is the data of EventSubagentStarted: the delegate
// call ID started Subagent on Task; Isolation is the delegate's mode.
type SubagentStarted struct {
	ID        string `json:"id"`
	Subagent  string `json:"subagent"`
	Task      string `json:"task"`
	Isolation string `json:"isolation"`
}

// SubagentFinished is the data of EventSubagentFinished; Error is set
// when the subagent failed.
type SubagentFinished struct {
	ID       string `json:"id"`
	Subagent string `json:"subagent"`
	Error    string `json:"error,omitempty"`
}

// SandboxUnavailable is the data of EventSandboxUnavailable: why shell
// and file tools refuse (no host path in it).
type SandboxUnavailable struct {
	Error string `json:"error"`
}

// SandboxLimit is the data of EventSandboxLimit: a command of call ID
// hit Limit (memory, pids, disk or disk_free).
type SandboxLimit struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Limit   string `json:"limit"`
	Message string `json:"message"`
}

// SandboxWaiting is the data of EventSandboxWaiting: call ID waits for
// the conversation's sandbox; Status is "starting" (repeated while it
// waits), then "started" or "failed".
type SandboxWaiting struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Status   string `json:"status"`
	WaitedMS int64  `json:"waited_ms"`
}

// SeccompViolation is the data of EventSeccompViolation: Count more
// blocklisted calls of Syscall that Command made during call ID, let
// through in seccomp log mode (see sandboxkit.Violation).
type SeccompViolation struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Syscall string `json:"syscall"`
	Command string `json:"command"`
	Args    string `json:"args"`
	Refusal string `json:"refusal"`
	Count   int64  `json:"count"`
}

// Egress is the data of EventEgress: a connection attempt through the
// egress proxy (see egress.Event) by call ID of tool Name (ID "" and
// Name "setup" for a project setup). Build it with NewEgress.
type Egress struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Proto      string `json:"proto"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Addr       string `json:"addr"`
	Verdict    string `json:"verdict"` // egress.Allowed, egress.Refused or egress.Failed
	Reason     string `json:"reason"`
	Sent       int64  `json:"sent"`
	Received   int64  `json:"received"`
	DurationMS int64  `json:"duration_ms"`
}

// NewEgress returns the event data of ev, an attempt of call id of the
// tool name.
func NewEgress(id, name string, ev egress.Event) Egress {
	return Egress{
		ID: id, Name: name, Proto: ev.Proto, Host: ev.Host, Port: ev.Port, Addr: ev.Addr,
		Verdict: ev.Verdict, Reason: ev.Reason, Sent: ev.Sent, Received: ev.Received, DurationMS: ev.Duration.Milliseconds(),
	}
}

// TurnFinished is the data of EventTurnFinished: Reason is "stop" (the
// model ended its reply) or "max_steps" (the step budget ran out).
type TurnFinished struct {
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"` // why it stopped, for people: set for max_steps and repeating
}

// TurnFailed is the data of EventTurnFailed: what failed, redacted.
type TurnFailed struct {
	Error string `json:"error"`
}

// TurnCancelled is the data of EventTurnCancelled: Reason is empty when
// the user cancelled the turn.
type TurnCancelled struct {
	Reason string `json:"reason,omitempty"`
}

// SetupStarted is the data of EventSetupStarted: the repository's setup
// Script runs, with the host's network (Network) or through the egress
// proxy to the destinations of Egress (null: none).
type SetupStarted struct {
	Script  string   `json:"script"`
	Network bool     `json:"network"`
	Egress  []string `json:"egress"`
}

// SetupOutput is the data of EventSetupOutput: the setup's output, in
// order.
type SetupOutput struct {
	Text string `json:"text"`
}

// SetupFinished is the data of EventSetupFinished: the setup's result is
// the workspace's. Cached: an earlier run's was reused and Script did not
// run; Script "": the repository has none.
type SetupFinished struct {
	Cached bool   `json:"cached"`
	Script string `json:"script"`
}

// SetupFailed is the data of EventSetupFailed: why the workspace tools
// are disabled.
type SetupFailed struct {
	Error string `json:"error"`
}

// ReasoningDelta is the payload of EventReasoningDelta: a piece of a
// reasoning model's thinking (DeepSeek-R1, Qwen3 and others stream it
// before their answer), redacted and coalesced like text deltas. It is
// shown and stored, at most Config.MaxReasoning bytes of a reply, and
// never sent back to the model.
type ReasoningDelta struct {
	Text string `json:"text"`
	// Omitted, set on the reply's last reasoning_delta (whose Text is
	// empty), counts the bytes of thinking past Config.MaxReasoning that
	// were not kept.
	Omitted int `json:"omitted,omitempty"`
}

// TurnUsage is the payload of EventTurnUsage: what all model calls of a
// turn used, its subagents' included.
type TurnUsage struct {
	Calls            int `json:"calls"`
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// Estimated is how many of the calls have estimated numbers (the
	// endpoint reported none).
	Estimated int `json:"estimated"`
}

// EventContextCompacted's payload: older messages of the conversation
// were replaced, in what the model sees, by Summary. The stored messages
// stay as they were.
type ContextCompacted struct {
	// Summary is the model-written summary that stands for messages
	// [From, To) of the conversation's history.
	Summary string `json:"summary"`
	From    int    `json:"from"`
	To      int    `json:"to"`
	// TokensBefore and TokensAfter are the estimated prompt tokens of
	// the request before and after.
	TokensBefore int `json:"tokens_before"`
	TokensAfter  int `json:"tokens_after"`
	// Reason is "budget" (the request would not have fit) or
	// "context_length" (the endpoint refused it).
	Reason string `json:"reason"`
	// Agent names the subagent whose history it is; empty for the
	// conversation's.
	Agent string `json:"agent,omitempty"`
	// Last is the ID of the last message it stands for (history[To-1]),
	// so that another branch of the history does not take it; empty
	// where the Store gives messages no IDs.
	Last string `json:"last,omitempty"`
}

// WorkspaceReverted is the data of a workspace_reverted event.
type WorkspaceReverted struct {
	// Turn: the workspace is as it was when this turn began.
	Turn string `json:"turn"`
	// Reason is "revert" (RevertTurn) or "branch" (a turn From a message).
	Reason string `json:"reason"`
}
