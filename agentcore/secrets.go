package agentcore

import (
	"bytes"
	"context"
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
)

// secretRef matches a secret placeholder in a shell command.
var secretRef = regexp.MustCompile(`\{\{secret:([A-Za-z0-9_]+)\}\}`)

// secretEnvPrefix names the environment variables that carry secret
// values into a command.
const secretEnvPrefix = "CODUMENTOR_SECRET_"

// minRedact is the shortest secret value (and encoded form) that is
// redacted: shorter ones would blank out ordinary output.
const minRedact = 4

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
	r     *strings.Replacer // nil: nothing to redact
	forms []string          // the texts r replaces, longest first
}

// newRedactor builds the redactor for secrets (name → value).
//
// Besides the value itself it covers: base64 (standard and URL alphabets,
// padded or not), and for each of the three alignments a value can have
// inside a longer base64 stream (`echo $X | base64` encodes a trailing
// newline too) the part of the encoding that depends on the value alone;
// hex (both cases); URL query and path escaping; JSON string escaping of
// all of those. A value split across base64 line wrapping is not caught.
func newRedactor(secrets map[string]string) *redactor {
	type form struct{ s, name string }
	var forms []form
	seen := map[string]bool{}
	add := func(s, name string) {
		if len(s) < minRedact || seen[s] {
			return
		}
		seen[s] = true
		forms = append(forms, form{s, name})
		// JSON string escaping, with and without escaping <, > and &.
		for _, html := range []bool{true, false} {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(html)
			if enc.Encode(s) != nil {
				continue
			}
			j := strings.TrimSuffix(b.String(), "\n")
			if j = j[1 : len(j)-1]; j != s && !seen[j] {
				seen[j] = true
				forms = append(forms, form{j, name})
			}
		}
	}
	for name, v := range secrets {
		if len(v) < minRedact {
			continue
		}
		add(v, name)
		add(url.QueryEscape(v), name)
		add(url.PathEscape(v), name)
		add(hex.EncodeToString([]byte(v)), name)
		add(strings.ToUpper(hex.EncodeToString([]byte(v))), name)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			add(enc.EncodeToString([]byte(v)), name)
			raw := enc.WithPadding(base64.NoPadding)
			for k := range 3 {
				if n := (len(v) - k) / 3 * 3; n > 0 {
					core := raw.EncodeToString([]byte(v[k : k+n]))
					if len(core) >= 2*minRedact {
						add(core, name)
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
	slices.SortFunc(forms, func(a, b form) int { return len(b.s) - len(a.s) })
	args := make([]string, 0, 2*len(forms))
	texts := make([]string, 0, len(forms))
	for _, f := range forms {
		args = append(args, f.s, "[secret:"+f.name+"]")
		texts = append(texts, f.s)
	}
	return &redactor{r: strings.NewReplacer(args...), forms: texts}
}

func (r *redactor) String(s string) string {
	if r == nil || r.r == nil {
		return s
	}
	return r.r.Replace(s)
}

// JSON redacts a JSON document; should the replacement ever break it
// (a value that is also JSON syntax), it returns a placeholder object
// rather than the document.
func (r *redactor) JSON(b []byte) json.RawMessage {
	if r == nil || r.r == nil {
		return b
	}
	out := r.r.Replace(string(b))
	if out != string(b) && !json.Valid([]byte(out)) {
		return json.RawMessage(`{"redacted":true}`)
	}
	return json.RawMessage(out)
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
