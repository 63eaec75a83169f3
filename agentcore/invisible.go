package agentcore

import (
	"fmt"
	"strings"
	"unicode"
)

// InvisibleChar is a character of a command that is not shown as itself.
type InvisibleChar struct {
	// Offset is its byte offset in the command.
	Offset int `json:"offset"`
	// Code is its code point, U+XXXX.
	Code string `json:"code"`
}

// Invisible reports whether r would not be shown as itself, as invisible
// does: the characters a reviewer of a command, a name or a URL would not
// see (tab and newline aside).
func Invisible(r rune) bool { return invisible(r) }

// invisible reports whether r would not be shown as itself: controls
// other than tab and newline (an escape sequence can rewrite the terminal
// line), format characters (bidirectional controls, zero-width spaces and
// joiners, tags), line and paragraph separators, variation selectors and
// the blank Hangul fillers.
func invisible(r rune) bool {
	switch {
	case r == '\t' || r == '\n':
		return false
	case r == unicode.ReplacementChar:
		return true // invalid UTF-8 as well
	case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Bidi_Control, unicode.Variation_Selector):
		return true
	}
	switch r {
	case 0x115F, 0x1160, 0x3164, 0xFFA0:
		return true
	}
	return false
}

// invisibleChars lists command's invisible characters and renders the
// command with each as [U+XXXX]; nil and the command itself when it has
// none.
func invisibleChars(command string) ([]InvisibleChar, string) {
	var found []InvisibleChar
	var shown strings.Builder
	last := 0
	for i, r := range command {
		if !invisible(r) {
			continue
		}
		code := fmt.Sprintf("U+%04X", r)
		found = append(found, InvisibleChar{Offset: i, Code: code})
		shown.WriteString(command[last:i])
		shown.WriteString("[" + code + "]")
		last = i + len(string(r))
		if r == unicode.ReplacementChar {
			// An invalid byte counts one.
			last = i + 1
			if strings.HasPrefix(command[i:], "\uFFFD") {
				last = i + 3
			}
		}
	}
	if found == nil {
		return nil, command
	}
	shown.WriteString(command[last:])
	return found, shown.String()
}
