package agentcore

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// lazyAttrs is a handler whose attributes are given to base only as it
// handles its first record: a turn logs little or nothing, and a handler
// such as slog's JSON one formats the attributes it is given at once.
type lazyAttrs struct {
	base  slog.Handler
	attrs []slog.Attr
	once  sync.Once
	h     slog.Handler
}

func lazy(h slog.Handler) slog.Handler { return &lazyAttrs{base: h} }

func (l *lazyAttrs) handler() slog.Handler {
	l.once.Do(func() {
		l.h = l.base
		if len(l.attrs) > 0 {
			l.h = l.base.WithAttrs(l.attrs)
		}
	})
	return l.h
}

func (l *lazyAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return l.base.Enabled(ctx, level)
}

func (l *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return l.handler().Handle(ctx, r)
}

func (l *lazyAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return l
	}
	return &lazyAttrs{base: l.base, attrs: append(slices.Clip(l.attrs), as...)}
}

func (l *lazyAttrs) WithGroup(name string) slog.Handler { return l.handler().WithGroup(name) }
