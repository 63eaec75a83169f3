package sandboxkit

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A read-only bind does not stop connect() on a UNIX socket file: a
// host view would let the sandbox talk to every service listening on a
// path it can reach. Settings.HostView masks the usual socket
// directories (/run, /var/run; /tmp is the sandbox's own), and
// hostSockets finds the sockets elsewhere in the view, each then hidden
// behind /dev/null (connect: ECONNREFUSED).

// hostScanBudget bounds the directory entries hostSockets reads.
const hostScanBudget = 500_000

// hostViewSkipped are not scanned: the sandbox gets its own.
var hostViewSkipped = []string{"/proc", "/sys", "/dev", "/tmp"}

// hostSockets walks the tree at root breadth-first, skipping the
// directories in skip (and everything under them), and returns the UNIX
// socket files it found and the directories to mask because they were
// not scanned: unreadable but traversable (a socket inside could be
// reached by its name), or left over when budget entries were read.
func hostSockets(root string, skip []string, budget int) (sockets, masks []string) {
	skipped := func(p string) bool {
		for _, s := range skip {
			if p == s || strings.HasPrefix(p, s+"/") || s == "/" {
				return true
			}
		}
		return false
	}
	queue := []string{root}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		if budget <= 0 {
			masks = append(masks, dir)
			continue
		}
		ents, err := os.ReadDir(dir)
		budget -= len(ents) + 1
		if err != nil {
			if errors.Is(err, fs.ErrPermission) && unix.Access(dir, unix.X_OK) == nil {
				masks = append(masks, dir)
			}
			continue
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			switch t := e.Type(); {
			case t&fs.ModeSocket != 0:
				sockets = append(sockets, p)
			case t.IsDir() && !skipped(p):
				queue = append(queue, p)
			}
		}
	}
	slices.Sort(sockets)
	slices.Sort(masks)
	return sockets, masks
}
