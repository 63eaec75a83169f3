package daemon

import (
	"context"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// slogHandler sends agentcore's slog records to the server's hclog
// logger, so there is one log.
type slogHandler struct {
	log   hclog.Logger
	attrs []any
}

func (h slogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.log.GetLevel() <= hclogLevel(l)
}

func (h slogHandler) Handle(_ context.Context, r slog.Record) error {
	args := append([]any(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		args = append(args, a.Key, a.Value.Resolve().Any())
		return true
	})
	h.log.Log(hclogLevel(r.Level), r.Message, args...)
	return nil
}

func (h slogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	attrs := append([]any(nil), h.attrs...)
	for _, a := range as {
		attrs = append(attrs, a.Key, a.Value.Resolve().Any())
	}
	return slogHandler{h.log, attrs}
}

func (h slogHandler) WithGroup(name string) slog.Handler {
	return slogHandler{h.log.Named(name), h.attrs}
}

func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l >= slog.LevelError:
		return hclog.Error
	case l >= slog.LevelWarn:
		return hclog.Warn
	case l >= slog.LevelInfo:
		return hclog.Info
	default:
		return hclog.Debug
	}
}
