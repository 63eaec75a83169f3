package agentcore

import (
	"fmt"
	"strings"
)

// placeSecrets replaces each secret placeholder of command (at the
// positions in matches, from secretRef) with a reference to its
// environment variable that the shell expands to exactly the value, one
// word, unglobbed: "${VAR}" where the placeholder stands unquoted, ${VAR}
// inside double quotes. Where no reference can do that (single quotes,
// here-documents, backquotes, ${…} and $((…)), right after a backslash
// or $) it refuses the command: it is checked in Prepare, before an
// approval is asked, so nothing runs.
//
// It follows POSIX sh's quoting (sh -c is dash): quotes, backslashes,
// comments, $(…), ${…}, $((…)), backquotes and here-documents. A case
// statement inside $(…) would make its parentheses ambiguous to this
// reading, so placeholders after one are refused rather than guessed.
func placeSecrets(command string, matches [][]int) (string, error) {
	p := &shellReader{s: command, matches: matches}
	if err := p.read(); err != nil {
		return "", err
	}
	p.out.WriteString(command[p.copied:])
	return p.out.String(), nil
}

// Frames of shellReader.stack.
const (
	frameDouble = '"' // "…"
	frameSub    = '(' // $(…)
	frameArith  = 'a' // $((…))
	frameParam  = '{' // ${…}
	frameBack   = '`' // `…`
)

type shellFrame struct {
	kind  byte
	depth int // open parentheses ($(, $(( ) or braces (${) not yet closed
}

type heredoc struct {
	delim string
	strip bool // <<-: leading tabs are ignored
}

type shellReader struct {
	s       string
	matches [][]int // placeholders: [start, end, name start, name end]
	next    int     // index of the next placeholder
	out     strings.Builder
	copied  int // s[:copied] is in out
	stack   []shellFrame
	pending []heredoc // here-documents whose body starts at the next newline
	unsure  bool      // a case statement inside $(…)
}

func (p *shellReader) top() byte {
	if len(p.stack) == 0 {
		return 0
	}
	return p.stack[len(p.stack)-1].kind
}

// refuse is the error for placeholder k standing where.
func (p *shellReader) refuse(k int, where string) error {
	name := p.s[p.matches[k][2]:p.matches[k][3]]
	return fmt.Errorf("{{secret:%s}} stands %s, where its value cannot be passed to the command safely: nothing was run. Write it unquoted or inside double quotes, e.g. --password=\"{{secret:%s}}\"", name, where, name)
}

// skip moves to i, refusing a placeholder inside what is skipped.
func (p *shellReader) skip(i int, where string) (int, error) {
	if p.next < len(p.matches) && p.matches[p.next][0] < i {
		return 0, p.refuse(p.next, where)
	}
	return i, nil
}

// place substitutes the placeholder that starts at i and returns the
// position after it.
func (p *shellReader) place(i int) (int, error) {
	k := p.next
	var ref string
	switch top := p.top(); {
	case p.unsure:
		return 0, p.refuse(k, "after a case statement inside $(…)")
	case top == 0 || top == frameSub:
		ref = `"${` + secretEnvPrefix + p.s[p.matches[k][2]:p.matches[k][3]] + `}"`
	case top == frameDouble:
		ref = `${` + secretEnvPrefix + p.s[p.matches[k][2]:p.matches[k][3]] + `}`
	case top == frameBack:
		return 0, p.refuse(k, "inside backquotes (use $(…))")
	case top == frameParam:
		return 0, p.refuse(k, "inside ${…}")
	default:
		return 0, p.refuse(k, "inside $((…)) arithmetic")
	}
	p.out.WriteString(p.s[p.copied:i])
	p.out.WriteString(ref)
	p.next++
	p.copied = p.matches[k][1]
	return p.copied, nil
}

func (p *shellReader) read() error {
	s := p.s
	for i := 0; i < len(s); {
		if p.next < len(p.matches) && p.matches[p.next][0] == i {
			var err error
			if i, err = p.place(i); err != nil {
				return err
			}
			continue
		}
		c := s[i]
		var err error
		switch top := p.top(); {
		case c == '\\':
			i, err = p.skip(i+2, "right after a backslash")
		case top == frameBack:
			if c == '`' {
				p.stack = p.stack[:len(p.stack)-1]
			}
			i++
		case c == '$':
			i, err = p.dollar(i)
		case c == '`':
			p.stack = append(p.stack, shellFrame{kind: frameBack})
			i++
		case top == frameDouble:
			if c == '"' {
				p.stack = p.stack[:len(p.stack)-1]
			}
			i++
		// Unquoted from here on: the top level, $(…), ${…}, $((…)).
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				end = len(s)
			} else {
				end += i + 2
			}
			i, err = p.skip(end, "inside single quotes")
		case c == '"':
			p.stack = append(p.stack, shellFrame{kind: frameDouble})
			i++
		case c == '#' && (top == 0 || top == frameSub) && (i == 0 || strings.IndexByte(" \t\n;&|()", s[i-1]) >= 0):
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				end = len(s)
			} else {
				end += i
			}
			// A placeholder in a comment is left as it is.
			for p.next < len(p.matches) && p.matches[p.next][0] < end {
				p.next++
			}
			i = end
		case c == '(' || c == ')' || c == '{' || c == '}':
			p.nest(c)
			i++
		case c == '<' && top != frameArith && strings.HasPrefix(s[i:], "<<") && !strings.HasPrefix(s[i:], "<<<"):
			i, err = p.heredocStart(i + 2)
		case c == '\n' && len(p.pending) > 0:
			i, err = p.heredocBodies(i + 1)
		case top == frameSub && strings.HasPrefix(s[i:], "case") && (i == 0 || strings.IndexByte(" \t\n;&|(", s[i-1]) >= 0) &&
			(i+4 == len(s) || strings.IndexByte(" \t\n", s[i+4]) >= 0):
			p.unsure = true
			i += 4
		default:
			i++
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// dollar reads what a $ at i starts.
func (p *shellReader) dollar(i int) (int, error) {
	s := p.s[i:]
	switch {
	case p.next < len(p.matches) && p.matches[p.next][0] == i+1:
		return 0, p.refuse(p.next, "right after a $")
	case strings.HasPrefix(s, "$(("):
		p.stack = append(p.stack, shellFrame{kind: frameArith, depth: 2})
		return i + 3, nil
	case strings.HasPrefix(s, "$("):
		p.stack = append(p.stack, shellFrame{kind: frameSub, depth: 1})
		return i + 2, nil
	case strings.HasPrefix(s, "${"):
		p.stack = append(p.stack, shellFrame{kind: frameParam, depth: 1})
		return i + 2, nil
	}
	return i + 1, nil
}

// nest counts an unquoted parenthesis or brace against the open $(…),
// $((…)) or ${…}, closing it at its last.
func (p *shellReader) nest(c byte) {
	if len(p.stack) == 0 {
		return
	}
	f := &p.stack[len(p.stack)-1]
	open, closing := byte('('), byte(')')
	if f.kind == frameParam {
		open, closing = '{', '}'
	} else if f.kind != frameSub && f.kind != frameArith {
		return
	}
	switch c {
	case open:
		f.depth++
	case closing:
		f.depth--
		if f.depth == 0 {
			p.stack = p.stack[:len(p.stack)-1]
		}
	}
}

// heredocStart reads the delimiter word of a here-document whose << ends
// before i.
func (p *shellReader) heredocStart(i int) (int, error) {
	s := p.s
	h := heredoc{}
	if i < len(s) && s[i] == '-' {
		h.strip = true
		i++
	}
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	var word strings.Builder
	start := i
	for i < len(s) && strings.IndexByte(" \t\n;&|<>()", s[i]) < 0 {
		switch c := s[i]; c {
		case '\'', '"':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				end = len(s) - i - 1
			}
			word.WriteString(s[i+1 : i+1+end])
			i += end + 2
		case '\\':
			if i+1 < len(s) {
				word.WriteByte(s[i+1])
			}
			i += 2
		default:
			word.WriteByte(c)
			i++
		}
	}
	i = min(i, len(s))
	if _, err := p.skip(i, "in a here-document's delimiter"); err != nil {
		return 0, err
	}
	if i == start {
		// Not a here-document (a syntax error sh will report).
		return i, nil
	}
	h.delim = word.String()
	p.pending = append(p.pending, h)
	return i, nil
}

// heredocBodies skips the bodies of the pending here-documents, which
// start at i, refusing placeholders inside them: a quoted delimiter
// leaves them unexpanded, an unquoted one would put the quotes of a
// reference into the text.
func (p *shellReader) heredocBodies(i int) (int, error) {
	s := p.s
	for _, h := range p.pending {
		for i < len(s) {
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				end = len(s)
			} else {
				end += i
			}
			line := s[i:end]
			if h.strip {
				line = strings.TrimLeft(line, "\t")
			}
			i = min(end+1, len(s))
			if line == h.delim {
				break
			}
		}
	}
	p.pending = p.pending[:0]
	return p.skip(i, "inside a here-document")
}
