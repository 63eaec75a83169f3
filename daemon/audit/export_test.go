package audit

import "gorm.io/gorm"

// UnkeyedHash is r's hash as an unkeyed record, as anyone can compute it
// (a forger without the key, in tests).
func (r *Record) UnkeyedHash() string { return r.hash() }

// HasKeys reports whether appends on db are MACed.
func HasKeys(db *gorm.DB) bool {
	k := keysOf(db)
	return k != nil && k.current != nil
}
