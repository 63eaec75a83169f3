package setup

import (
	"errors"

	"github.com/codumentor/codumentor/sandboxkit"
)

// setupLabel is the label of setup sandboxes (Policy.Profile).
const setupLabel = "setup"

// Policy is the sandbox of a project's setup script under s: ws at
// /workspace, and the network only as the repository allows it for
// setup: the host's (hostNet), or only the destinations of allow through
// an egress proxy under s's caps (not both: the proxy is the way out of
// a sandbox without the host network), else none. A setup layer is
// shared like a snapshot and bounded like one: its disk budget is the
// smaller of s's and maxLayer (repositories.max_snapshot_bytes; 0: s's).
func Policy(s sandboxkit.Settings, maxLayer int64, ws *sandboxkit.Workspace, hostNet bool, allow []string) (*sandboxkit.Policy, error) {
	if hostNet && len(allow) > 0 {
		return nil, errors.New("a setup has the host network or an egress allow-list, not both")
	}
	l := sandboxkit.DefaultLimits()
	if s.Limits != nil {
		l = *s.Limits
	}
	if maxLayer > 0 && (l.Disk == 0 || maxLayer < l.Disk) {
		l.Disk = maxLayer
	}
	s.Limits = &l
	p, err := s.Workspace(setupLabel, ws)
	if err != nil {
		return nil, err
	}
	p.ShareNet = hostNet
	if len(allow) > 0 {
		p.Egress = s.Egress(allow)
	}
	return p, nil
}
