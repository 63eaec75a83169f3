package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckOwnersOwnTree(t *testing.T) {
	lower := t.TempDir()
	build(t, lower, []node{file("a", "a\n"), file("d/b", "b\n"), link("d/l", "/etc/passwd")})
	if err := CheckOwners(lower, os.Getuid(), os.Getgid()); err != nil {
		t.Errorf("CheckOwners of a tree this user made: %v", err)
	}
}

// A root-owned system tree, checked for an unprivileged user, is all
// unmapped.
func TestCheckOwnersSystemTree(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("as root a root-owned tree is mapped; TestCheckOwnersOtherUID covers this case")
	}
	lower := "/usr/share/doc/bash"
	if _, err := os.Stat(lower); err != nil {
		lower = "/usr/bin"
	}
	err := CheckOwners(lower, os.Getuid(), os.Getgid())
	var e *UnmappedOwnerError
	if !errors.As(err, &e) {
		t.Fatalf("CheckOwners(%s): got %v, want *UnmappedOwnerError", lower, err)
	}
	if e.Count < 1 || len(e.Paths) < 1 || e.Paths[0] != lower {
		t.Errorf("CheckOwners(%s): %+v; want the root itself first", lower, e)
	}
}

// A tree this user owns, checked for another uid, is all unmapped: the
// counting, listing and message without needing root to chown.
func TestCheckOwnersOtherUID(t *testing.T) {
	lower := t.TempDir()
	var nodes []node
	for i := range 15 {
		nodes = append(nodes, file(fmt.Sprintf("d/f%02d", i), "x\n"))
	}
	build(t, lower, nodes)
	uid := os.Getuid() + 1
	err := CheckOwners(lower, uid, os.Getgid())
	var e *UnmappedOwnerError
	if !errors.As(err, &e) {
		t.Fatalf("CheckOwners: got %v, want *UnmappedOwnerError", err)
	}
	// The root, d, and 15 files; the first 10 listed in walk order.
	if e.Count != 17 || len(e.Paths) != 10 || e.Paths[0] != lower || e.Paths[2] != filepath.Join(lower, "d/f00") {
		t.Errorf("CheckOwners: Count %d, Paths %v; want 17 entries, the first 10 listed from the root", e.Count, e.Paths)
	}
	msg := err.Error()
	for _, want := range []string{fmt.Sprintf("chown -R %d:%d %s", uid, os.Getgid(), lower), "EOVERFLOW", "and 7 more", filepath.Join(lower, "d/f00")} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

func TestCheckOwnersMissing(t *testing.T) {
	if err := CheckOwners(filepath.Join(t.TempDir(), "nope"), 0, 0); err == nil {
		t.Error("CheckOwners of a missing tree succeeded")
	}
}
