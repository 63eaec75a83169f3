// Package agentcore is Codumentor's agent engine: it runs conversation
// turns, where model output is data and only the tool runtime can turn it
// into action — through the approval gate and the sandbox.
//
// What it guarantees.
//
//   - Nothing the model writes runs on the host. The shell tool runs
//     sh -c COMMAND inside the conversation's sandboxkit.Session (one per
//     conversation, started when first needed, closed when idle); when the
//     sandbox is unavailable, shell and the file tools return the
//     sandbox's error (errors.Is sandboxkit.ErrUnavailable) and a
//     sandbox_unavailable event says why. There is no fallback.
//   - One conversation cannot take the server down. Its sandbox runs
//     under Config.Sandbox.Limits (processes, memory, CPU, tmpfs, file size, open
//     files, a disk budget for its workspace; sandboxkit.Limits) with at
//     most Config.MaxJobs background jobs running; a command a limit
//     stopped or hampered gets a tool result that names the limit, and a
//     sandbox_limit event records it.
//   - Nothing executes without approval. With Config.ShellAlwaysAllow
//     false (the default) every shell call, and every call of a registered
//     ExecTool, creates a pending Approval naming the exact command, its
//     working directory, user and conversation; nothing is started until
//     its owner decides (Engine.Decide). Approve runs exactly that command,
//     once; deny and expiry (Config.ApprovalTimeout) return a refusal to
//     the model; a second decision fails with ErrApprovalDecided;
//     DecisionAlwaysAllow approves this and every later call of the same
//     tool in the conversation. This is enforced here, not by the UI.
//   - File tools stay in the workspace. read_file, write_file, edit_file,
//     list_files and search_files take paths relative to /workspace. An
//     absolute path or one that climbs out with ".." is refused before any
//     I/O; symlinks are resolved one component at a time inside the
//     overlay's layers, and one that points outside (absolute, or above
//     the root) is refused before its target is looked at
//     (ErrOutsideWorkspace). Reads happen host-side from the layers
//     through overlay.View (the merged view by descriptor: upper over
//     lower, whiteouts delete, opaque directories hide); writes go through
//     the sandbox, so they land in the upper layer exactly as a command's
//     would, and never through a symlink. read_file shows a range of
//     numbered lines, reading no further than the range plus a bounded
//     count of the lines after it (a large file's cached line index takes
//     it to the range); whole-file reads and writes are capped
//     (Config.MaxFileSize).
//   - A shell command's output reaches the model as its head and its real
//     tail; the whole of it (Config.OutputKeep, redacted) is kept beside
//     the conversation's layer, outside the workspace and its diff, and
//     read_file pages it at .codumentor/output/<call>.txt.
//   - Secrets are used by name. The model sees names only (listed in the
//     shell tool's description); {{secret:NAME}} in a command becomes
//     "$CODUMENTOR_SECRET_NAME" in the text given to sh, and the value is
//     put in that command's environment. Every value of the user's secrets,
//     and its base64, hex, URL and JSON-escaped forms, is replaced by
//     [secret:NAME] in tool output, messages, events and logs before they
//     leave the engine. Approvals show the placeholder, never the value.
//
// Turns. Engine.StartTurn stores the user's message and runs the turn in a
// goroutine: stream the model's reply (reasoning_delta events of its
// thinking, if any, which is never sent back; text_delta events; then a
// usage event with the call's tokens, as reported or estimated), run its
// tool calls one after another (native ones, or calls written as text,
// see ToolCallMode), send the results back, until the model stops, the
// turn's budget (Config.MaxSteps model calls, Config.TurnTimeout) ends, or
// the model repeats its calls (Config.RepeatLimit). Every request begins with one system message, rendered from
// Config.SystemPrompt (DefaultPrompt unless the operator gives one) with
// the repository, commit, workspace, tools, approval policy, network and
// date (PromptData). Turns of different conversations run concurrently; a second turn
// of a conversation is refused with ErrTurnInProgress, not queued. A turn
// can be cancelled (Turn.Cancel): the model stream and running commands
// are killed, and turn_cancelled is emitted.
//
// Context window. Each request is built by one function from the stored
// history (Engine.Context shows the result): when the model's window (a
// WindowedLLM's, else Config.ContextWindow), less the part kept for the
// reply, cannot hold it by an estimate calibrated per model from the
// endpoint's usage reports, old tool outputs become stubs that say how to
// get them again, then older turns are summarized by one model call
// (context_compacted; the stored messages stay). The system prompt, the
// newest user message and each tool call with its answer are never
// dropped. An endpoint's refusal (ErrContextLength) brings one compaction
// and one retry; a newest message that cannot fit fails the turn
// (ErrContextTooSmall).
//
// Events. Every step is an Event with a per-conversation sequence number
// that the Store assigns (1, 2, 3, … without gaps); Engine.Subscribe
// replays stored events after a given Seq and then follows new ones. Each
// subscriber reads from the Store at its own pace, so a slow one never
// holds up a turn.
//
// The engine depends on interfaces others implement: LLM, Store,
// Workspaces, SecretResolver, Approver, Retriever. Programs using it must
// call sandboxkit.Main first, as for any Session.
package agentcore
