package store

import (
	"errors"

	gosqlite "github.com/glebarez/go-sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The kinds of database errors ErrorKind tells apart.
const (
	// KindBusy is a lock not taken within the busy timeout
	// (SQLITE_BUSY, SQLITE_LOCKED; PostgreSQL's lock_not_available, a
	// serialization failure or a deadlock): nothing was changed, and the
	// same request may succeed in a moment.
	KindBusy = "busy"
	// KindFull is a database out of disk space.
	KindFull = "full"
	// KindOther is any other error of the database.
	KindOther = "other"
)

// ErrorKind says what kind of database error err is, on either backend:
// KindBusy, KindFull, KindOther, or "" if err is not the database's.
func ErrorKind(err error) string {
	var se *gosqlite.Error
	if errors.As(err, &se) {
		// Extended result codes (SQLITE_BUSY_SNAPSHOT, …) carry the
		// primary code in their low byte.
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return KindBusy
		case sqlite3.SQLITE_FULL:
			return KindFull
		}
		return KindOther
	}
	if code, ok := postgresCode(err); ok {
		switch {
		case postgresBusy[code]:
			return KindBusy
		case postgresFull[code]:
			return KindFull
		}
		return KindOther
	}
	return ""
}
