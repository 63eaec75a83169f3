package agentcore

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// slowSetup is a LayeredWorkspaces whose Layers waits, as a project
// setup does, until the test ends it.
type slowSetup struct {
	lower   string
	entered chan struct{}
	end     chan struct{}
}

func (w *slowSetup) Lower(context.Context, string, string) (string, error) { return w.lower, nil }

func (w *slowSetup) Layers(ctx context.Context, _, _ string) ([]string, error) {
	w.entered <- struct{}{}
	select {
	case <-w.end:
		return nil, errors.New("execution tools are disabled in this conversation: the setup failed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A workspace that waits for its project setup (up to half an hour)
// does so without its conversation's workspace lock, which the
// conversation's other workspace work (its background jobs, its
// sandbox's end, the turn's checkpoint) takes.
func TestLayersAwaitedOutsideWorkspaceLock(t *testing.T) {
	dir := t.TempDir()
	layers, err := overlay.Open(filepath.Join(dir, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	w := &slowSetup{lower: t.TempDir(), entered: make(chan struct{})}
	e := &Engine{cfg: Config{Workspaces: w, Layers: layers}, log: slog.New(slog.DiscardHandler),
		convs: map[string]*conv{}, awaiting: map[string]*pending{}, forgotten: map[string]bool{}}
	call := &Call{User: "user_1", Conversation: "conv_000000000000000000000001"}
	for _, tc := range []struct {
		name string
		use  func(context.Context) error
	}{
		{"workspace", func(ctx context.Context) error { _, err := e.workspace(ctx, call); return err }},
		{"startNetworked", func(ctx context.Context) error {
			_, _, err := e.startNetworked(ctx, call, WorkspaceCommand{Argv: []string{"true"}})
			return err
		}},
		{"RunOnCopy", func(ctx context.Context) error {
			return e.RunOnCopy(ctx, call, func(context.Context, string) error { return nil })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.end = make(chan struct{})
			done := make(chan error, 1)
			go func() { done <- tc.use(context.Background()) }()
			select {
			case <-w.entered:
			case err := <-done:
				t.Fatalf("returned without waiting for the setup: %v", err)
			case <-time.After(time.Minute):
				t.Fatal("the setup was never waited for")
			}
			c := e.conv(call.wsKey())
			locked := c.wsMu.TryLock()
			if locked {
				c.wsMu.Unlock()
			}
			close(w.end)
			if err := <-done; err == nil || !strings.Contains(err.Error(), "the setup failed") {
				t.Fatalf("error %v; want the setup's", err)
			}
			if !locked {
				t.Fatal("the workspace lock was held while the setup ran")
			}
		})
	}
}
