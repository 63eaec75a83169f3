// Package randid makes random identifiers: names of records, attempts,
// groups and sockets that must not collide, never secrets (keys, salts
// and tokens take their bytes from crypto/rand themselves).
package randid

import (
	"crypto/rand"
	"encoding/hex"
)

// Len is the length of what New appends to its prefix: 12 random bytes
// in lowercase hex, enough that two identifiers made anywhere never
// collide in practice.
const Len = 24

// New returns prefix followed by Len random lowercase hex digits, e.g.
// New("conv_") = "conv_3f9c0a…". The prefix says what the identifier names.
func New(prefix string) string {
	var b [Len / 2]byte
	rand.Read(b[:]) // never fails: crypto/rand crashes the program rather than return an error
	return prefix + hex.EncodeToString(b[:])
}
