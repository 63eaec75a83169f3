//go:build race

package retrieval

// raceEnabled: the race detector makes the pure-Go SQLite about 20 times
// slower, so the tests ingest a part of Go's tree (about a thousand
// files); without it (go test, scripts/bench) they ingest all of it.
const raceEnabled = true
