package retrieval

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/codumentor/codumentor/integrations/git"
)

// The query language (GET /api/v1/search, search_code), parsed here and
// nowhere else: backends get only words (parseQuery's), so nothing a
// person or a model types is ever FTS5 or SQL syntax. Terms are
// separated by spaces:
//
//	word              ranked by BM25 as before (identifiers split as indexed)
//	"exact phrase"    the text, verbatim (\" and \\ escape)
//	/regexp/          an RE2 regular expression (\/ is a slash)
//	sym:name          files that define name (function, method, type, class…)
//	path:dir/file     files whose path contains it
//	lang:go           files of that language
//	repo:name         repositories whose ID contains it
//	branch:name       that branch of each repository (default: each one's
//	                  default branch); the Searcher resolves it to index keys
//	-term             excludes what term matches (words, phrases, regexps,
//	                  path:, lang:, repo:, branch:)
//
// Phrases, regular expressions and path: are case-insensitive unless
// they contain an upper-case letter. A term with another prefix
// ("std::vector", "http://") is words.

// SyntaxError is a query the language cannot read, with where: it wraps
// ErrBadQuery (errors.Is).
type SyntaxError struct {
	Offset int // byte offset in the query of the term at fault
	Column int // its column, 1-based, in characters
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%v: column %d: %s", ErrBadQuery, e.Column, e.Msg)
}

// Is makes a SyntaxError an ErrBadQuery.
func (e *SyntaxError) Is(target error) bool { return target == ErrBadQuery }

// Bounds of one query's terms.
const (
	maxQueryTerms   = 32
	maxQueryRegexps = 4
)

// parsedQuery is a query read by the language.
type parsedQuery struct {
	words    []string // plain words, ranked
	phrases  []*pattern
	regexps  []*pattern
	syms     []string
	paths    []string
	langs    []string
	repos    []string
	notWords []queryWord
	not      []*pattern // excluded phrases and regexps
	notPaths []string
	notLangs []string
	notRepos []string
	// branches and notBranches choose the repositories' branches
	// searched: the Searcher turns them into index keys (BranchKey)
	// before the index sees the query, which then ignores them.
	branches    []string
	notBranches []string
}

// pattern is a phrase or regular expression, compiled, with its
// trigram prefilter.
type pattern struct {
	src   string
	re    *regexp.Regexp
	grams gramQuery
}

// plain reports whether q is words only: today's ranking, unchanged.
func (q *parsedQuery) plain() bool {
	return len(q.phrases) == 0 && len(q.regexps) == 0 && len(q.syms) == 0 && len(q.paths) == 0 &&
		len(q.langs) == 0 && len(q.repos) == 0 && len(q.notWords) == 0 && len(q.not) == 0 &&
		len(q.notPaths) == 0 && len(q.notLangs) == 0 && len(q.notRepos) == 0 &&
		len(q.branches) == 0 && len(q.notBranches) == 0
}

// rankWords are the words a backend ranks by: the plain words and the
// phrases' (a chunk with a phrase but none of the other words is found
// too). None without plain words: a query of phrases is answered from
// the files that hold them (finding their chunks among all those with
// their common words was 5× slower).
func (q *parsedQuery) rankWords() string {
	if len(q.words) == 0 {
		return ""
	}
	ws := slices.Clone(q.words)
	for _, p := range q.phrases {
		ws = append(ws, p.src)
	}
	return strings.Join(ws, " ")
}

// patterns are the phrases and regular expressions a chunk must match.
func (q *parsedQuery) patterns() []*pattern {
	return append(slices.Clone(q.phrases), q.regexps...)
}

// queryFields are the prefixes of the language.
var queryFields = map[string]bool{"sym": true, "path": true, "file": true, "lang": true, "repo": true, "branch": true}

// parseQueryLanguage reads a query. Its errors are *SyntaxError.
func parseQueryLanguage(text string) (*parsedQuery, error) {
	p := &queryParser{s: text}
	if err := p.check(); err != nil {
		return nil, err
	}
	q := &parsedQuery{}
	terms := 0
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			break
		}
		if terms++; terms > maxQueryTerms {
			return nil, p.errAt(p.i, fmt.Sprintf("more than %d terms", maxQueryTerms))
		}
		if err := p.term(q); err != nil {
			return nil, err
		}
	}
	if len(q.words) == 0 && len(q.phrases) == 0 && len(q.regexps) == 0 && len(q.syms) == 0 &&
		len(q.paths) == 0 && len(q.langs) == 0 && len(q.repos) == 0 {
		switch {
		case len(q.branches) > 0 || len(q.notBranches) > 0:
			return nil, p.errAt(0, "branch: only chooses where to search: add a word, phrase, regular expression or filter to search for")
		case !q.plain():
			return nil, p.errAt(0, "only exclusions: add a word, phrase, regular expression or filter to search for")
		}
	}
	return q, nil
}

type queryParser struct {
	s string
	i int
}

func (p *queryParser) errAt(off int, msg string) *SyntaxError {
	return &SyntaxError{Offset: off, Column: utf8.RuneCountInString(p.s[:off]) + 1, Msg: msg}
}

// check refuses what no term may hold: invalid UTF-8 and control
// characters other than white space.
func (p *queryParser) check() error {
	for i, r := range p.s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(p.s[i:], "\uFFFD"):
			return p.errAt(i, "the query is not valid UTF-8")
		case r == '\t' || r == '\n' || r == '\r':
		case unicode.IsControl(r):
			return p.errAt(i, fmt.Sprintf("control character %U in the query", r))
		}
	}
	return nil
}

func (p *queryParser) skipSpace() {
	for p.i < len(p.s) {
		r, n := utf8.DecodeRuneInString(p.s[p.i:])
		if !unicode.IsSpace(r) {
			return
		}
		p.i += n
	}
}

// atEnd reports whether the term ends at i (space or the end).
func (p *queryParser) atEnd(i int) bool {
	if i >= len(p.s) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(p.s[i:])
	return unicode.IsSpace(r)
}

// regexpAhead reports whether the term at p.i, which starts with a
// slash, is a regular expression: it closes with another, followed by a
// space or the end. Otherwise (`/usr/bin/env`, `//go:embed`, `/etc`) it
// is a word.
func (p *queryParser) regexpAhead() bool {
	for i := p.i + 1; i < len(p.s); i++ {
		switch p.s[i] {
		case '\\':
			i++
		case '/':
			return p.atEnd(i + 1)
		}
	}
	return false
}

// punctAt reports whether punctuation other than a quote is at i.
func (p *queryParser) punctAt(i int) bool {
	r, _ := utf8.DecodeRuneInString(p.s[i:])
	return r != '"' && unicode.IsPunct(r)
}

// word reads up to the next space.
func (p *queryParser) word() string {
	start := p.i
	for !p.atEnd(p.i) {
		_, n := utf8.DecodeRuneInString(p.s[p.i:])
		p.i += n
	}
	return p.s[start:p.i]
}

// delimited reads a term between delimiters d (p.i at the opening one),
// with \d and \\ escapes for phrases (unescape) and \d for regexps.
func (p *queryParser) delimited(d byte, unescape bool) (string, error) {
	open := p.i
	var b strings.Builder
	for i := open + 1; i < len(p.s); i++ {
		c := p.s[i]
		switch {
		case c == '\\' && i+1 < len(p.s) && (p.s[i+1] == d || unescape && p.s[i+1] == '\\'):
			b.WriteByte(p.s[i+1])
			i++
		case c == d:
			// Prose quotes phrases before punctuation: `"go1.20", …`.
			if !p.atEnd(i+1) && !(d == '"' && p.punctAt(i+1)) {
				return "", p.errAt(i+1, fmt.Sprintf("a space must follow the closing %c", d))
			}
			p.i = i + 1
			return b.String(), nil
		default:
			b.WriteByte(c)
		}
	}
	what := "phrase"
	if d == '/' {
		what = "regular expression"
	}
	return "", p.errAt(open, fmt.Sprintf("unterminated %s: no closing %c", what, d))
}

func (p *queryParser) term(q *parsedQuery) error {
	start := p.i
	neg := false
	if p.s[p.i] == '-' && !p.atEnd(p.i+1) {
		neg = true
		p.i++
	}
	switch p.s[p.i] {
	case '"':
		s, err := p.delimited('"', true)
		if err != nil {
			return err
		}
		if s == "" {
			return p.errAt(start, "empty phrase")
		}
		pat, err := compilePattern(regexp.QuoteMeta(s), s)
		if err != nil {
			return p.errAt(start, err.Error())
		}
		if neg {
			q.not = append(q.not, pat)
		} else {
			q.phrases = append(q.phrases, pat)
		}
		return nil
	case '/':
		if !p.regexpAhead() {
			break // a path or a comment marker: a word
		}
		s, err := p.delimited('/', false)
		if err != nil {
			return err
		}
		if s == "" {
			return p.errAt(start, "empty regular expression")
		}
		if len(q.regexps)+len(q.not) >= maxQueryRegexps {
			return p.errAt(start, fmt.Sprintf("more than %d regular expressions", maxQueryRegexps))
		}
		pat, err := compilePattern(s, s)
		if err != nil {
			return p.errAt(start, err.Error())
		}
		if neg {
			q.not = append(q.not, pat)
		} else {
			q.regexps = append(q.regexps, pat)
		}
		return nil
	}
	wordStart := p.i
	w := p.word()
	field, value, ok := strings.Cut(w, ":")
	if !ok || !queryFields[field] {
		if neg {
			ws := parseQuery(w)
			if len(ws) == 0 && !strings.ContainsFunc(w, isWordRune) {
				q.words = append(q.words, p.s[start:p.i]) // prose: "a --> b"
				return nil
			}
			if len(ws) == 0 {
				return p.errAt(start, fmt.Sprintf("nothing to exclude in %q (single characters and common words are not indexed)", w))
			}
			q.notWords = append(q.notWords, ws...)
			return nil
		}
		q.words = append(q.words, w)
		return nil
	}
	valueAt := wordStart + len(field) + 1
	if strings.HasPrefix(value, `"`) { // field:"a value with spaces"
		p.i = valueAt
		s, err := p.delimited('"', true)
		if err != nil {
			return err
		}
		value = s
	}
	if value == "" {
		return p.errAt(start, field+": needs a value, e.g. "+field+":"+fieldExample[field])
	}
	switch field {
	case "sym":
		if neg {
			return p.errAt(start, "sym: cannot be excluded")
		}
		if len(parseQuery(value)) == 0 && identPrefix(value) != value {
			return p.errAt(valueAt, fmt.Sprintf("sym: takes an identifier, not %q", value))
		}
		q.syms = append(q.syms, value)
	case "path", "file":
		add(neg, &q.paths, &q.notPaths, value)
	case "lang":
		l, ok := languageNamed(value)
		if !ok {
			return p.errAt(valueAt, fmt.Sprintf("unknown language %q (e.g. go, python, javascript, typescript, c, cpp, java, rust)", value))
		}
		add(neg, &q.langs, &q.notLangs, l)
	case "repo":
		add(neg, &q.repos, &q.notRepos, value)
	case "branch":
		if err := git.CheckBranch(value); err != nil {
			return p.errAt(valueAt, "branch: "+strings.TrimPrefix(err.Error(), "git: "))
		}
		add(neg, &q.branches, &q.notBranches, value)
	}
	return nil
}

var fieldExample = map[string]string{"sym": "parseConfig", "path": "net/http", "file": "net/http", "lang": "go", "repo": "backend", "branch": "release-1.x"}

func add(neg bool, yes, no *[]string, v string) {
	if neg {
		*no = append(*no, v)
	} else {
		*yes = append(*yes, v)
	}
}

// languageNamed is the language a lang: value names: a language as
// files are labelled (go, python) or one of its extensions (py, ts).
func languageNamed(v string) (string, bool) {
	v = strings.ToLower(v)
	for _, l := range languages {
		if l == v {
			return l, true
		}
	}
	if l, ok := languages["."+strings.TrimPrefix(v, ".")]; ok {
		return l, true
	}
	switch v {
	case "make", "dockerfile":
		return v, true
	}
	return "", false
}

// compilePattern compiles an RE2 expression (src as typed, for
// messages), case-insensitive when it has no upper-case literal.
func compilePattern(expr, src string) (*pattern, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("regular expression: %s", syntaxMessage(err))
	}
	// ^ and $ are a line's ends, as in grep.
	flags := "(?m)"
	if !hasUpper(re) {
		flags = "(?mi)"
	}
	expr = flags + expr
	if re, err = syntax.Parse(expr, syntax.Perl); err != nil {
		return nil, fmt.Errorf("regular expression: %s", syntaxMessage(err))
	}
	compiled, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("regular expression: %s", syntaxMessage(err))
	}
	return &pattern{src: src, re: compiled, grams: regexGrams(re.Simplify())}, nil
}

// syntaxMessage is a regexp error without the package's prefix.
func syntaxMessage(err error) string {
	if se, ok := err.(*syntax.Error); ok {
		return fmt.Sprintf("%s: %q", se.Code, se.Expr)
	}
	return err.Error()
}

// pathMatches is path:'s test: v in path, case-insensitive unless v has
// an upper-case letter.
func smartContains(s, v string) bool {
	if strings.ToLower(v) == v {
		return strings.Contains(strings.ToLower(s), v)
	}
	return strings.Contains(s, v)
}
