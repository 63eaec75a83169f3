package approvalrule

// Defaults is the ready set of read-only rules (sandbox.default_rules):
// programs that read files and print, with the options that would make
// them run a program or write a file excepted.
//
// git reads the workspace's .git/config, which the agent can write with
// its file tools: a configured core.fsmonitor, diff driver or textconv
// runs a program on git status, diff, log or show. The git rules below
// are therefore only as read-only as that file; an operator who does
// not want that leaves default_rules off and lists the rules they want.
func Defaults() []Rule {
	gitOut := []string{"--output", "--ext-diff", "--textconv"}
	return []Rule{
		{Prefix: []string{"ls"}},
		{Prefix: []string{"cat"}},
		{Prefix: []string{"head"}},
		{Prefix: []string{"tail"}},
		{Prefix: []string{"wc"}},
		{Prefix: []string{"pwd"}},
		{Prefix: []string{"grep"}},
		// --pre runs a program on every file searched; --hostname-bin
		// runs one for hyperlinks.
		{Prefix: []string{"rg"}, Except: []string{"--pre", "--pre-glob", "--hostname-bin"}},
		// -exec and friends run programs; -delete and -fprint* write.
		{Prefix: []string{"find"}, Except: []string{"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}},
		{Prefix: []string{"git", "status"}},
		{Prefix: []string{"git", "diff"}, Except: gitOut},
		{Prefix: []string{"git", "log"}, Except: gitOut},
		{Prefix: []string{"git", "show"}, Except: gitOut},
	}
}
