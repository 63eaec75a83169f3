package approvalrule

// Defaults is the ready set of read-only rules (sandbox.default_rules):
// programs that read files and print, with the options that would make
// them run a program or write a file excepted.
//
// git runs what .git/config names (core.fsmonitor, a diff driver or
// textconv) on status, diff, log or show. agentcore's file tools never
// write in a .git, so only a command someone approved can set those;
// the git rules below are as read-only as the commands approved before.
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
