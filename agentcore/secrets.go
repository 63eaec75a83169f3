package agentcore

import (
	"bytes"
	"context"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// secretRef matches a secret placeholder in a shell command.
var secretRef = regexp.MustCompile(`\{\{secret:([A-Za-z0-9_]+)\}\}`)

// secretEnvPrefix names the environment variables that carry secret
// values into a command.
const secretEnvPrefix = "CODUMENTOR_SECRET_"

// Redaction by length: a form (a secret's value, or an encoding of it)
// of minAnywhere bytes or more is replaced wherever it occurs; a shorter
// one only where it stands alone (see isWordByte), since as a part of
// words it would blank out ordinary output ("test" in "latest"). The
// encodings of values shorter than minRedact are not looked for: each
// would be a short, common word (the hex of "ab" is "6162").
const (
	minRedact   = 4
	minAnywhere = 8
)

// substituteSecrets turns the placeholders of command into quoted
// variable references (see placeSecrets) and returns the environment entries that carry
// the values (from secrets, name → value): the text given to sh never
// holds a value, and no argv or log line does either.
func substituteSecrets(command string, secrets map[string]string) (string, []string, error) {
	var env []string
	var missing error
	seen := map[string]bool{}
	for _, m := range secretRef.FindAllStringSubmatch(command, -1) {
		n := m[1]
		if seen[n] {
			continue
		}
		seen[n] = true
		v, ok := secrets[n]
		if !ok {
			missing = fmt.Errorf("unknown secret %q: nothing was run; available secrets: %s", n, nameList(slices.Sorted(maps.Keys(secrets))))
			break
		}
		env = append(env, secretEnvPrefix+n+"="+v)
	}
	if missing != nil {
		return "", nil, missing
	}
	text, err := placeSecrets(command, secretRef.FindAllStringSubmatchIndex(command, -1))
	if err != nil {
		return "", nil, err
	}
	return text, env, nil
}

func nameList(names []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

// redactor replaces every secret value of a user, and its common
// encodings, with [secret:NAME].
type redactor struct {
	r *strings.Replacer // the long forms; nil: none
	// forms are the texts replaced, long and short (and, with short
	// ones, the markers), longest first: what the delta writer holds.
	forms []string
	// short are the forms shorter than minAnywhere, by their first
	// byte, longest first: replaced only where they stand alone; nil:
	// none.
	short       *[256][]redactForm
	names       map[string]bool // of the secrets, for their [secret:NAME] markers
	longestName int
	// wrapped are the forms that encoders wrap into lines (base64 and
	// base32 at 76 or 64 columns, hex at 60), looked for again with
	// the line breaks between their characters taken out.
	wrapped []redactForm
	w       *strings.Replacer // finds any of wrapped in one pass
}

// redactForm is one form of a secret's value.
type redactForm struct{ s, name string }

// newRedactor builds the redactor for secrets (name → value).
//
// A value (or form) shorter than minAnywhere is redacted only where it
// stands alone, not inside a word: "pw=hunter2;" is redacted, "hunter22"
// is not, and a one-byte value "x" leaves "maximum" alone.
//
// It is best effort: it catches the value and the encodings a command is
// likely to print, not every transformation (reversed, split, partial,
// compressed or encrypted values pass). Besides the value itself it
// covers: base64 (standard and URL alphabets, padded or not) and base32,
// and for each alignment a value can have inside a longer stream (`echo
// $X | base64` encodes a trailing newline too) the part of the encoding
// that depends on the value alone; those and hex also when wrapped into
// lines (LF or CRLF, any width); hex in either case, plain or with a
// space between bytes; URL query and path escaping, with upper- or
// lower-case escapes; JSON string escaping of all of those, also with
// "/" escaped as "\/".
func newRedactor(secrets map[string]string) *redactor {
	var forms, wrapped []redactForm
	seen := map[string]bool{}
	add1 := func(s, name string) {
		if s == "" || seen[s] {
			return
		}
		seen[s] = true
		forms = append(forms, redactForm{s, name})
		if j := strings.ReplaceAll(s, "/", `\/`); j != s && !seen[j] {
			seen[j] = true
			forms = append(forms, redactForm{j, name})
		}
	}
	add := func(s, name string) {
		if s == "" || seen[s] {
			return
		}
		add1(s, name)
		// JSON string escaping, with and without escaping <, > and &.
		for _, html := range []bool{true, false} {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(html)
			if enc.Encode(s) != nil {
				continue
			}
			j := strings.TrimSuffix(b.String(), "\n")
			add1(j[1:len(j)-1], name)
		}
	}
	// addWrapped adds an encoding that may come wrapped into lines.
	addWrapped := func(s, name string) {
		add(s, name)
		if len(s) >= minAnywhere {
			wrapped = append(wrapped, redactForm{s, name})
		}
	}
	names, longestName := map[string]bool{}, 0
	for name, v := range secrets {
		names[name], longestName = true, max(longestName, len(name))
		add(v, name)
		if len(v) < minRedact {
			continue
		}
		for _, esc := range []string{url.QueryEscape(v), url.PathEscape(v)} {
			add(esc, name)
			add(lowerPercent.ReplaceAllStringFunc(esc, strings.ToLower), name)
		}
		h := hex.EncodeToString([]byte(v))
		addWrapped(h, name)
		addWrapped(strings.ToUpper(h), name)
		sp := spacedHex(h)
		add(sp, name)
		add(strings.ToUpper(sp), name)
		// block is the encoding's group: n bytes become whole characters.
		for _, enc := range []struct {
			full, raw func([]byte) string
			block     int
		}{
			{base64.StdEncoding.EncodeToString, base64.RawStdEncoding.EncodeToString, 3},
			{base64.URLEncoding.EncodeToString, base64.RawURLEncoding.EncodeToString, 3},
			{base32.StdEncoding.EncodeToString, base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString, 5},
		} {
			addWrapped(enc.full([]byte(v)), name)
			for k := range enc.block {
				if n := (len(v) - k) / enc.block * enc.block; n > 0 {
					if core := enc.raw([]byte(v[k : k+n])); len(core) >= 2*minRedact {
						addWrapped(core, name)
					}
				}
			}
		}
	}
	if len(forms) == 0 {
		return &redactor{}
	}
	// Longest first, so a form is never left half-replaced by a shorter
	// one that it contains.
	slices.SortFunc(forms, func(a, b redactForm) int { return len(b.s) - len(a.s) })
	slices.SortFunc(wrapped, func(a, b redactForm) int { return len(b.s) - len(a.s) })
	red := &redactor{names: names, longestName: longestName, wrapped: wrapped}
	var args, wargs []string
	for _, f := range forms {
		red.forms = append(red.forms, f.s)
		if len(f.s) >= minAnywhere {
			args = append(args, f.s, "[secret:"+f.name+"]")
			continue
		}
		if red.short == nil {
			red.short = new([256][]redactForm)
		}
		red.short[f.s[0]] = append(red.short[f.s[0]], f)
	}
	if red.short != nil {
		// A marker next to a short form decides it (see whole): the
		// delta writer holds back their beginnings too.
		for name := range names {
			red.forms = append(red.forms, "[secret:"+name+"]")
		}
		slices.SortFunc(red.forms, func(a, b string) int { return len(b) - len(a) })
	}
	if len(args) > 0 {
		red.r = strings.NewReplacer(args...)
	}
	for _, f := range wrapped {
		wargs = append(wargs, f.s, "")
	}
	red.w = strings.NewReplacer(wargs...)
	return red
}

// isWordByte reports a byte that makes a form next to it part of a word:
// an ASCII letter or digit, '_', or a byte of a non-ASCII character.
func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c >= 0x80
}

// whole replaces the short forms in s where they stand alone: neither
// the byte before nor the one after is a word byte or a [secret:NAME]
// marker of the secrets (which stood for a value, part of the word).
// Markers are left as they are, so redacting twice changes nothing.
func (r *redactor) whole(s string) string {
	if r.short == nil {
		return s
	}
	var out strings.Builder
	last := 0
	glued := false // the byte before i is a word byte or ends a marker
	for i := 0; i < len(s); {
		c := s[i]
		if c == '[' {
			if n := r.marker(s[i:]); n > 0 {
				i, glued = i+n, true
				continue
			}
		}
		found := false
		for _, f := range r.short[c] {
			if glued {
				break
			}
			end := i + len(f.s)
			if strings.HasPrefix(s[i:], f.s) && (end == len(s) || !isWordByte(s[end]) && (s[end] != '[' || r.marker(s[end:]) == 0)) {
				out.WriteString(s[last:i])
				out.WriteString("[secret:" + f.name + "]")
				last, i, found = end, end, true
				break
			}
		}
		if !found {
			glued = isWordByte(c)
			i++
		}
	}
	if last == 0 {
		return s
	}
	out.WriteString(s[last:])
	return out.String()
}

// isTimestamp reports an RFC 3339 time, as encoding/json writes a
// time.Time.
func isTimestamp(s string) bool {
	if len(s) < len("2006-01-02T15:04:05Z") || len(s) > len(time.RFC3339Nano) || s[4] != '-' || s[10] != 'T' {
		return false
	}
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

// marker is the length of the [secret:NAME] marker of a secret that s
// begins with, or 0.
func (r *redactor) marker(s string) int {
	const prefix = "[secret:"
	if !strings.HasPrefix(s, prefix) {
		return 0
	}
	name := s[len(prefix):]
	// Bounded: a text of many "[secret:" without a "]" costs no more
	// than the longest name per one.
	j := strings.IndexByte(name[:min(len(name), r.longestName+1)], ']')
	if j < 0 || !r.names[name[:j]] {
		return 0
	}
	return len(prefix) + j + 1
}

// wholeJSON applies whole to the string values of the JSON document b:
// not to its keys (the schema's names), its numbers and literals, nor
// timestamps (an approval's "expires"), which a short value such as "1"
// or "42" would break.
func (r *redactor) wholeJSON(b []byte) []byte {
	if r.short == nil {
		return b
	}
	var out []byte
	last := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(b) {
			break // not JSON: left as it is
		}
		k := j + 1
		for k < len(b) && (b[k] == ' ' || b[k] == '\t' || b[k] == '\n' || b[k] == '\r') {
			k++
		}
		var s string
		if (k == len(b) || b[k] != ':') && json.Unmarshal(b[i:j+1], &s) == nil && !isTimestamp(s) {
			if red := r.whole(s); red != s {
				enc, err := json.Marshal(red)
				if err == nil {
					out = append(append(out, b[last:i]...), enc...)
					last = j + 1
				}
			}
		}
		i = j
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

var lowerPercent = regexp.MustCompile(`%[0-9A-F]{2}`)

// spacedHex writes hex digits h a byte at a time with spaces between.
func spacedHex(h string) string {
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

func (r *redactor) String(s string) string {
	if r == nil || len(r.forms) == 0 {
		return s
	}
	if r.r != nil {
		s = r.unwrap(r.r.Replace(s))
	}
	return r.whole(s)
}

// isEncodingChar reports a character of base64 (both alphabets), base32
// or hex, padding included.
func isEncodingChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_' || c == '='
}

// unwrap redacts the wrapped forms in s across line breaks: it joins
// every line break (LF or CRLF) between two encoding characters, looks
// for the forms in the joined text, and replaces each match's whole
// span in s, line breaks included.
func (r *redactor) unwrap(s string) string {
	if len(r.wrapped) == 0 || !strings.Contains(s, "\n") {
		return s
	}
	joined := make([]byte, 0, len(s))
	pos := make([]int, 0, len(s)) // pos[i]: where joined[i] is in s
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c == '\n' || c == '\r') && i > 0 && isEncodingChar(s[i-1]) {
			k := i
			if c == '\r' && k+1 < len(s) && s[k+1] == '\n' {
				k++
			}
			if s[k] == '\n' && k+1 < len(s) && isEncodingChar(s[k+1]) {
				i = k
				continue
			}
		}
		joined = append(joined, s[i])
		pos = append(pos, i)
	}
	if len(joined) == len(s) {
		return s
	}
	j := string(joined)
	if r.w.Replace(j) == j {
		return s // the common case, found in one pass
	}
	var out strings.Builder
	last, p := 0, 0
	for {
		at, form := -1, redactForm{}
		for _, f := range r.wrapped { // longest first: the first at a position wins
			if k := strings.Index(j[p:], f.s); k >= 0 && (at < 0 || k < at) {
				at, form = k, f
			}
		}
		if at < 0 {
			break
		}
		a, b := p+at, p+at+len(form.s)
		out.WriteString(s[last:pos[a]])
		out.WriteString("[secret:" + form.name + "]")
		last, p = pos[b-1]+1, b
	}
	if last == 0 {
		return s
	}
	out.WriteString(s[last:])
	return out.String()
}

// JSON redacts a JSON document; should the replacement ever break it
// (a value that is also JSON syntax), it returns a placeholder object
// rather than the document.
func (r *redactor) JSON(b []byte) json.RawMessage {
	if r == nil || len(r.forms) == 0 {
		return b
	}
	if r.r != nil {
		out := r.r.Replace(string(b))
		if out != string(b) && !json.Valid([]byte(out)) {
			return json.RawMessage(`{"redacted":true}`)
		}
		b = []byte(out)
	}
	return r.wholeJSON(b)
}

// redactHandler passes log records on with every string redacted.
type redactHandler struct {
	h slog.Handler
	r *redactor
}

func (h redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		var as []any
		for _, g := range v.Group() {
			as = append(as, h.attr(g))
		}
		return slog.Group(a.Key, as...)
	case slog.KindAny:
		// Errors and other values are logged by their text.
		return slog.String(a.Key, h.r.String(fmt.Sprint(v.Any())))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.attr(a)
	}
	return redactHandler{h.h.WithAttrs(red), h.r}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h.h.WithGroup(name), h.r}
}

// SecretScanner finds secret values in a text in every form the
// redaction of tool output recognises (see the forms newRedactor
// covers), for callers that must refuse such a text rather than show it
// redacted: the push gateway refuses a patch that holds one.
type SecretScanner struct {
	r     *redactor
	names []string
}

// NewSecretScanner returns the scanner of secrets (name → value); values
// shorter than 4 bytes are not looked for (a patch is refused for a
// secret's value, and "x" is no secret worth refusing every patch with
// an x for), shorter than 8 only where they stand alone.
func NewSecretScanner(secrets map[string]string) *SecretScanner {
	looked := maps.Clone(secrets)
	maps.DeleteFunc(looked, func(_, v string) bool { return len(v) < minRedact })
	return &SecretScanner{r: newRedactor(looked), names: slices.Sorted(maps.Keys(looked))}
}

// Find reports the name of a secret whose value occurs in s, and whether
// one does.
func (sc *SecretScanner) Find(s string) (string, bool) {
	red := sc.r.String(s)
	if red == s {
		return "", false
	}
	for _, n := range sc.names {
		if m := "[secret:" + n + "]"; strings.Count(red, m) > strings.Count(s, m) {
			return n, true
		}
	}
	return "", true // found, though not told apart (a name inside another's value)
}

// Redact returns s with each value found replaced by [secret:NAME].
func (sc *SecretScanner) Redact(s string) string { return sc.r.String(s) }
