// Package approvalrule decides whether a shell command line may run
// without asking its owner: it parses the line with a real POSIX shell
// parser (mvdan.cc/sh, the dialect of the sh -c that runs it) and
// matches the argv the shell would build against rules, exact commands
// and argv prefixes.
//
// A line is only ever matched when the shell can do nothing with it but
// start the commands it names with literal arguments. Anything else is
// left to a person, however harmless it looks:
//
//   - one simple command, or a pipeline (|) of them, or two of them joined
//     by && or || (every command of the line must be allowed: "ls && rm"
//     is refused because rm is); never ; & or a newline, a subshell, a
//     group, a ! or a keyword (if, for, ...);
//   - words are literal: plain text, '…' and "…" without $; no parameter,
//     command or arithmetic expansion (no $, no backquote), no backslash
//     outside '…' (so no line continuation), no leading ~;
//   - globs (* ? [) only in arguments after a rule's prefix and only
//     where they cannot expand to an option: the word starts with a
//     literal character other than '-' ("./*.go", "src/*" but not
//     "*.go", which a file named "-rf.go" would turn into an option);
//   - no variable assignment before the command (not just PATH and LD_*:
//     any of them changes what the command does in ways a prefix does
//     not show);
//   - redirections: only the duplication of a standard descriptor
//     (2>&1, >&2), output to /dev/null, and input from a file (< file),
//     which reads as cat does; never output to a file, <> or a here-doc;
//   - no comments, no control or invisible characters.
//
// The rule's Except words then refuse options that make an otherwise
// read-only program run something or write a file (find -exec, git diff
// --output, rg --pre). A long option in Except also refuses its
// abbreviations, as git and getopt_long accept them.
package approvalrule

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"mvdan.cc/sh/v3/syntax"
)

// Rule approves the command lines whose commands it matches.
type Rule struct {
	// Command is a whole command ("git status"): the argv must be
	// exactly its words.
	Command string `yaml:"command,omitempty" json:"command,omitempty"`
	// Prefix is an argv prefix (["go", "test"]): the argv must start with
	// these words; any arguments may follow, except those in Except.
	Prefix []string `yaml:"prefix,omitempty" json:"prefix,omitempty"`
	// Except are arguments a matched command must not have: whole words
	// ("-exec"), or long options ("--output"), which also refuse
	// "--output=FILE" and their abbreviations ("--outp").
	Except []string `yaml:"except,omitempty" json:"except,omitempty"`
}

// Bounds of a rule.
const (
	maxCommand = 1024
	maxWords   = 32
	maxWord    = 256
)

// ErrNotPlain is why a command line cannot match any rule: it is not
// one plain command (or a pipeline of them) with literal words.
var ErrNotPlain = errors.New("not a plain command with literal arguments")

// Validate checks that r is one kind of rule, and that its words are
// words a command line could match.
func (r Rule) Validate() error {
	switch {
	case r.Command != "" && len(r.Prefix) > 0:
		return errors.New("a rule has either command or prefix, not both")
	case r.Command == "" && len(r.Prefix) == 0:
		return errors.New("a rule needs command (a whole command) or prefix (a list of words)")
	case len(r.Command) > maxCommand || len(r.Prefix) > maxWords || len(r.Except) > maxWords:
		return fmt.Errorf("a rule has at most a %d-byte command, %d prefix words and %d exceptions", maxCommand, maxWords, maxWords)
	}
	for _, w := range append(slices.Clip(r.Prefix), r.Except...) {
		if len(w) > maxWord {
			return fmt.Errorf("a rule's words have at most %d bytes", maxWord)
		}
	}
	argv := r.Prefix
	if r.Command != "" {
		cmds, err := Parse(r.Command)
		if err != nil {
			return fmt.Errorf("command %q: %w", r.Command, err)
		}
		if len(cmds) != 1 || cmds[0].hasGlob() {
			return fmt.Errorf("command %q: a rule names one command, without globs", r.Command)
		}
		argv = cmds[0].Argv()
	}
	for _, w := range argv {
		if w == "" || strings.ContainsFunc(w, func(r rune) bool { return !unicode.IsPrint(r) }) {
			return fmt.Errorf("prefix %q: words must be non-empty and printable", argv)
		}
	}
	for _, x := range r.Except {
		if x == "" || x == "-" || x == "--" {
			return fmt.Errorf("except %q: an exception is a word or an option, like -exec or --output", x)
		}
	}
	return nil
}

// argv is the words a matched command starts with.
func (r Rule) argv() []string {
	if len(r.Prefix) > 0 {
		return r.Prefix
	}
	cmds, err := Parse(r.Command)
	if err != nil || len(cmds) != 1 {
		return nil
	}
	return cmds[0].Argv()
}

// String names the rule as the audit log and the events do:
// `command "git status"` or `prefix "go" "test" except "-exec"`.
func (r Rule) String() string {
	var b strings.Builder
	if r.Command != "" {
		fmt.Fprintf(&b, "command %q", r.Command)
	} else {
		b.WriteString("prefix")
		for _, w := range r.Prefix {
			fmt.Fprintf(&b, " %q", w)
		}
	}
	if len(r.Except) > 0 {
		b.WriteString(" except")
		for _, w := range r.Except {
			fmt.Fprintf(&b, " %q", w)
		}
	}
	return b.String()
}

// Within reports whether every command r matches is one outer matches
// too: r's words start with outer's prefix (or are outer's command).
// The effective rule of a user's r is then r with outer's exceptions
// added (see Under).
func (r Rule) Within(outer Rule) bool {
	in, out := r.argv(), outer.argv()
	if in == nil || out == nil {
		return false
	}
	if outer.Command != "" {
		return r.Command != "" && slices.Equal(in, out)
	}
	return len(in) >= len(out) && slices.Equal(in[:len(out)], out)
}

// Under is r with outer's exceptions added to its own.
func (r Rule) Under(outer Rule) Rule {
	r.Except = append(slices.Clip(r.Except), outer.Except...)
	return r
}

// Word is one argument of a parsed command: its value as the shell
// passes it, and whether it holds an unquoted glob.
type Word struct {
	Value string
	// Glob: the shell may replace the word by file names.
	Glob bool
}

// Command is one simple command of a parsed line.
type Command []Word

// Argv is the command's words.
func (c Command) Argv() []string {
	s := make([]string, len(c))
	for i, w := range c {
		s[i] = w.Value
	}
	return s
}

func (c Command) hasGlob() bool {
	return slices.ContainsFunc(c, func(w Word) bool { return w.Glob })
}

// Parse parses line as sh would and returns its simple commands, or an
// error wrapping ErrNotPlain that says what the shell could do beyond
// starting them (see the package comment).
func Parse(line string) ([]Command, error) {
	for _, r := range line {
		if r != ' ' && r != '\t' && !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return nil, fmt.Errorf("%w: it holds the control or invisible character %U", ErrNotPlain, r)
		}
	}
	p := syntax.NewParser(syntax.Variant(syntax.LangPOSIX), syntax.KeepComments(true))
	f, err := p.Parse(strings.NewReader(line), "")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotPlain, err)
	}
	if len(f.Last) > 0 {
		return nil, fmt.Errorf("%w: it has a comment", ErrNotPlain)
	}
	if len(f.Stmts) != 1 {
		return nil, fmt.Errorf("%w: it is %d commands (; or a newline)", ErrNotPlain, len(f.Stmts))
	}
	var cmds []Command
	if err := stmt(f.Stmts[0], &cmds); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotPlain, err)
	}
	return cmds, nil
}

func stmt(s *syntax.Stmt, cmds *[]Command) error {
	switch {
	case len(s.Comments) > 0:
		return errors.New("it has a comment")
	case s.Negated:
		return errors.New("it negates a command (!)")
	case s.Background || s.Coprocess || s.Disown:
		return errors.New("it starts a command in the background (&)")
	case s.Semicolon.IsValid():
		return errors.New("it ends a command with ; or &")
	}
	for _, r := range s.Redirs {
		if err := redirect(r); err != nil {
			return err
		}
	}
	switch c := s.Cmd.(type) {
	case *syntax.CallExpr:
		if len(c.Assigns) > 0 {
			return errors.New("it assigns a variable")
		}
		if len(c.Args) == 0 {
			return errors.New("it runs no command")
		}
		cmd := make(Command, len(c.Args))
		for i, w := range c.Args {
			v, err := word(w)
			if err != nil {
				return err
			}
			cmd[i] = v
		}
		*cmds = append(*cmds, cmd)
		return nil
	case *syntax.BinaryCmd:
		if c.Op != syntax.Pipe && c.Op != syntax.AndStmt && c.Op != syntax.OrStmt {
			return fmt.Errorf("it joins commands with %s", c.Op)
		}
		if err := stmt(c.X, cmds); err != nil {
			return err
		}
		return stmt(c.Y, cmds)
	case nil:
		return errors.New("it runs no command")
	}
	return fmt.Errorf("it is a compound command (%T), not a simple one", s.Cmd)
}

// redirect allows 2>&1 and the like, >/dev/null and < file.
func redirect(r *syntax.Redirect) error {
	if r.N != nil && r.N.Value != "0" && r.N.Value != "1" && r.N.Value != "2" {
		return fmt.Errorf("it redirects descriptor %s", r.N.Value)
	}
	if r.Hdoc != nil || r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc || r.Op == syntax.WordHdoc {
		return errors.New("it has a here-document")
	}
	w, err := word(r.Word)
	if err != nil {
		return err
	}
	if w.Glob {
		return errors.New("it redirects to a glob")
	}
	switch r.Op {
	case syntax.DplOut, syntax.DplIn:
		if w.Value == "0" || w.Value == "1" || w.Value == "2" {
			return nil
		}
	case syntax.RdrOut, syntax.AppOut, syntax.RdrClob:
		if w.Value == "/dev/null" {
			return nil
		}
		return errors.New("it redirects output to a file")
	case syntax.RdrIn:
		if w.Value != "" {
			return nil
		}
	}
	return fmt.Errorf("it has the redirection %s%s", r.Op, w.Value)
}

// word is w's value if it is literal.
func word(w *syntax.Word) (Word, error) {
	if w == nil {
		return Word{}, errors.New("it has an empty redirection")
	}
	var out Word
	var b strings.Builder
	// firstGlob: the value's first character is an unquoted glob
	// character, which file names starting with '-' would replace.
	firstGlob := false
	add := func(s string, unquoted bool) {
		if b.Len() == 0 && s != "" {
			firstGlob = unquoted && strings.ContainsRune("*?[", rune(s[0]))
		}
		b.WriteString(s)
	}
	for i, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, "$`\\") {
				return Word{}, fmt.Errorf("the word %q expands or escapes ($, `, \\)", p.Value)
			}
			if i == 0 && strings.HasPrefix(p.Value, "~") {
				return Word{}, fmt.Errorf("the word %q expands ~", p.Value)
			}
			if strings.ContainsAny(p.Value, "*?[") {
				out.Glob = true
			}
			add(p.Value, true)
		case *syntax.SglQuoted:
			if p.Dollar {
				return Word{}, errors.New("it has a $'…' string")
			}
			add(p.Value, false)
		case *syntax.DblQuoted:
			if p.Dollar {
				return Word{}, errors.New("it has a $\"…\" string")
			}
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return Word{}, fmt.Errorf("a \"…\" string expands (%T)", q)
				}
				if strings.ContainsAny(l.Value, "$`\\") {
					return Word{}, fmt.Errorf("the string %q expands or escapes ($, `, \\)", l.Value)
				}
				add(l.Value, false)
			}
		default:
			return Word{}, fmt.Errorf("a word expands (%T)", p)
		}
	}
	out.Value = b.String()
	if out.Glob && (firstGlob || out.Value[0] == '-') {
		return Word{}, fmt.Errorf("the glob %q could expand to an option", out.Value)
	}
	return out, nil
}

// Match reports the rules that allow every command of line, one per
// command, or an error saying why line does not match: it wraps
// ErrNotPlain, or names the command no rule allows.
func Match(line string, rules []Rule) ([]Rule, error) {
	cmds, err := Parse(line)
	if err != nil {
		return nil, err
	}
	var used []Rule
	for _, c := range cmds {
		i := slices.IndexFunc(rules, func(r Rule) bool { return r.matches(c) })
		if i < 0 {
			return nil, fmt.Errorf("no rule allows %q", strings.Join(c.Argv(), " "))
		}
		used = append(used, rules[i])
	}
	return used, nil
}

// matches reports whether r allows the simple command c.
func (r Rule) matches(c Command) bool {
	want := r.argv()
	if want == nil || len(c) < len(want) {
		return false
	}
	for i, w := range want {
		if c[i].Glob || c[i].Value != w {
			return false
		}
	}
	if r.Command != "" {
		return len(c) == len(want)
	}
	for _, a := range c[len(want):] {
		if r.excepted(a.Value) {
			return false
		}
	}
	return true
}

// excepted reports whether the argument a is one of r.Except, or a
// long option in it written with =VALUE or abbreviated.
func (r Rule) excepted(a string) bool {
	name, _, _ := strings.Cut(a, "=")
	for _, x := range r.Except {
		switch {
		case a == x:
			return true
		case strings.HasPrefix(x, "--") && strings.HasPrefix(name, "--") && len(name) > 2 && strings.HasPrefix(x, name):
			return true
		}
	}
	return false
}

// subcommands are programs whose first argument names what they do, so
// that a proposed rule keeps it ("go test", not "go").
var subcommands = []string{"git", "go", "npm", "npx", "pnpm", "yarn", "cargo", "pip", "pip3", "uv", "poetry", "docker", "kubectl", "dotnet", "mvn", "gradle", "bazel", "make", "just", "deno", "bun"}

// runners run whatever their arguments name: a rule on them would allow
// any command, so none is proposed.
var runners = []string{"sh", "bash", "dash", "zsh", "ksh", "env", "xargs", "sudo", "su", "doas", "exec", "eval", "command", "builtin", "nice", "nohup", "timeout", "time", "strace", "watch", "busybox", "python", "python3", "perl", "ruby", "node", "awk", "find"}

// Propose is the prefix rule that "always allow commands like this"
// would add for line: its program, and its subcommand for programs that
// have them (git diff, go test). ok is false when line is not one plain
// command, or its program runs arbitrary others (sh, env, xargs, ...).
func Propose(line string) (r Rule, ok bool) {
	cmds, err := Parse(line)
	if err != nil || len(cmds) != 1 {
		return Rule{}, false
	}
	c := cmds[0]
	if c[0].Glob || slices.Contains(runners, c[0].Value) {
		return Rule{}, false
	}
	r.Prefix = []string{c[0].Value}
	if slices.Contains(subcommands, c[0].Value) {
		// "git -c …" is not proposed as "git": that would allow any.
		if len(c) < 2 || c[1].Glob || !isSubcommand(c[1].Value) {
			return Rule{}, false
		}
		r.Prefix = append(r.Prefix, c[1].Value)
	}
	return r, r.matches(c)
}

func isSubcommand(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	})
}

// Allowed is r as it applies within the first of allow that r is
// within (see Within, Under); ok is false when none holds it.
func Allowed(r Rule, allow []Rule) (eff Rule, ok bool) {
	for _, a := range allow {
		if r.Within(a) {
			return r.Under(a), true
		}
	}
	return Rule{}, false
}
