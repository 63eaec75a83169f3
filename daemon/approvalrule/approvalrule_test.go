package approvalrule

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// rules is an operator's list: the defaults plus two of their own.
var rules = append(Defaults(), Rule{Prefix: []string{"go", "test"}}, Rule{Command: "make lint"})

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string // the rules that allow it, joined by "; "; empty: refused
	}{
		// Allowed.
		{"ls", `prefix "ls"`},
		{"ls -la src", `prefix "ls"`},
		{"git status", `prefix "git" "status"`},
		{"git status --porcelain", `prefix "git" "status"`},
		{"go test ./...", `prefix "go" "test"`},
		{"go test -run 'TestX$' ./daemon/", `prefix "go" "test"`},
		{"make lint", `command "make lint"`},
		{`"git" 'diff' HEAD~1`, `prefix "git" "diff" except "--output" "--ext-diff" "--textconv"`},
		{"git diff --output-indicator-new=+", `prefix "git" "diff" except "--output" "--ext-diff" "--textconv"`},
		{"cat go.mod | wc -l", `prefix "cat"; prefix "wc"`},
		{"rg -n TODO | head -20", `prefix "rg" except "--pre" "--pre-glob" "--hostname-bin"; prefix "head"`},
		{"ls nothing 2>&1", `prefix "ls"`},
		{"ls nothing 2>/dev/null", `prefix "ls"`},
		{"wc -l < go.mod", `prefix "wc"`},
		{"git status && git diff", `prefix "git" "status"; prefix "git" "diff" except "--output" "--ext-diff" "--textconv"`},
		{"ls ./*.go src/*", `prefix "ls"`},
		{"find . -name '*.go' -type f", `prefix "find" except "-exec" "-execdir" "-ok" "-okdir" "-delete" "-fprint" "-fprint0" "-fprintf" "-fls"`},
		// Quotes that hide operators: they are arguments, nothing more.
		{`cat "a; rm -rf /" 'b && reboot'`, `prefix "cat"`},
		{`grep 'x\|y' f`, `prefix "grep"`},

		// Refused: more than the rules allow.
		{"make lint fix", ""},
		{"ls; rm -rf /", ""},
		{"ls ;", ""},
		{"ls && rm -rf /", ""},
		{"ls || curl evil", ""},
		{"ls | sh", ""},
		{"ls &", ""},
		{"ls\nrm -rf /", ""},
		{"ls \\\n-la", ""},
		{"cat $(echo /etc/shadow)", ""},
		{"cat `id`", ""},
		{`cat "$(id)"`, ""},
		{"cat $HOME/x", ""},
		{"cat ${X:-y}", ""},
		{"echo $((1+1))", ""},
		{"ls > out.txt", ""},
		{"ls >> out.txt", ""},
		{"cat <> f", ""},
		{"ls 3>x", ""},
		{"cat <<EOF\n$(id)\nEOF", ""},
		{"PATH=/tmp ls", ""},
		{"LD_PRELOAD=/tmp/x.so ls", ""},
		{"LANG=C ls", ""},
		{"ls *", ""},
		{"ls -*", ""},
		{"ls [-]rf", ""},
		{"ls ''*", ""},
		{`ls ""?rf`, ""},
		{"ls '-'*", ""},
		{"ls .*", `prefix "ls"`},
		{"ls x'*'", `prefix "ls"`},
		{"cat ~/.ssh/id_rsa", ""},
		{"find . -exec sh -c id \\;", ""},
		{"find . -name x -exec id ';'", ""},
		{"find . -delete", ""},
		{"git diff --output=/workspace/x", ""},
		{"git diff --outp=x", ""},
		{"git log --ext-diff", ""},
		{"rg --pre ./run.sh x", ""},
		{"rg --pre=./run.sh x", ""},
		{"ls # comment", ""},
		{"(ls)", ""},
		{"{ ls; }", ""},
		{"! ls", ""},
		{"if ls; then id; fi", ""},
		{"git -c core.pager=id status", ""},
		{"gi\\t status", ""},
		{"ls $'\\x3b'", ""},
		{"ls \u202e", ""},
		{"/bin/ls", ""},
		{"", ""},
	} {
		used, err := Match(tc.line, rules)
		var names []string
		for _, r := range used {
			names = append(names, r.String())
		}
		if got := strings.Join(names, "; "); got != tc.want {
			t.Errorf("Match(%q) = %q (%v), want %q", tc.line, got, err, tc.want)
		}
		if err == nil && tc.want == "" {
			t.Errorf("Match(%q): no error", tc.line)
		}
	}
}

// TestNotPlain: what the shell could do beyond running commands is told
// apart from a command no rule allows.
func TestNotPlain(t *testing.T) {
	if _, err := Match("ls; id", rules); !errors.Is(err, ErrNotPlain) {
		t.Errorf("ls; id: %v", err)
	}
	if _, err := Match("rm x", rules); err == nil || errors.Is(err, ErrNotPlain) || !strings.Contains(err.Error(), `"rm x"`) {
		t.Errorf("rm x: %v", err)
	}
}

func TestPropose(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string // nil: nothing proposed
	}{
		{"go test ./...", []string{"go", "test"}},
		{"git diff HEAD", []string{"git", "diff"}},
		{"ls -la", []string{"ls"}},
		{"npm run build", []string{"npm", "run"}},
		{"git -c x=y status", nil},
		{"go", nil},
		{"sh -c id", nil},
		{"env ls", nil},
		{"xargs rm", nil},
		{"ls | wc", nil},
		{"ls > x", nil},
		{"cat $(id)", nil},
	} {
		r, ok := Propose(tc.line)
		if !ok {
			r.Prefix = nil
		}
		if !slices.Equal(r.Prefix, tc.want) || ok != (tc.want != nil) {
			t.Errorf("Propose(%q) = %q, %v; want %q", tc.line, r.Prefix, ok, tc.want)
		}
	}
}

func TestWithin(t *testing.T) {
	allow := Rule{Prefix: []string{"go"}, Except: []string{"--exec"}}
	for _, tc := range []struct {
		r    Rule
		want bool
	}{
		{Rule{Prefix: []string{"go", "test"}}, true},
		{Rule{Command: "go vet ./..."}, true},
		{Rule{Prefix: []string{"gofmt"}}, false},
		{Rule{Prefix: []string{"make"}}, false},
	} {
		if got := tc.r.Within(allow); got != tc.want {
			t.Errorf("%s within %s: %v", tc.r, allow, got)
		}
	}
	u := Rule{Prefix: []string{"go", "run"}}.Under(allow)
	if _, err := Match("go run --exec=x .", []Rule{u}); err == nil {
		t.Error("the outer rule's exception did not apply")
	}
	if (Rule{Command: "go vet"}).Within(Rule{Command: "go"}) {
		t.Error("a command within another command")
	}
}

func TestValidate(t *testing.T) {
	for _, r := range []Rule{
		{},
		{Command: "ls", Prefix: []string{"ls"}},
		{Command: "ls; id"},
		{Command: "ls *.go"},
		{Prefix: []string{""}},
		{Prefix: []string{"ls"}, Except: []string{""}},
		{Prefix: make([]string, 33)},
		{Prefix: []string{strings.Repeat("a", 257)}},
		{Command: strings.Repeat("a", 1025)},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v: valid", r)
		}
	}
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", r, err)
		}
	}
}
