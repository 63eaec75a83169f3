package agentcore

import "github.com/codumentor/codumentor/sandboxkit"

// SetCloseSession makes e's Close close its sandboxes with f.
func SetCloseSession(e *Engine, f func(*sandboxkit.Session) error) { e.closeSession = f }

// SetCheckpointHooks makes e tell before that a turn's begin checkpoint
// is about to be taken, and awaiting that a turn waits for it.
func SetCheckpointHooks(e *Engine, before func(turn string), awaiting func()) {
	e.beforeCheckpoint, e.awaitingCheckpoint = before, awaiting
}
