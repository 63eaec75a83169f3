package daemon_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// unitsProject is a small Python project: units.py (over 100 KB: two
// generated tables with convert between them) and a unittest suite whose
// verbose run prints over 200 KB, one line per test, before its summary.
// Its test_any_case fails until convert lowers both unit names.
func unitsProject(t *testing.T) map[string]string {
	t.Helper()
	var u strings.Builder
	u.WriteString(`"""Conversion factors between units of length and of mass."""

# Factors to metres.
LENGTH = {
    "m": 1.0,
    "km": 1000.0,
`)
	for i := 1; i <= 1700; i++ {
		fmt.Fprintf(&u, "    \"length_%04d\": %.8f,\n", i, 1+float64(i)/10000)
	}
	u.WriteString(`}


def convert(value, src, dst):
    """Converts value from unit src to unit dst, both of one table."""
    for table in (LENGTH, MASS):
        if src in table and dst in table:
            return value * table[src] / table[dst]
    raise KeyError(f"no table holds both {src!r} and {dst!r}")


# Factors to kilograms.
MASS = {
    "kg": 1.0,
    "g": 0.001,
`)
	for i := 1; i <= 1700; i++ {
		fmt.Fprintf(&u, "    \"mass_%04d\": %.8f,\n", i, 1+float64(i)/10000)
	}
	u.WriteString("}\n")
	if u.Len() < 100_000 {
		t.Fatalf("units.py is %d bytes, want over 100 KB", u.Len())
	}
	return map[string]string{
		".gitignore":        "__pycache__/\n*.pyc\nbuild/\n",
		"README.md":         "# units\n\nRun the tests with `python3 -m unittest -v`; build with `sh build.sh`.\n",
		"build.sh":          "set -e\nmkdir -p build\npython3 -c 'import json, units; print(json.dumps({\"length\": units.LENGTH, \"mass\": units.MASS}))' > build/units.json\n",
		"units.py":          u.String(),
		"tests/__init__.py": "",
		"tests/test_units.py": `"""Tests of units.convert."""
import unittest

import units


class TestConvert(unittest.TestCase):
    def test_any_case(self):
        self.assertEqual(units.convert(2, "KM", "M"), 2000)

    def test_km_to_m(self):
        self.assertEqual(units.convert(2, "km", "m"), 2000)

    def test_unknown_pair(self):
        with self.assertRaises(KeyError):
            units.convert(1, "km", "kg")


class TestTables(unittest.TestCase):
    """Every unit converts to itself."""


def _identity(name):
    def test(self):
        self.assertAlmostEqual(units.convert(1.5, name, name), 1.5)
    return test


for _name in [*units.LENGTH, *units.MASS]:
    setattr(TestTables, "test_" + _name, _identity(_name))
`,
	}
}

// unitsTask is the user's message; the scripted agent answers requests
// of the conversation that starts with it.
const unitsTask = "tests/test_units.py's test_any_case fails: make convert() accept unit names in any case. Run the tests with `python3 -m unittest -v`."

// unitsAgent is the scripted model of the end-to-end task: it acts on
// what each tool result says (the search hit's lines, the kept output's
// path and length), as an agent does, and refuses to go on (an error
// fails the model call, so the turn) when a result is not what a working
// server returns.
func unitsAgent(req agentcore.Request) (llmtest.Step, error) {
	first, n := "", 0
	for _, m := range req.Messages {
		if m.Role == agentcore.RoleUser && first == "" {
			first = m.Content
		}
		if m.Role == agentcore.RoleAssistant {
			n++
		}
	}
	if !strings.Contains(first, unitsTask) {
		return llmtest.Step{}, fmt.Errorf("a request of another conversation: %.80q", first)
	}
	last := req.Messages[len(req.Messages)-1].Content
	call := func(text, name string, args any) (llmtest.Step, error) {
		b, err := json.Marshal(args)
		return llmtest.Step{Text: text, ToolCalls: []agentcore.ToolCall{{Name: name, Arguments: string(b)}}}, err
	}
	shell := func(text, cmd string) (llmtest.Step, error) {
		return call(text, "shell", map[string]string{"command": cmd})
	}
	want := func(sub string) error {
		if !strings.Contains(last, sub) {
			return fmt.Errorf("step %d: the last tool result lacks %q:\n%.3000s", n, sub, last)
		}
		return nil
	}
	switch n {
	case 0:
		return call("Let me find convert.", "search_code", map[string]string{"query": "convert src dst table"})
	case 1:
		m := regexp.MustCompile(`(?m)^units\.py:(\d+)-(\d+) `).FindStringSubmatch(last)
		if m == nil {
			return llmtest.Step{}, fmt.Errorf("search_code found no units.py:\n%s", last)
		}
		start, _ := strconv.Atoi(m[1])
		end, _ := strconv.Atoi(m[2])
		return call("Reading it.", "read_file", map[string]any{"path": "units.py", "offset": start, "limit": end - start + 1})
	case 2:
		if err := want("\tdef convert(value, src, dst):\n"); err != nil {
			return llmtest.Step{}, err
		}
		return call("Lowering the names.", "edit_file", map[string]string{"path": "units.py",
			"old_string": "    for table in (LENGTH, MASS):\n", "new_string": "    src = src.lower()\n    for table in (LENGTH, MASS):\n"})
	case 3:
		return shell("Running the tests.", "python3 -m unittest -v")
	case 4:
		m := regexp.MustCompile(`\[whole output: read_file path "([^"]+)"\]`).FindStringSubmatch(last)
		if m == nil {
			return llmtest.Step{}, fmt.Errorf("the long test output names no kept output:\n%.3000s", last)
		}
		return call("The output was long; reading it.", "read_file", map[string]string{"path": m[1]})
	case 5:
		m := regexp.MustCompile(`^(\S+): lines 1–\d+ of ([\d,]+) `).FindStringSubmatch(last)
		if m == nil {
			return llmtest.Step{}, fmt.Errorf("the kept output's first page has no header:\n%.500s", last)
		}
		total, _ := strconv.Atoi(strings.ReplaceAll(m[2], ",", ""))
		return call("Reading its end.", "read_file", map[string]any{"path": m[1], "offset": total - 29, "limit": 30})
	case 6:
		if err := want(`KeyError: "no table holds both 'km' and 'M'"`); err != nil {
			return llmtest.Step{}, err
		}
		return call("dst needs lowering too.", "edit_file", map[string]string{"path": "units.py",
			"old_string": "    src = src.lower()\n", "new_string": "    src, dst = src.lower(), dst.lower()\n"})
	case 7:
		return shell("Running the tests again.", "python3 -m unittest -v")
	case 8:
		if err := want("\nOK\n[exit status 0]"); err != nil {
			return llmtest.Step{}, err
		}
		return shell("Building.", "sh build.sh")
	case 9:
		if err := want("[exit status 0]"); err != nil {
			return llmtest.Step{}, err
		}
		return shell("Reviewing.", "git status --porcelain=v1 --ignored")
	case 10:
		return shell("The diff.", "git diff --full-index")
	case 11:
		return llmtest.Step{Text: "convert() now accepts unit names in any case; the tests pass."}, nil
	}
	return llmtest.Step{}, fmt.Errorf("step %d: the task is done", n)
}

// The first must-show, the task end to end through the API:
// search_code finds convert, read_file shows a numbered range of the
// 100 KB file, edit_file changes it, the tests fail with 200 KB of output
// of which the model sees the real last line and pages the rest kept
// aside, edit_file fixes it, the tests pass, the build writes ignored
// files; git status and git diff inside the sandbox agree with
// …/workspace/diff; the push carries the fix and no ignored file nor
// .git. The user approves the test runs and the build through the API;
// an operator's rule approves git status and git diff.
func TestCodingTaskEndToEnd(t *testing.T) {
	needSandbox(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3: %v", err)
	}
	files := unitsProject(t)
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "remote.git")
	gitCmd(t, dir, "init", "-q", "-b", "main", work)
	for name, body := range files {
		os.MkdirAll(filepath.Join(work, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitCmd(t, work, "add", "-A")
	gitCmd(t, work, "commit", "-q", "-m", "units")
	gitCmd(t, dir, "clone", "-q", "--bare", work, bare)
	base := gitCmd(t, bare, "rev-parse", "main")

	srv, err := llmtest.StartServer(&llmtest.Script{Reply: unitsAgent}, llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	in := newInstance(t, fmt.Sprintf("llm:\n  base_url: %s\n  model: test\n", srv.URL())+
		"sandbox:\n  approval_rules:\n    - prefix: [git, status]\n    - prefix: [git, diff]\n      except: [--output, --ext-diff, --textconv]\n")
	in.addUser("root", pw, true)
	in.addUser("alice", pw, false)
	p := in.start()
	admin, a := p.login("root", pw), p.login("alice", pw)
	repo := addRepo(t, admin, "units", "file://"+bare)
	var conv struct{ ID string }
	a.must(http.StatusCreated, "POST", "/api/v1/conversations", map[string]string{"repository": repo}, &conv)
	s := a.follow(conv.ID, "")
	a.send(conv.ID, unitsTask)

	// The turn, approving what the user is asked as the user would. A
	// generous limit per event: this machine is shared and loaded.
	var asked []string
	var ruled []agentcore.Approval
	var evs []sseEvent
turn:
	for {
		ev := s.next(3 * time.Minute)
		evs = append(evs, ev)
		switch ev.Type {
		case agentcore.EventApprovalPending:
			ap := decodeApproval(t, ev)
			asked = append(asked, ap.Command)
			a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/approvals/"+ap.ID, map[string]string{"decision": "approve"}, nil)
		case agentcore.EventApprovalDecided:
			if ap := decodeApproval(t, ev); ap.DecidedBy == "approver" {
				ruled = append(ruled, ap)
			}
		case agentcore.EventTurnFailed, agentcore.EventTurnCancelled:
			t.Fatalf("the turn ended with %s: %s", ev.Type, ev.Data)
		case agentcore.EventTurnFinished:
			break turn
		}
	}
	if reply := replyText(t, evs); !strings.HasSuffix(reply, "the tests pass.") {
		t.Fatalf("the turn's reply %q: the agent did not get to the end", reply)
	}
	if want := []string{"python3 -m unittest -v", "python3 -m unittest -v", "sh build.sh"}; !slices.Equal(asked, want) {
		t.Errorf("the user was asked for %q, want %q", asked, want)
	}
	var rules []string
	for _, ap := range ruled {
		rules = append(rules, ap.Command+" <- "+ap.Rule)
	}
	if want := []string{`git status --porcelain=v1 --ignored <- operator: prefix "git" "status"`,
		`git diff --full-index <- operator: prefix "git" "diff" except "--output" "--ext-diff" "--textconv"`}; !slices.Equal(rules, want) {
		t.Errorf("approved by a rule: %q, want %q", rules, want)
	}

	// unittest -v's line for the failing test (Python 3.11 names the
	// method in the parentheses too).
	anyCaseError := regexp.MustCompile(`(?m)^(\s+1\t)?test_any_case \(tests\.test_units\.TestConvert[.\w]*\) \.\.\. ERROR\n`)
	// What the model received: each tool result in the request after
	// its call, as sent on the wire.
	results := toolResults(t, srv.Bodies())
	search := results["call_0_0"]
	hit := regexp.MustCompile(`(?m)^units\.py:(\d+)-(\d+) \(repository ` + repo + `\)\n`).FindStringSubmatch(search)
	if hit == nil {
		t.Fatalf("search_code's result has no units.py hit:\n%s", search)
	}
	convertLine := slices.Index(strings.Split(files["units.py"], "\n"), "def convert(value, src, dst):") + 1
	read := results["call_1_0"]
	if m := regexp.MustCompile(`^units\.py: lines (\d+)–(\d+) of ` + commaInt(strings.Count(files["units.py"], "\n")) + ` \(bytes [\d,]+–[\d,]+ of ` + commaInt(len(files["units.py"])) + `\)\n`).FindStringSubmatch(read); m == nil ||
		m[1] != hit[1] || m[2] != hit[2] || !strings.Contains(read, fmt.Sprintf("\n%6d\tdef convert(value, src, dst):\n", convertLine)) {
		t.Errorf("read_file of lines %s-%s of units.py (def convert is line %d):\n%s", hit[1], hit[2], convertLine, read)
	}
	// The failing run: over 200 KB, of which the model got the head and
	// the real end (the summary line, then the exit status), and the
	// path of the whole.
	failed := results["call_3_0"]
	m := regexp.MustCompile(`\n\[… ([\d,]+) bytes elided …\]\n\[whole output: read_file path "(\.codumentor/output/call_3_0\.txt)"\]\n`).FindStringSubmatch(failed)
	if m == nil {
		t.Fatalf("the failing run's result has no elision and kept-output note:\n%.2000s", failed)
	}
	if elided, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", "")); elided < 200_000 {
		t.Errorf("%d bytes elided, want the run to print over 200 KB", elided)
	}
	if !strings.HasSuffix(failed, "\nFAILED (errors=1)\n[exit status 1]") || !anyCaseError.MatchString(failed) {
		t.Errorf("the failing run's result lacks its head or its real last line:\n%s", failed)
	}
	if len(failed) > 32<<10 {
		t.Errorf("the failing run's result is %d bytes, over the 32 KiB the model gets", len(failed))
	}
	// The kept output, paged: its first page, then its last 30 lines.
	page1, page2 := results["call_4_0"], results["call_5_0"]
	hm := regexp.MustCompile(`^\.codumentor/output/call_3_0\.txt: lines 1–\d+ of ([\d,]+) \(bytes 0–`).FindStringSubmatch(page1)
	if hm == nil || !anyCaseError.MatchString(page1) {
		t.Fatalf("the kept output's first page:\n%.1000s", page1)
	}
	total, _ := strconv.Atoi(strings.ReplaceAll(hm[1], ",", ""))
	wantHead := fmt.Sprintf(".codumentor/output/call_3_0.txt: lines %d–%d of %s ", total-29, total, commaInt(total))
	if !strings.HasPrefix(page2, wantHead) || !strings.HasSuffix(page2, fmt.Sprintf("%6d\tFAILED (errors=1)\n", total)) ||
		!strings.Contains(page2, "\tKeyError: \"no table holds both 'km' and 'M'\"\n") {
		t.Errorf("the kept output's last page, want it to start %q:\n%s", wantHead, page2)
	}
	if passed := results["call_7_0"]; !strings.HasSuffix(passed, "\nOK\n[exit status 0]") || !strings.Contains(passed, fmt.Sprintf("Ran %d tests", 3+2+1700+2+1700)) {
		t.Errorf("the passing run's result:\n%.2000s", passed)
	}

	// git inside the sandbox and the workspace diff agree.
	status, ok := strings.CutSuffix(results["call_9_0"], "[exit status 0]")
	gitDiff, ok2 := strings.CutSuffix(results["call_10_0"], "[exit status 0]")
	if !ok || !ok2 {
		t.Fatalf("git status or git diff failed in the sandbox:\n%s\n%s", results["call_9_0"], results["call_10_0"])
	}
	var changed, ignored []string
	for line := range strings.Lines(status) {
		path := strings.TrimSpace(line[3:])
		if strings.HasPrefix(line, "!! ") {
			ignored = append(ignored, path)
		} else {
			changed = append(changed, path)
		}
	}
	patch, digest := a.readDiff(conv.ID)
	head, _, _ := strings.Cut(patch, "diff --git")
	body := patch[len(head):]
	var patchFiles, patchIgnored []string
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, "diff --git a/"); ok {
			patchFiles = append(patchFiles, rest[:strings.Index(rest, " b/")])
		}
	}
	if _, list, ok := strings.Cut(head, "# codumentor: not exported: ignored (the repository's .gitignore or .git/info/exclude):\n"); ok {
		for line := range strings.Lines(list) {
			if !strings.HasPrefix(line, "#   ") {
				break
			}
			patchIgnored = append(patchIgnored, strings.TrimSpace(strings.TrimPrefix(line, "#   ")))
		}
	}
	slices.Sort(ignored)
	if want := []string{"units.py"}; !slices.Equal(changed, want) || !slices.Equal(patchFiles, want) {
		t.Errorf("changed: git status %q, the workspace diff %q, want %q", changed, patchFiles, want)
	}
	if want := []string{"__pycache__/", "build/", "tests/__pycache__/"}; !slices.Equal(ignored, want) || !slices.Equal(patchIgnored, want) {
		t.Errorf("ignored: git status %q, the patch's comment %q, want %q\n%s", ignored, patchIgnored, want, head)
	}
	if body != gitDiff {
		t.Errorf("the workspace diff differs from git diff in the sandbox:\n--- workspace diff\n%s\n--- git diff\n%s", body, gitDiff)
	}
	if !strings.Contains(body, "+    src, dst = src.lower(), dst.lower()\n") || strings.Contains(patch, ".pyc") || strings.Contains(patch, "units.json") || strings.Contains(patch, ".codumentor") {
		t.Errorf("the patch:\n%s", patch)
	}

	// The push: the fix, and nothing ignored nor .git.
	var res struct{ Commit string }
	a.must(http.StatusOK, "POST", "/api/v1/conversations/"+conv.ID+"/workspace/push", map[string]string{"branch": "codumentor/any-case", "message": "convert: any case", "diff_sha256": digest}, &res)
	if got := gitCmd(t, bare, "rev-parse", "codumentor/any-case"); got != res.Commit {
		t.Fatalf("the remote's branch is at %s, the push answered %s", got, res.Commit)
	}
	if got := gitCmd(t, bare, "rev-parse", res.Commit+"^"); got != base {
		t.Errorf("pushed commit's parent %s, want %s", got, base)
	}
	tree := strings.Fields(gitCmd(t, bare, "ls-tree", "-r", "--name-only", res.Commit))
	if want := []string{".gitignore", "README.md", "build.sh", "tests/__init__.py", "tests/test_units.py", "units.py"}; !slices.Equal(tree, want) {
		t.Errorf("pushed tree %q, want %q (no ignored file, no .git)", tree, want)
	}
	if got := gitCmd(t, bare, "diff", "--name-only", base, res.Commit); got != "units.py" {
		t.Errorf("the pushed commit changes %q, want units.py", got)
	}
	pushed := gitCmd(t, bare, "show", res.Commit+":units.py") + "\n"
	if ws := string(a.must(http.StatusOK, "GET", "/api/v1/conversations/"+conv.ID+"/workspace/files?path=units.py", nil, nil)); pushed != ws {
		t.Errorf("the pushed units.py differs from the workspace's")
	}
	// The pushed tree passes its tests here too.
	check := filepath.Join(dir, "check")
	gitCmd(t, dir, "clone", "-q", "-b", "codumentor/any-case", bare, check)
	cmd := exec.Command("python3", "-m", "unittest", "-q")
	cmd.Dir, cmd.Env = check, append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the pushed tree's tests: %v\n%s", err, out)
	}
}

// toolResults maps each tool call ID to the result the model received
// for it: the content of the tool message in the first request body that
// carries it.
func toolResults(t *testing.T, bodies []json.RawMessage) map[string]string {
	t.Helper()
	results := map[string]string{}
	for _, b := range bodies {
		var req struct {
			Messages []struct {
				Role       string `json:"role"`
				Content    string `json:"content"`
				ToolCallID string `json:"tool_call_id"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatalf("a request body: %v", err)
		}
		for _, m := range req.Messages {
			if _, seen := results[m.ToolCallID]; m.Role == "tool" && !seen {
				results[m.ToolCallID] = m.Content
			}
		}
	}
	return results
}

// commaInt writes n as the tools do, with thousands separators.
func commaInt(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
