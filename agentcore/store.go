package agentcore

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrNotFound is wrapped by errors about something that does not exist or
// that the caller may not see: a Store's missing record, an unknown
// approval or one of another user's conversation (the two answer the same,
// so an ID reveals nothing).
var ErrNotFound = errors.New("not found")

// Store persists conversations: their messages, events and approvals. The
// daemon implements it over SQLite; every method must be safe for
// concurrent use.
//
// The engine writes only redacted content: messages and event data never
// hold a secret value, so the Store needs no special care for secrets.
type Store interface {
	// AppendMessages adds msgs to the end of the conversation's history,
	// all or none.
	AppendMessages(ctx context.Context, conversation string, msgs ...Message) error
	// Messages returns the conversation's history, oldest first; none for
	// a conversation never written to.
	Messages(ctx context.Context, conversation string) ([]Message, error)

	// AppendEvent stores e with the next sequence number of
	// e.Conversation (1 for the first event, then one more than the last)
	// and returns it with Seq set. It must be atomic per conversation:
	// concurrent appends never share or skip a number.
	AppendEvent(ctx context.Context, e Event) (Event, error)
	// Events returns at most limit events of the conversation with Seq
	// greater than after, in Seq order.
	Events(ctx context.Context, conversation string, after int64, limit int) ([]Event, error)

	// SaveApproval creates the approval with a.ID or replaces it.
	SaveApproval(ctx context.Context, a Approval) error
	// Approval returns the approval with id, or an error wrapping
	// ErrNotFound.
	Approval(ctx context.Context, id string) (Approval, error)
	// Approvals lists the conversation's approvals, oldest first.
	Approvals(ctx context.Context, conversation string) ([]Approval, error)
}

// Event types. They are a contract with the UI: add, never rename. The
// comment of each names the type of its data (Event.Data), where its
// schema is written.
const (
	EventTurnStarted        = "turn_started"        // TurnStarted
	EventTextDelta          = "text_delta"          // TextDelta
	EventReasoningDelta     = "reasoning_delta"     // ReasoningDelta: a reasoning model's thinking, coalesced like text_delta
	EventToolCallRequested  = "tool_call_requested" // ToolCallRequested
	EventApprovalPending    = "approval_pending"    // an Approval
	EventApprovalDecided    = "approval_decided"    // an Approval, decided or expired
	EventToolOutput         = "tool_output"         // ToolOutput
	EventToolFinished       = "tool_finished"       // ToolFinished
	EventToolOutputDelta    = "tool_output_delta"   // ToolOutputDelta: output of a running tool (an external agent) before its tool_output
	EventSubagentStarted    = "subagent_started"    // SubagentStarted: a delegate call started a subagent; its tool calls' IDs begin with "<subagent>."
	EventSubagentFinished   = "subagent_finished"   // SubagentFinished
	EventSandboxUnavailable = "sandbox_unavailable" // SandboxUnavailable: why shell and file tools refuse
	EventSandboxLimit       = "sandbox_limit"       // SandboxLimit: a resource limit hit by a command
	EventSandboxWaiting     = "sandbox_waiting"     // SandboxWaiting: a call waits for the conversation's sandbox to start
	EventSeccompViolation   = "seccomp_violation"   // SeccompViolation: blocklisted calls a command made, let through in seccomp log mode
	EventEgress             = "egress"              // Egress: a connection attempt through the egress proxy
	EventUsage              = "usage"               // a Usage: the tokens of one model call, reported by the endpoint or estimated
	EventContextCompacted   = "context_compacted"   // ContextCompacted: older messages summarized, in what the model sees, to fit its context window
	EventTurnUsage          = "turn_usage"          // TurnUsage: the tokens of all the turn's model calls, just before its last event (turn_finished, turn_failed or turn_cancelled); none if it made no call
	EventTurnFinished       = "turn_finished"       // TurnFinished: reason "stop", "max_steps" or "repeating" (the same tool calls Config.RepeatLimit times in a row)
	EventTurnFailed         = "turn_failed"         // TurnFailed
	EventTurnCancelled      = "turn_cancelled"      // TurnCancelled
	EventWorkspaceReverted  = "workspace_reverted"  // WorkspaceReverted: the workspace went back to a checkpoint
	// Project setup events, outside any turn (see Engine.Publish).
	EventSetupStarted  = "setup_started"  // SetupStarted: the repository's setup script runs
	EventSetupOutput   = "setup_output"   // SetupOutput: its output, in order
	EventSetupFinished = "setup_finished" // SetupFinished: its result is the workspace's
	EventSetupFailed   = "setup_failed"   // SetupFailed: why the workspace tools are disabled
)

// Event is one step of a conversation, as persisted and streamed.
type Event struct {
	// Seq numbers the conversation's events 1, 2, 3, … without gaps; the
	// Store assigns it.
	Seq          int64           `json:"seq"`
	Type         string          `json:"type"`
	Conversation string          `json:"conversation"`
	Turn         string          `json:"turn,omitempty"`
	Time         time.Time       `json:"time"`
	Data         json.RawMessage `json:"data"` // redacted; a JSON object
}

// Decision is how a person (or an Approver) decided an approval.
type Decision string

const (
	// DecisionApprove runs the approved command once.
	DecisionApprove Decision = "approve"
	// DecisionDeny returns a refusal to the model; nothing runs.
	DecisionDeny Decision = "deny"
	// DecisionAlwaysAllow approves this command and every later call of
	// the same tool (e.g. shell) in the same conversation without asking
	// again.
	DecisionAlwaysAllow Decision = "always_allow"
)

func (d Decision) valid() bool {
	return d == DecisionApprove || d == DecisionDeny || d == DecisionAlwaysAllow
}

// ApprovalStatus is where an approval is in its life.
type ApprovalStatus string

const (
	ApprovalPending ApprovalStatus = "pending"
	ApprovalDecided ApprovalStatus = "decided" // see Approval.Decision
	ApprovalExpired ApprovalStatus = "expired"
	// ApprovalCancelled: the turn ended (cancelled) before a decision.
	ApprovalCancelled ApprovalStatus = "cancelled"
)

// Approval is a request to run one command, shown to the conversation's
// owner. It names exactly what will run: Command is executed as written
// (after substituting {{secret:NAME}} server-side) and nothing else.
type Approval struct {
	ID           string `json:"id"`
	User         string `json:"user"`
	Conversation string `json:"conversation"`
	Turn         string `json:"turn"`
	ToolCallID   string `json:"tool_call_id"`
	// Agent names the subagent whose call this is; empty for the
	// conversation's own agent.
	Agent string `json:"agent,omitempty"`
	Tool  string `json:"tool"`
	// Command is the command line as the model wrote it, with secret
	// placeholders, never their values.
	Command string `json:"command"`
	// Invisible lists the characters of Command that a browser or
	// terminal would not show as themselves (bidirectional controls,
	// zero-width and other format or control characters): what a person
	// reads can differ from what runs, so a UI must show CommandShown
	// or mark these. Empty for most commands.
	Invisible []InvisibleChar `json:"invisible,omitempty"`
	// CommandShown is Command with each Invisible character written as
	// [U+XXXX]: what a UI shows. Always set; equal to Command when
	// Invisible is empty.
	CommandShown string `json:"command_shown"`
	// Kind is what is approved: empty for a command (or tool call), or
	// ApprovalHostNetwork.
	Kind string `json:"kind,omitempty"`
	// Cwd is the working directory inside the sandbox.
	Cwd        string         `json:"cwd"`
	Background bool           `json:"background,omitempty"`
	Created    time.Time      `json:"created"`
	Expires    time.Time      `json:"expires"`
	Status     ApprovalStatus `json:"status"`
	Decision   Decision       `json:"decision,omitempty"`
	// DecidedBy is the user who decided, or "approver" for Config.Approver.
	DecidedBy string    `json:"decided_by,omitempty"`
	Decided   time.Time `json:"decided,omitzero"`
	// Rule names the Approver's rule that decided, if one did.
	Rule string `json:"rule,omitempty"`
	// ProposedRule is the argv prefix the Approver proposes the owner
	// allow from now on instead of deciding once (Verdict.ProposedRule).
	ProposedRule []string `json:"proposed_rule,omitempty"`
}

// ApprovalHostNetwork is the Kind of the approval a host read-only
// investigation asks before its first command: approved, its sandbox
// shares the host's network; denied or expired, it stays isolated.
const ApprovalHostNetwork = "host_network"

// Approver decides approvals by policy before a person is asked, e.g. an
// operator's allow-list of commands. Review returns a Verdict with an
// empty Decision to leave the decision to the conversation's owner
// (Engine.Decide), or one that applies at once: then no approval_pending
// is emitted, only the approval_decided naming Verdict.Rule. It must not
// block for long: the turn waits on it.
type Approver interface {
	Review(ctx context.Context, a Approval) (Verdict, error)
}

// Verdict is an Approver's answer.
type Verdict struct {
	// Decision applies at once; empty asks the owner.
	Decision Decision
	// Rule names the policy that decided (Approval.Rule).
	Rule string
	// ProposedRule, when the owner is asked, is the argv prefix an
	// "always allow commands like this" would add (Approval.ProposedRule).
	ProposedRule []string
}

// SecretResolver gives the secrets a user stored. Values stay on the
// server: the engine puts them only into a sandboxed command's
// environment and redacts them from everything that flows back.
type SecretResolver interface {
	// Names lists the names of user's secrets.
	Names(ctx context.Context, user string) ([]string, error)
	// Value returns the value of user's secret name, or an error wrapping
	// ErrNotFound.
	Value(ctx context.Context, user, name string) (string, error)
}

// Retriever searches the code ingested for a user (the search_code tool
// that integrations register uses it).
type Retriever interface {
	// Search returns at most limit hits for query among the repositories
	// user may read, best first.
	Search(ctx context.Context, user, query string, limit int) ([]Hit, error)
}

// Hit is one search result of a Retriever.
type Hit struct {
	Repository string `json:"repository"`
	// Branch is the repository's branch the file is on ("" when the
	// retriever does not know it).
	Branch    string  `json:"branch,omitempty"`
	Path      string  `json:"path"`
	StartLine int     `json:"start_line"`
	EndLine   int     `json:"end_line"`
	Snippet   string  `json:"snippet"`
	Score     float64 `json:"score"`
}

// Workspaces says which host tree a conversation's workspace shows.
type Workspaces interface {
	// Lower returns the host directory shown (read-only, copy-on-write)
	// at /workspace for the conversation. The engine never writes it.
	Lower(ctx context.Context, user, conversation string) (string, error)
}

// LayeredWorkspaces is a Workspaces whose conversations may show
// read-only host trees stacked over their lower tree (bottom first), such
// as a project setup's cached result. Layers may wait for such a layer
// to be made; its error (e.g. a failed setup's reason) is what the
// conversation's workspace tools answer, so it must name no host path.
type LayeredWorkspaces interface {
	Workspaces
	Layers(ctx context.Context, user, conversation string) ([]string, error)
}
