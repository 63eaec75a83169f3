package agentcore

import "github.com/codumentor/codumentor/sandboxkit"

// SetCloseSession makes e's Close close its sandboxes with f.
func SetCloseSession(e *Engine, f func(*sandboxkit.Session) error) { e.closeSession = f }
