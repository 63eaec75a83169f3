// Package testloopback marks the resolvers of tests whose loopback
// answers the egress proxy allows, so that a test can serve allowed
// names on 127.0.0.1. Only packages under sandboxkit/egress can name
// Token, so only they can make such a resolver (egresstest.AllowLoopback,
// which refuses to outside a test binary).
package testloopback

// Token is the argument of Marked's method: a type no package outside
// sandboxkit/egress can name.
type Token struct{}

// Marked is a resolver whose loopback answers are allowed.
type Marked interface {
	AllowsLoopback(Token)
}
