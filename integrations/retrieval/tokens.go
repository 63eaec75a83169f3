package retrieval

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxToken drops longer words (hashes, base64, minified names): they are
// noise in an index and cost space.
const maxToken = 64

// words calls f with the lower-cased parts of each identifier or word of
// s: "parseConfig", "parse_config" and "parse config" all give "parse",
// "config" (the first two also "parseconfig" before them, see
// identTerms); "HTTPServer" gives "http", "server"; digits stay with the
// letters before them ("utf8", "sha256").
func words(s string, f func(string)) {
	var parts []string // reused across identifiers
	start := -1
	for i := 0; i < len(s); {
		c := s[i]
		var word bool
		size := 1
		if c < utf8.RuneSelf {
			word = asciiWord[c]
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			word = unicode.IsLetter(r) || unicode.IsDigit(r)
		}
		if word && start < 0 {
			start = i
		}
		if !word && start >= 0 {
			parts = identTerms(parts, s[start:i], f)
			start = -1
		}
		i += size
	}
	if start >= 0 {
		identTerms(parts, s[start:], f)
	}
}

// asciiWord marks the ASCII bytes of identifiers: letters, digits, '_'.
var asciiWord = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	return t
}()

// identParts splits one identifier at underscores and case changes.
func identParts(id string, f func(string)) {
	if len(id) > maxToken {
		return
	}
	for _, p := range splitIdent(nil, id) {
		f(p)
	}
}

// identTerms is identParts with, first, the whole identifier lower-cased
// without underscores when it has more than one part ("parseconfig"):
// an exact identifier then also matches as one rare word. parts is
// scratch space, returned for reuse.
func identTerms(parts []string, id string, f func(string)) []string {
	if len(id) > maxToken {
		return parts
	}
	parts = splitIdent(parts[:0], id)
	if len(parts) > 1 {
		f(strings.Join(parts, ""))
	}
	for _, p := range parts {
		f(p)
	}
	return parts
}

// splitIdent appends id's lower-cased parts to dst.
func splitIdent(dst []string, id string) []string {
	for rest := id; rest != ""; {
		var seg string
		seg, rest, _ = strings.Cut(rest, "_")
		if seg == "" {
			continue
		}
		if isASCII(seg) {
			dst = splitASCII(dst, seg)
			continue
		}
		start := 0
		prev := rune(0)
		for i, r := range seg {
			if i > 0 {
				next, _ := utf8.DecodeRuneInString(seg[i+utf8.RuneLen(r):])
				lowerToUpper := unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev))
				// "HTTPServer": the S starts a word before the lower-case e.
				acronymEnd := unicode.IsUpper(r) && unicode.IsUpper(prev) && unicode.IsLower(next)
				if lowerToUpper || acronymEnd {
					dst = append(dst, strings.ToLower(seg[start:i]))
					start = i
				}
			}
			prev = r
		}
		dst = append(dst, strings.ToLower(seg[start:]))
	}
	return dst
}

// splitASCII is splitIdent's loop for an ASCII segment, byte by byte
// (the common case: most code is ASCII).
func splitASCII(dst []string, seg string) []string {
	upper := func(c byte) bool { return 'A' <= c && c <= 'Z' }
	lower := func(c byte) bool { return 'a' <= c && c <= 'z' }
	start := 0
	for i := 1; i < len(seg); i++ {
		r, prev := seg[i], seg[i-1]
		if !upper(r) {
			continue
		}
		lowerToUpper := lower(prev) || '0' <= prev && prev <= '9'
		acronymEnd := upper(prev) && i+1 < len(seg) && lower(seg[i+1])
		if lowerToUpper || acronymEnd {
			dst = append(dst, strings.ToLower(seg[start:i]))
			start = i
		}
	}
	return append(dst, strings.ToLower(seg[start:]))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// terms is the text the full-text index holds for s: its words'
// parts, space separated, in order (so a phrase query of parts finds the
// identifier).
func terms(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	words(s, func(w string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	})
	return b.String()
}

// maxQueryWords bounds the words of a query that are searched (each is
// a term of the FTS5 query and a look-up of its frequency).
const maxQueryWords = 32

// queryWord is one word of a query: the parts of one identifier, which
// must occur together, in order.
type queryWord []string

// parseQuery splits a user's query into words, dropping common English
// words (unless nothing else is left) and repeats. Nothing of the query's
// syntax survives: only the parts, which are letters and digits.
func parseQuery(q string) []queryWord {
	var all, kept []queryWord
	seen := map[string]bool{}
	for _, field := range strings.FieldsFunc(q, func(r rune) bool {
		return !(r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r))
	}) {
		var w queryWord
		identParts(field, func(p string) { w = append(w, p) })
		key := strings.Join(w, " ")
		if len(w) == 0 || seen[key] {
			continue
		}
		seen[key] = true
		if len(all) == maxQueryWords {
			break
		}
		all = append(all, w)
		if len(w) > 1 || !stopWords[w[0]] {
			kept = append(kept, w)
		}
	}
	if len(kept) == 0 {
		return all
	}
	return kept
}

// stopWords are left out of queries: they match nearly every chunk.
var stopWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an and are as at be by can do does for from how i in into is it its
		of on or that the this to what when where which who why will with`) {
		stopWords[w] = true
	}
}
