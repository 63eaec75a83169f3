package daemon

import (
	"context"
	"path/filepath"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
)

// hostReadOnly tells the engine which conversations are host read-only
// investigations; nil (none) unless investigation.enabled.
func hostReadOnly(cfg config.Config, convs *store.Conversations) func(ctx context.Context, user, conversation string) (bool, error) {
	if !cfg.Investigation.Enabled {
		return nil
	}
	return convs.HostReadOnly
}

// hostMasks are hidden from an investigation's view besides the
// profile's own (other users' homes, /root, /run, the service user's
// home with its ~/.ssh, ~/.gnupg and ~/.config): the instance directory
// with its database, workspaces and logs, each named in case one is a
// symlink to elsewhere.
func hostMasks(inst config.Instance) []string {
	var out []string
	for _, d := range []string{inst.Dir, inst.DataDir(), inst.WorkspacesDir(), inst.LogsDir()} {
		if abs, err := filepath.Abs(d); err == nil {
			out = append(out, abs)
			if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
				out = append(out, real)
			}
		}
	}
	return out
}
