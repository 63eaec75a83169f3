package agentcore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// Launch describes a command about to start in a conversation's sandbox
// (Config.Launching).
type Launch struct {
	User, Conversation string
	// Profile is the sandbox profile (sandboxkit.ProfileWorkspace).
	Profile string
	// ArgvSHA256 is the SHA-256 (hex) of the argv joined by NUL bytes,
	// secret placeholders unsubstituted.
	ArgvSHA256 string
	Cwd        string
	// Seccomp is the filter mode; FilterSHA256 the SHA-256 of the
	// filter program loaded (empty in mode off).
	Seccomp      seccomp.Mode
	FilterSHA256 string
	// Secrets names the secrets substituted into the command (never
	// their values).
	Secrets []string
}

// launching tells Config.Launching of a command of call c about to start.
func (e *Engine) launching(ctx context.Context, c *Call, argv []string, cwd string) error {
	if e.cfg.Launching == nil {
		return nil
	}
	mode, err := seccomp.ParseMode(string(e.cfg.Seccomp))
	if err != nil {
		return err
	}
	l := Launch{User: c.User, Conversation: c.Conversation, Profile: sandboxkit.ProfileWorkspace, Cwd: cwd, Seccomp: mode}
	seen := map[string]bool{}
	for _, a := range argv {
		for _, m := range secretRef.FindAllStringSubmatch(a, -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				l.Secrets = append(l.Secrets, m[1])
			}
		}
	}
	sum := sha256.Sum256([]byte(strings.Join(argv, "\x00")))
	l.ArgvSHA256 = hex.EncodeToString(sum[:])
	// The filter is the one the sandbox loads: Load caches it per mode.
	if f, err := seccomp.Load(mode); err == nil && f != nil {
		l.FilterSHA256 = f.Digest
	}
	if err := e.cfg.Launching(ctx, l); err != nil {
		return fmt.Errorf("recording the launch of the command: %w; nothing was run", err)
	}
	return nil
}
