package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// logFile is logs/codumentor.log, which Reopen opens again by its name:
// after logrotate renames the file, the server writes the new one.
type logFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

// openLogFile opens path for appending (0600). It refuses a symbolic
// link, which could send the log out of the instance.
func openLogFile(path string) (*logFile, error) {
	f, err := openLog(path)
	if err != nil {
		return nil, err
	}
	return &logFile{path: path, f: f}, nil
}

func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the log: %w", err)
	}
	return f, nil
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

// Reopen opens the log by its path again and closes the old file; on an
// error the old file stays in use.
func (l *logFile) Reopen() error {
	f, err := openLog(l.path)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.f
	l.f = f
	l.mu.Unlock()
	return old.Close()
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

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
