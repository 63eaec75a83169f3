package retrieval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// Scope is the conversation's repository, the default scope of
	// search_code ("" = every repository the user may read). Nil: no
	// conversation has a repository. The daemon wires it to the
	// conversation→repository link.
	Scope func(ctx context.Context, user, conversation string) (string, error)
	// Exists reports whether a repository named in a search exists; one
	// that does not answers ErrNoRepository, as one the user may not
	// read does. Nil: every name is searched (and finds nothing).
	Exists func(ctx context.Context, repository string) (bool, error)
}

// SearchIn searches repository (or, when "", every repository user may
// read) for query, returning at most limit hits.
func (s *Searcher) SearchIn(ctx context.Context, user, repository, query string, limit int) ([]agentcore.Hit, error) {
	var repos []string
	restricted := s.Readable != nil
	if restricted {
		r, all, err := s.Readable(ctx, user)
		if err != nil {
			return nil, err
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
			return nil, fmt.Errorf("%w: %q", ErrNoRepository, repository)
		}
		if s.Exists != nil {
			ok, err := s.Exists(ctx, repository)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, fmt.Errorf("%w: %q", ErrNoRepository, repository)
			}
		}
		repos = []string{repository}
	}
	if restricted && len(repos) == 0 {
		// Nothing readable (an empty list to the index means everything).
		return []agentcore.Hit{}, nil
	}
	rs, err := s.Index.Search(ctx, Query{Text: query, Repositories: repos, Limit: limit})
	if err != nil {
		return nil, err
	}
	hits := make([]agentcore.Hit, len(rs))
	for i, r := range rs {
		hits[i] = r.Hit(query)
	}
	return hits, nil
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
			"lang:go (or python, javascript, typescript, c, cpp, java, rust...); repo:name; " +
			"-term excludes (-word, -\"phrase\", -/regexp/, -path:, -lang:, -repo:). " +
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
	repo := args.Repository
	if repo == "" && t.s.Scope != nil {
		r, err := t.s.Scope(ctx, c.User, c.Conversation)
		if err != nil {
			return "", fmt.Errorf("finding the conversation's repository: %w", err)
		}
		repo = r
	}
	hits, err := t.s.SearchIn(ctx, c.User, repo, args.Query, args.Limit)
	if errors.Is(err, ErrBadQuery) || errors.Is(err, ErrNoRepository) {
		return "", errors.New(strings.TrimPrefix(err.Error(), "retrieval: "))
	}
	if err != nil {
		return "", errors.New("search failed; try again later")
	}
	if len(hits) == 0 {
		return "no matches", nil
	}
	var b strings.Builder
	for _, h := range hits {
		fmt.Fprintf(&b, "%s:%d-%d (repository %s)\n%s", h.Path, h.StartLine, h.EndLine, h.Repository, h.Snippet)
		if !strings.HasSuffix(h.Snippet, "\n") {
			b.WriteByte('\n')
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}
