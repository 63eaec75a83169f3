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
	start := -1
	for i, r := range s {
		word := r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
		if word && start < 0 {
			start = i
		}
		if !word && start >= 0 {
			identTerms(s[start:i], f)
			start = -1
		}
	}
	if start >= 0 {
		identTerms(s[start:], f)
	}
}

// identParts splits one identifier at underscores and case changes.
func identParts(id string, f func(string)) {
	if len(id) > maxToken {
		return
	}
	splitIdent(id, f)
}

// identTerms is identParts with, first, the whole identifier lower-cased
// without underscores when it has more than one part ("parseconfig"):
// an exact identifier then also matches as one rare word.
func identTerms(id string, f func(string)) {
	if len(id) > maxToken {
		return
	}
	var parts []string
	splitIdent(id, func(p string) { parts = append(parts, p) })
	if len(parts) > 1 {
		f(strings.Join(parts, ""))
	}
	for _, p := range parts {
		f(p)
	}
}

func splitIdent(id string, f func(string)) {
	for _, seg := range strings.Split(id, "_") {
		if seg == "" {
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
					f(strings.ToLower(seg[start:i]))
					start = i
				}
			}
			prev = r
		}
		f(strings.ToLower(seg[start:]))
	}
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
