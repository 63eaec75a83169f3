//go:build race

package retrieval

// raceEnabled: the race detector makes the pure-Go SQLite about 20 times
// slower, so the tests ingest a part of Go's tree (about 3,200 of its
// 11,500 files, raceSubset); without it (go test, scripts/bench) they
// ingest all of it.
const raceEnabled = true
