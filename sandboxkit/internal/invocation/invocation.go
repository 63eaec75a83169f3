// Package invocation hands package diag the bwrap invocation that
// sandboxkit builds from a Policy, and the values both name, without
// making them part of sandboxkit's own API.
package invocation

// Bwrap is a Policy turned into a bwrap invocation (diag.Launch).
type Bwrap struct {
	Path  string
	Args  []string
	Env   []string
	Files [][]byte
}

// Build is set by sandboxkit: policy is a *sandboxkit.Policy.
var Build func(policy any, argv []string) (*Bwrap, error)

// MinBwrapVersion is the oldest bubblewrap sandboxkit runs.
const MinBwrapVersion = "0.12.0"

// EgressSocketPlaceholder stands for the egress proxy's host socket in a
// built argv: Run and StartSession bind the socket of the proxy they
// start.
const EgressSocketPlaceholder = "/run/sandboxkit/EGRESS-PROXY.sock"

// Paths inside every sandbox.
const (
	// HomeDir is the sandbox user's home, an empty tmpfs.
	HomeDir = "/home/sandbox"
	// DefaultPath is PATH inside the sandbox.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
)
