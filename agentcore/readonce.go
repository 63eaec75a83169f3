package agentcore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// readOnce is a turn's history in the Store, read at the turn's first
// step and then kept with what the turn appends: while a turn runs it is
// the only writer of its conversation's messages, and a Store read is
// the whole history (for the daemon's, a query and the JSON decoding of
// every message), at every step otherwise. The messages it appends are
// kept without the ID a BranchStore gives them; withIDs reads them
// again where one is needed.
type readOnce struct {
	h    history
	turn string // what storeHistory sets on each message appended
	msgs []Message
	read bool
	// reads counts the Store reads: between two, msgs only grows (see
	// requestBuf).
	reads int
}

// readingOnce wraps a turn's Store history in a readOnce; a subagent's,
// in memory, stays as it is.
func readingOnce(h history) history {
	if sh, ok := h.(storeHistory); ok {
		return &readOnce{h: h, turn: sh.turn}
	}
	return h
}

// withIDs returns hist, a history t read, with message i's ID as the
// Store gave it: read again if t appended it (and the Store gives IDs).
func withIDs(ctx context.Context, t *Turn, hist []Message, i int) ([]Message, error) {
	r, ok := t.hist.(*readOnce)
	if !ok || i < 0 || i >= len(hist) || hist[i].ID != "" || hist[0].ID == "" {
		return hist, nil
	}
	msgs, err := r.h.messages(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the conversation: %w", err)
	}
	r.msgs, r.read, r.reads = msgs, true, r.reads+1
	if len(msgs) != len(hist) {
		return hist, nil
	}
	return r.messages(ctx)
}

func (r *readOnce) messages(ctx context.Context) ([]Message, error) {
	if !r.read {
		msgs, err := r.h.messages(ctx)
		if err != nil {
			return nil, err
		}
		r.msgs, r.read, r.reads = msgs, true, r.reads+1
	}
	// Capped, so that an append by the caller cannot write where the
	// turn's next message goes.
	return r.msgs[:len(r.msgs):len(r.msgs)], nil
}

func (r *readOnce) append(ctx context.Context, msgs ...Message) error {
	if err := r.h.append(ctx, msgs...); err != nil {
		// What the Store holds now is unknown: read it again.
		r.msgs, r.read = nil, false
		return err
	}
	if r.read {
		for _, m := range msgs {
			m.Turn = r.turn
			r.msgs = append(r.msgs, asStored(m))
		}
	}
	return nil
}

// asStored is m as a Store that keeps messages as JSON (the daemon's)
// reads it back: every byte of invalid UTF-8 a U+FFFD, as encoding/json
// writes it.
func asStored(m Message) Message {
	m.Content, m.ToolCallID = jsonText(m.Content), jsonText(m.ToolCallID)
	cloned := false
	for i, tc := range m.ToolCalls {
		s := ToolCall{ID: jsonText(tc.ID), Name: jsonText(tc.Name), Arguments: jsonText(tc.Arguments)}
		if s == tc {
			continue
		}
		if !cloned {
			m.ToolCalls, cloned = slices.Clone(m.ToolCalls), true // the caller's stays as it is
		}
		m.ToolCalls[i] = s
	}
	return m
}

// jsonText is s with every byte of invalid UTF-8 replaced by U+FFFD.
func jsonText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
