package retrieval

import (
	"strings"

	"github.com/codumentor/codumentor/agentcore"
)

// snippetLines is how many lines of a chunk a hit shows.
const snippetLines = 15

// Hit is the result as the API and the model see it: the snippet is the
// part of the chunk where the query's words first appear (up to
// snippetLines lines), and the lines are the snippet's.
func (r Result) Hit(query string) agentcore.Hit {
	lines := strings.SplitAfter(r.Text, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	first := 0
	ws := parseQuery(query)
	for i, l := range lines {
		if r.line > 0 && r.StartLine+i == r.line || r.line == 0 && lineHas(l, ws) {
			first = max(0, i-2)
			break
		}
	}
	first = min(first, max(0, len(lines)-snippetLines))
	end := min(len(lines), first+snippetLines)
	return agentcore.Hit{
		Repository: r.Repository,
		Path:       r.Path,
		StartLine:  r.StartLine + first,
		EndLine:    r.StartLine + max(first, end-1),
		Snippet:    strings.Join(lines[first:end], ""),
		Score:      r.Score,
	}
}

// lineHas reports whether one of the query's words is in line.
func lineHas(line string, ws []queryWord) bool {
	t := " " + terms(line) + " "
	for _, w := range ws {
		if strings.Contains(t, " "+strings.Join(w, " ")+" ") {
			return true
		}
	}
	return false
}
