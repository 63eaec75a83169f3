package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// KindWorkspaceGC is the kind of the job that removes unused workspace
// layers.
const KindWorkspaceGC = "workspace_gc"

// WorkspaceGC returns the handler of KindWorkspaceGC: it removes the layers
// of layers unused for ttl (overlay.Store.GC) and returns
// {"removed": [layer IDs]}. It ignores the job's payload. Layers in use by
// a sandbox are skipped. A conversation whose layer it removed gets a new,
// empty one when it next runs a sandbox.
func WorkspaceGC(layers *overlay.Store, ttl time.Duration) Handler {
	return func(ctx context.Context, _ *Job) (any, error) {
		removed, err := layers.GC(ctx, ttl, time.Now(), false)
		if err != nil {
			return nil, fmt.Errorf("jobs: workspace GC (after removing %d layers): %w", len(removed), err)
		}
		if removed == nil {
			removed = []string{}
		}
		return map[string][]string{"removed": removed}, nil
	}
}
