package retrieval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/codumentor/codumentor/agentcore"
)

// ErrNoRepository is wrapped when a search names a repository the user
// may not read, or that does not exist: the two answer the same.
var ErrNoRepository = errors.New("retrieval: no such repository")

// Searcher answers users' searches (GET /api/v1/search, the search_code
// tool) over an Index, within the repositories each user may read. It
// implements agentcore.Retriever.
type Searcher struct {
	Index *Index
	// Readable lists the repositories user may search; all reports that
	// they may search every repository (the list is then not used, and
	// the index searches without a filter). Nil Readable means every
	// repository for every user.
	Readable func(ctx context.Context, user string) (repos []string, all bool, err error)
	// Scope is search_code's default scope in a conversation (the zero
	// Scope: every repository the user may read). Nil: no conversation
	// has a repository. The daemon wires it to the conversation's
	// repository and commit.
	Scope func(ctx context.Context, user, conversation string) (Scope, error)
	// Exists reports whether a repository named in a search exists; one
	// that does not answers ErrNoRepository, as one the user may not
	// read does. Nil: every name is searched (and finds nothing).
	Exists func(ctx context.Context, repository string) (bool, error)
	// Branches lists every repository's indexed branches by ID, its
	// default branch first, which branch: chooses from (keys as
	// BranchKey makes them). A repository it does not list has one
	// branch, under its ID, that branch: never names. Nil: no repository
	// lists any.
	Branches func(ctx context.Context) (map[string][]string, error)
}

// Scope is where search_code searches when the model names no
// repository and the query no branch:.
type Scope struct {
	// Repository is the conversation's repository ("": every repository
	// the user may read).
	Repository string
	// Branch is the branch of Repository searched ("": its default).
	Branch string
	// Note, when set, comes before the results: what the model should
	// know about what was searched (e.g. that the conversation's commit
	// is not the one indexed).
	Note string
}

// SearchIn searches repository (or, when "", every repository user may
// read) for query, returning at most limit hits. Without branch: in the
// query, each repository's default branch is searched.
func (s *Searcher) SearchIn(ctx context.Context, user, repository, query string, limit int) ([]agentcore.Hit, error) {
	return s.SearchBranch(ctx, user, repository, "", query, limit)
}

// SearchBranch is SearchIn on branch of the repositories ("": each one's
// default branch) when the query names no branch: itself.
func (s *Searcher) SearchBranch(ctx context.Context, user, repository, branch, query string, limit int) ([]agentcore.Hit, error) {
	hits, _, err := s.search(ctx, user, repository, branch, query, limit)
	return hits, err
}

// search is SearchIn on branch of the repositories ("": each one's
// default) unless the query names branches itself; with the
// repositories' branches (Searcher.Branches).
func (s *Searcher) search(ctx context.Context, user, repository, branch, query string, limit int) ([]agentcore.Hit, map[string][]string, error) {
	// The query first: a query that cannot be read is the caller's
	// mistake before any lookup.
	pq, err := parseSearch(Query{Text: query})
	if err != nil {
		return nil, nil, err
	}
	var repos []string
	restricted := s.Readable != nil
	if restricted {
		r, all, err := s.Readable(ctx, user)
		if err != nil {
			return nil, nil, err
		}
		repos, restricted = r, !all
		if all {
			repos = nil
		}
	}
	if repository != "" {
		// Before anything is searched: a repository the user may not
		// read answers as an unknown one, whatever else they may read.
		if restricted && !slices.Contains(repos, repository) {
			return nil, nil, fmt.Errorf("%w: %q", ErrNoRepository, repository)
		}
		if s.Exists != nil {
			ok, err := s.Exists(ctx, repository)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				return nil, nil, fmt.Errorf("%w: %q", ErrNoRepository, repository)
			}
		}
		repos = []string{repository}
		restricted = true
	}
	if restricted && len(repos) == 0 {
		// Nothing readable (an empty list to the index means everything).
		return []agentcore.Hit{}, nil, nil
	}
	var branches map[string][]string
	if s.Branches != nil {
		if branches, err = s.Branches(ctx); err != nil {
			return nil, nil, err
		}
	}
	want, notWant := pq.branches, pq.notBranches
	if len(want) == 0 && len(notWant) == 0 && branch != "" {
		want = []string{branch}
	}
	keys, everything := branchKeys(repos, restricted, branches, want, notWant)
	if !everything && len(keys) == 0 {
		return []agentcore.Hit{}, nil, nil
	}
	rs, err := s.Index.Search(ctx, Query{Text: query, Repositories: keys, Limit: limit})
	if err != nil {
		return nil, nil, err
	}
	hits := make([]agentcore.Hit, len(rs))
	for i, r := range rs {
		hits[i] = r.Hit(query)
		repo, b := splitKey(r.Repository)
		if bs := branches[repo]; b == "" && len(bs) > 0 {
			b = bs[0]
		}
		hits[i].Repository, hits[i].Branch = repo, b
	}
	return hits, branches, nil
}

// branchKeys are the index keys of the branches want (none: the default
// ones) but not notWant of repos (unless restricted, every repository
// branches lists), given each repository's branches (default first).
// everything reports that the index may search every key: no filter is
// needed, as no repository has a second branch.
func branchKeys(repos []string, restricted bool, branches map[string][]string, want, notWant []string) (keys []string, everything bool) {
	if len(want) == 0 && len(notWant) == 0 {
		if restricted {
			return repos, false
		}
		for _, bs := range branches {
			if len(bs) > 1 {
				return slices.Sorted(maps.Keys(branches)), false
			}
		}
		return nil, true
	}
	if !restricted {
		repos = slices.Sorted(maps.Keys(branches))
	}
	for _, r := range repos {
		for i, b := range branches[r] {
			if len(want) > 0 && !slices.Contains(want, b) || slices.Contains(notWant, b) {
				continue
			}
			if i == 0 {
				b = ""
			}
			keys = append(keys, BranchKey(r, b))
		}
	}
	return keys, false
}

// namesBranch reports whether query has branch: terms.
func namesBranch(query string) bool {
	pq, err := parseSearch(Query{Text: query})
	return err == nil && len(pq.branches)+len(pq.notBranches) > 0
}

// Search implements agentcore.Retriever over every repository user may
// read.
func (s *Searcher) Search(ctx context.Context, user, query string, limit int) ([]agentcore.Hit, error) {
	return s.SearchIn(ctx, user, "", query, limit)
}

// Tool is search_code, for the model: by default scoped to the
// conversation's repository (Scope); the model may name another one it
// may read.
func (s *Searcher) Tool() agentcore.Tool { return searchTool{s} }

type searchTool struct{ s *Searcher }

// toolLimit bounds search_code's results (the model's context is small).
const toolLimit = 20

func (t searchTool) Spec() agentcore.ToolSpec {
	return agentcore.ToolSpec{
		Name: "search_code",
		Description: "Search the ingested source code of the repository this conversation is about (or another repository, by name). " +
			"Words and identifiers are ranked (parseConfig, parse_config and parse config find each other). " +
			"Also, separated by spaces: \"exact phrase\"; /regular expression/ (RE2, ^ and $ at line ends, \\/ for a slash); " +
			"sym:name (files defining a function, method, type or class of that name); path:dir/file (path contains); " +
			"lang:go (or python, javascript, typescript, c, cpp, java, rust...); repo:name; branch:name; " +
			"-term excludes (-word, -\"phrase\", -/regexp/, -path:, -lang:, -repo:, -branch:). " +
			"Phrases, regexps and path: ignore case unless they contain an upper-case letter. " +
			"Examples: sym:ListenAndServe, /func \\(s \\*Server\\) \\w+/ path:net/http, \"read config\" lang:python -path:test. " +
			"Returns the best matching snippets with path and line numbers.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"query":{"type":"string","description":"words, identifiers and the query syntax above (at most 1024 bytes)"},` +
			`"repository":{"type":"string","description":"repository ID; default: the conversation's repository"},` +
			`"limit":{"type":"integer","description":"number of results, 1-20 (default 8)"}},` +
			`"required":["query"],"additionalProperties":false}`),
	}
}

func (t searchTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	var args struct {
		Query      string `json:"query"`
		Repository string `json:"repository"`
		Limit      int    `json:"limit"`
	}
	if err := c.Args(&args); err != nil {
		return "", err
	}
	if args.Limit <= 0 {
		args.Limit = 8
	}
	args.Limit = min(args.Limit, toolLimit)
	var scope Scope
	if args.Repository != "" {
		scope.Repository = args.Repository
	} else if t.s.Scope != nil {
		sc, err := t.s.Scope(ctx, c.User, c.Conversation)
		if err != nil {
			return "", fmt.Errorf("finding the conversation's repository: %w", err)
		}
		if namesBranch(args.Query) {
			sc.Branch, sc.Note = "", "" // the query's branch: wins
		}
		scope = sc
	}
	hits, branches, err := t.s.search(ctx, c.User, scope.Repository, scope.Branch, args.Query, args.Limit)
	if errors.Is(err, ErrBadQuery) || errors.Is(err, ErrNoRepository) {
		return "", errors.New(strings.TrimPrefix(err.Error(), "retrieval: "))
	}
	if err != nil {
		return "", errors.New("search failed; try again later")
	}
	var b strings.Builder
	if scope.Note != "" {
		b.WriteString(scope.Note + "\n\n")
	}
	if len(hits) == 0 {
		b.WriteString("no matches")
		return b.String(), nil
	}
	for _, h := range hits {
		// The branch only when it is not the default one: that is what a
		// search without branch: finds.
		where := "repository " + h.Repository
		if bs := branches[h.Repository]; len(bs) > 0 && h.Branch != bs[0] {
			where += ", branch " + h.Branch
		}
		fmt.Fprintf(&b, "%s:%d-%d (%s)\n%s", h.Path, h.StartLine, h.EndLine, where, h.Snippet)
		if !strings.HasSuffix(h.Snippet, "\n") {
			b.WriteByte('\n')
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}
