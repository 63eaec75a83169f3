package store

import "time"

// Now is the current time as the database keeps it (see Time).
func Now() time.Time { return Time(time.Now()) }

// Time returns t as both backends keep it: in UTC, to the microsecond
// (PostgreSQL's timestamptz holds no finer; SQLite's text would), so
// that a time written and read back is Equal to the one the writer
// kept.
func Time(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
