package retrieval

import (
	"math/bits"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A file's trigrams are kept as a Bloom filter (one hash): the
// prefilter of regular expressions and phrases. A trigram is three
// consecutive bytes of the file, ASCII letters folded to lower case,
// none of them NUL or outside ASCII. The filter has gramsBits bits per
// byte of the file, rounded up to a power of two: code has a distinct
// trigram every 5 to 8 bytes, so 2 to 8 bits per trigram, and a trigram
// the file lacks passes 12-40 % of the time, a literal of five bytes
// (three trigrams) 0.2-6 %. Stored, that is a sixteenth to an eighth of
// the file (5 MB for the Go tree's 54 MB): far cheaper at ingestion than
// an inverted index of trigrams (FTS5 would index every one; counting
// the distinct ones first to size the filter took as long again), and a
// search reads each file's filter once.
const (
	gramsBits    = 4 // per 8 bytes
	gramsMinBits = 64
)

// fileGrams is the Bloom filter of the trigrams of texts (a file, or
// its chunks: overlapping text counts once).
func fileGrams(texts ...string) []byte {
	size := 0
	for _, s := range texts {
		size += len(s)
	}
	// Sized by the text (code has a distinct trigram every 5 to 8
	// bytes): no pass to count them first.
	m := max(gramsMinBits, 1<<bits.Len(uint(size*gramsBits/8)))
	filter := make([]byte, m/8)
	shift := 32 - bits.TrailingZeros(uint(m))
	for _, s := range texts {
		var t uint32 // the last bytes, 7 bits each
		n := 0       // how many of them are ASCII in a row
		for i := 0; i < len(s); i++ {
			c := gramFold[s[i]]
			if c == 0 {
				n = 0
				continue
			}
			t = (t<<7 | uint32(c)) & (1<<21 - 1)
			if n++; n >= 3 {
				h := gramHash(t, shift)
				filter[h/8] |= 1 << (h % 8)
			}
		}
	}
	return filter
}

// gramFold is a byte as trigrams hold it: ASCII lower-cased, 0 for a
// byte outside ASCII (NUL is in no indexed file).
var gramFold = func() (t [256]byte) {
	for c := 1; c < utf8.RuneSelf; c++ {
		t[c] = byte(c)
		if 'A' <= c && c <= 'Z' {
			t[c] += 'a' - 'A'
		}
	}
	return t
}()

// gramHash is a trigram's bit in a filter of 1<<(32-shift) bits.
func gramHash(t uint32, shift int) uint32 {
	return (t * 0x9E3779B1) >> shift
}

// gramOf is the trigram of s[:3] (ASCII, folded), false if a byte is
// NUL or not ASCII.
func gramOf(s string) (uint32, bool) {
	var t uint32
	for i := 0; i < 3; i++ {
		c := gramFold[s[i]]
		if c == 0 {
			return 0, false
		}
		t = t<<7 | uint32(c)
	}
	return t, true
}

// gramQuery is what a file's trigrams must satisfy for a pattern to
// match in it: every trigram of all, and in each of anyOf one of the
// alternatives. A zero gramQuery is true of every file.
type gramQuery struct {
	all   []uint32
	anyOf [][]gramQuery
	// lits are ASCII strings (lower case) every match holds, ASCII case
	// aside: a cheap test of a text before the regular expression runs.
	lits []string
}

func (q gramQuery) trivial() bool { return len(q.all) == 0 && len(q.anyOf) == 0 }

// mayMatch reports whether a file with the filter may satisfy q.
func (q gramQuery) mayMatch(filter []byte) bool {
	if len(filter) == 0 {
		return q.trivial()
	}
	m := len(filter) * 8
	if m&(m-1) != 0 { // not a filter we wrote
		return true
	}
	shift := 32 - bits.TrailingZeros(uint(m))
	for _, t := range q.all {
		if h := gramHash(t, shift); filter[h/8]&(1<<(h%8)) == 0 {
			return false
		}
	}
	for _, alts := range q.anyOf {
		ok := false
		for _, a := range alts {
			if a.mayMatch(filter) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// and is q with r's conditions added.
func (q gramQuery) and(r gramQuery) gramQuery {
	q.all = append(q.all[:len(q.all):len(q.all)], r.all...)
	q.anyOf = append(q.anyOf[:len(q.anyOf):len(q.anyOf)], r.anyOf...)
	q.lits = append(q.lits[:len(q.lits):len(q.lits)], r.lits...)
	return q
}

// or is a condition true when one of qs is (true when one is trivial).
func or(qs []gramQuery) gramQuery {
	for _, q := range qs {
		if q.trivial() {
			return gramQuery{}
		}
	}
	if len(qs) == 1 {
		return qs[0]
	}
	alts := make([]gramQuery, len(qs))
	for i, q := range qs {
		alts[i] = gramQuery{all: q.all, anyOf: q.anyOf} // no literal is sure in an alternation
	}
	return gramQuery{anyOf: [][]gramQuery{alts}}
}

// hasLits reports whether text holds every literal of q (lower is text
// with ASCII letters lower-cased).
func (q gramQuery) hasLits(lower string) bool {
	for _, l := range q.lits {
		if !strings.Contains(lower, l) {
			return false
		}
	}
	return true
}

// asciiLower is s with ASCII letters lower-cased, in buf.
func asciiLower(buf []byte, s string) []byte {
	return appendLower(buf[:0], s)
}

// literalGrams is the condition for a literal string to be in a file.
func literalGrams(s string) gramQuery {
	var q gramQuery
	if len(s) >= 3 && isASCII(s) {
		q.lits = []string{s}
	}
	for i := 0; i+3 <= len(s) && len(q.all) < maxLiteralGrams; i++ {
		if t, ok := gramOf(s[i:]); ok {
			q.all = append(q.all, t)
		}
	}
	return q
}

// Bounds of the analysis of a regular expression: sets of exact strings
// and the trigrams of one literal.
const (
	maxExactSet     = 16
	maxExactLen     = 64
	maxLiteralGrams = 32
)

// regexGrams is a condition on trigrams that every file in which re
// matches satisfies (after the manner of Russ Cox's "Regular Expression
// Matching with a Trigram Index", simplified: exact sets of small
// alternations and classes, concatenations joined, repetitions of at
// least one kept, anything else true).
func regexGrams(re *syntax.Regexp) gramQuery {
	exact, q := analyze(re, 0)
	if exact != nil {
		q = q.and(exactGrams(exact))
	}
	return q
}

// exactGrams is the condition for one of the strings to be in a file.
func exactGrams(set []string) gramQuery {
	qs := make([]gramQuery, len(set))
	for i, s := range set {
		qs[i] = literalGrams(s)
	}
	return or(qs)
}

// analyze returns, for re, either the set of exact strings it matches
// (exact != nil; folded to ASCII lower case) or a condition on trigrams
// (q), bounded by depth.
func analyze(re *syntax.Regexp, depth int) (exact []string, q gramQuery) {
	if depth > 100 {
		return nil, gramQuery{}
	}
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return []string{""}, gramQuery{}
	case syntax.OpLiteral:
		s := strings.ToLower(string(re.Rune))
		if re.Flags&syntax.FoldCase != 0 && strings.ContainsAny(s, "ks") {
			// k and s also match non-ASCII letters (U+212A, U+017F), whose
			// bytes are in no trigram: only the parts between them are sure.
			var q gramQuery
			for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == 'k' || r == 's' }) {
				q = q.and(literalGrams(part))
			}
			return nil, q
		}
		if len(s) > maxExactLen {
			return nil, literalGrams(s)
		}
		return []string{s}, gramQuery{}
	case syntax.OpCharClass:
		var set []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if hi-lo > maxExactSet {
				return nil, gramQuery{}
			}
			for r := lo; r <= hi; r++ {
				s := strings.ToLower(string(r))
				if !containsString(set, s) {
					set = append(set, s)
				}
				if len(set) > maxExactSet {
					return nil, gramQuery{}
				}
			}
		}
		return set, gramQuery{}
	case syntax.OpCapture:
		return analyze(re.Sub[0], depth+1)
	case syntax.OpPlus:
		e, q := analyze(re.Sub[0], depth+1)
		if e != nil {
			q = q.and(exactGrams(e))
		}
		return nil, q
	case syntax.OpRepeat:
		if re.Min == 0 {
			return nil, gramQuery{}
		}
		e, q := analyze(re.Sub[0], depth+1)
		if e != nil {
			q = q.and(exactGrams(e))
		}
		return nil, q
	case syntax.OpQuest:
		e, _ := analyze(re.Sub[0], depth+1)
		if e != nil && len(e) < maxExactSet {
			return append([]string{""}, e...), gramQuery{}
		}
		return nil, gramQuery{}
	case syntax.OpAlternate:
		var set []string
		qs := make([]gramQuery, 0, len(re.Sub))
		allExact := true
		for _, sub := range re.Sub {
			e, q := analyze(sub, depth+1)
			if e != nil {
				q = q.and(exactGrams(e))
			} else {
				allExact = false
			}
			if allExact {
				for _, s := range e {
					if !containsString(set, s) {
						set = append(set, s)
					}
				}
				allExact = len(set) <= maxExactSet
			}
			qs = append(qs, q)
		}
		if allExact {
			return set, gramQuery{}
		}
		return nil, or(qs)
	case syntax.OpConcat:
		cur := []string{""} // the exact strings of the run of exact parts so far
		var q gramQuery
		flush := func() {
			if cur != nil {
				q = q.and(exactGrams(cur))
			}
		}
		for _, sub := range re.Sub {
			e, sq := analyze(sub, depth+1)
			if e == nil {
				flush()
				cur = nil
				q = q.and(sq)
				continue
			}
			if cur == nil {
				cur = e
				continue
			}
			next := cross(cur, e)
			if next == nil { // too many: keep what we have and start again
				flush()
				cur = e
				continue
			}
			cur = next
		}
		if cur != nil && q.trivial() {
			return cur, gramQuery{}
		}
		flush()
		return nil, q
	}
	// Star, any character, and the rest: anything.
	return nil, gramQuery{}
}

// cross is every string of a followed by one of b, nil when too many
// or too long.
func cross(a, b []string) []string {
	if len(a)*len(b) > maxExactSet {
		return nil
	}
	out := make([]string, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			if len(x)+len(y) > maxExactLen {
				return nil
			}
			out = append(out, x+y)
		}
	}
	return out
}

func containsString(set []string, s string) bool {
	for _, x := range set {
		if x == s {
			return true
		}
	}
	return false
}

// hasUpper reports whether re matches a literal upper-case letter (the
// pattern is then case-sensitive: smart case).
func hasUpper(re *syntax.Regexp) bool {
	if re.Op == syntax.OpLiteral && re.Flags&syntax.FoldCase == 0 {
		for _, r := range re.Rune {
			if unicode.IsUpper(r) {
				return true
			}
		}
	}
	for _, sub := range re.Sub {
		if hasUpper(sub) {
			return true
		}
	}
	return false
}
