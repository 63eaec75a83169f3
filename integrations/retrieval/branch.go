package retrieval

import "strings"

// A repository's branches are indexed under one key each: the
// repository's own ID for its default branch (so that an index built
// before repositories had several branches keeps working, and a search
// without branch: finds each file once), "ID:branch" for another. A
// branch name never holds a colon (git check-ref-format refuses it), so
// the key splits back at its first one. Backends treat keys as opaque
// repository names.

// BranchKey is the index key of repository's branch; branch "" is its
// default branch.
func BranchKey(repository, branch string) string {
	if branch == "" {
		return repository
	}
	return repository + ":" + branch
}

// splitKey is BranchKey's inverse: branch "" is the default one.
func splitKey(key string) (repository, branch string) {
	repository, branch, _ = strings.Cut(key, ":")
	return repository, branch
}
