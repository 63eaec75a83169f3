// Command mkblobs writes the seccomp filter blobs and their SHA-256
// manifest into blobs/ (go generate in sandboxkit/seccomp runs it).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

func main() {
	files, err := seccomp.Blobs()
	if err == nil {
		for name, b := range files {
			if err = os.WriteFile(filepath.Join("blobs", name), b, 0o644); err != nil {
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkblobs:", err)
		os.Exit(1)
	}
}
