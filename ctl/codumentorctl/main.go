// Command codumentorctl operates a Codumentor server and its sandbox; see
// package ctl, or run codumentorctl --help.
package main

import (
	"context"
	"os"

	"github.com/codumentor/codumentor/ctl"
	"github.com/codumentor/codumentor/sandboxkit"
)

func main() {
	// First: when this binary is re-executed as a sandbox's supervisor,
	// Main runs it and never returns.
	sandboxkit.Main()
	os.Exit(ctl.Run(context.Background(), os.Args))
}
