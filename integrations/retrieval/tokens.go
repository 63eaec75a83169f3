package retrieval

import (
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// maxToken drops longer words (hashes, base64, minified names): they are
// noise in an index and cost space.
const maxToken = 64

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
// an exact identifier then also matches as one rare word; and nothing
// for an identifier of one unindexed part. parts is scratch space,
// returned for reuse.
func identTerms(parts []string, id string, f func(string)) []string {
	if len(id) > maxToken {
		return parts
	}
	parts = splitIdent(parts[:0], id)
	if len(parts) == 1 && unindexed(parts[0]) {
		return parts
	}
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

// terms is the text the full-text index holds for s: the parts of its
// words (runs of letters, digits and '_'), space separated, in order (so
// a phrase query of parts finds the identifier), without the words that
// stand alone and are unindexed. One pass, byte by byte for ASCII (most
// of code): no string per word or part.
//
// What terms returns for a text must not change without termsVersion:
// a contentless index removes a chunk by the terms it was indexed with.
func terms(s string) string {
	b := make([]byte, 0, len(s)+len(s)/4)
	var cuts []int // part boundaries in an identifier, reused
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf && !asciiWord[c] {
			i++
			continue
		}
		start, ascii := i, true
		for i < len(s) {
			c := s[i]
			if c < utf8.RuneSelf {
				if !asciiWord[c] {
					break
				}
				i++
				continue
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				break
			}
			ascii = false
			i += size
		}
		if i == start { // a rune that is not a letter or digit
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			continue
		}
		id := s[start:i]
		if len(id) > maxToken {
			continue
		}
		if !ascii {
			identTerms(nil, id, func(w string) {
				b = appendSep(b)
				b = append(b, w...)
			})
			continue
		}
		cuts = asciiCuts(cuts[:0], id)
		if len(cuts) == 2 && unindexedASCII(id[cuts[0]:cuts[1]]) {
			continue
		}
		if len(cuts) > 2 { // several parts: the joined form first
			b = appendSep(b)
			for j := 0; j < len(cuts); j += 2 {
				b = appendLower(b, id[cuts[j]:cuts[j+1]])
			}
		}
		for j := 0; j < len(cuts); j += 2 {
			b = appendSep(b)
			b = appendLower(b, id[cuts[j]:cuts[j+1]])
		}
	}
	// Not copied again: b is not used after this (terms runs for every
	// chunk of an ingestion, twice the text's size in garbage otherwise).
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// appendSep appends the space between two terms, when b has one.
func appendSep(b []byte) []byte {
	if len(b) > 0 {
		b = append(b, ' ')
	}
	return b
}

// asciiCuts appends to dst the start and end of each part of the ASCII
// identifier id, as splitIdent splits it.
func asciiCuts(dst []int, id string) []int {
	upper := func(c byte) bool { return 'A' <= c && c <= 'Z' }
	lower := func(c byte) bool { return 'a' <= c && c <= 'z' }
	start := -1 // of the current part
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c == '_' {
			if start >= 0 {
				dst = append(dst, start, i)
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		if !upper(c) {
			continue
		}
		prev := id[i-1]
		lowerToUpper := lower(prev) || '0' <= prev && prev <= '9'
		acronymEnd := upper(prev) && i+1 < len(id) && lower(id[i+1])
		if lowerToUpper || acronymEnd {
			dst = append(dst, start, i)
			start = i
		}
	}
	if start >= 0 {
		dst = append(dst, start, len(id))
	}
	return dst
}

// appendLower appends ASCII s lower-cased.
func appendLower(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// maxQueryWords bounds the words of a query that are searched (each is
// a term of the FTS5 query and a look-up of its frequency).
const maxQueryWords = 32

// queryWord is one word of a query: the parts of one identifier, which
// must occur together, in order.
type queryWord []string

// parseQuery splits a user's query into words, dropping the unindexed
// ones and repeats. Nothing of the query's syntax survives: only the
// parts, which are letters and digits.
func parseQuery(q string) []queryWord {
	var kept []queryWord
	seen := map[string]bool{}
	for _, field := range strings.FieldsFunc(q, func(r rune) bool { return !isWordRune(r) }) {
		var w queryWord
		identParts(field, func(p string) { w = append(w, p) })
		key := strings.Join(w, " ")
		if len(w) == 0 || seen[key] || len(w) == 1 && unindexed(w[0]) {
			continue
		}
		seen[key] = true
		if len(kept) == maxQueryWords {
			break
		}
		kept = append(kept, w)
	}
	return kept
}

// unindexed reports whether a word (lower-cased) that stands alone, an
// identifier of one part, is left out of the index and of queries: one
// character ("i", "x", "t") or a common English word ("the", "is"). They
// are a fifth of the words of code, each in nearly every chunk: they
// hardly rank anything, and were a fifth of the terms FTS5 indexed. As
// parts of longer identifiers ("isValid") they are indexed: phrases
// need them.
func unindexed(w string) bool {
	return utf8.RuneCountInString(w) == 1 || stopWord(w)
}

// unindexedASCII is unindexed for an ASCII word in any case, without
// allocating.
func unindexedASCII(w string) bool {
	if len(w) == 1 {
		return true
	}
	var lower [5]byte // the longest stop word's length
	if len(w) > len(lower) {
		return false
	}
	return stopWord(string(appendLower(lower[:0], w)))
}

// stopWord reports whether w is a common English word. A switch: a map
// look-up (hashing) cost 3 % of an ingestion, for every short word.
func stopWord(w string) bool {
	switch w {
	case "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how", "i", "in",
		"into", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "what", "when", "where",
		"which", "who", "why", "will", "with":
		return true
	}
	return false
}

// isWordRune reports whether r is part of a query's words: a letter, a
// digit or an underscore.
func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }
