package agentcore

import "github.com/codumentor/codumentor/sandboxkit"

// SetCloseSession makes e's Close close its sandboxes with f.
func SetCloseSession(e *Engine, f func(*sandboxkit.Session) error) { e.closeSession = f }

// RefusesTurnNow reports whether a StartTurn on conversation called now
// would be refused with ErrTurnInProgress at once: a turn is set and
// nothing holds the conversation's lock (a holder would make StartTurn
// wait for it).
func RefusesTurnNow(e *Engine, conversation string) bool {
	c := e.conv(conversation)
	if !c.mu.TryLock() {
		return false
	}
	defer c.mu.Unlock()
	return c.turn != nil || c.held
}
