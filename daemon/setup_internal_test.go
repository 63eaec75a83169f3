package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSetupInputs(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         []string
		err          string
	}{
		{"none", "echo hi\n", nil, ""},
		{"one line", "# codumentor-setup-inputs: go.sum package-lock.json\nnpm ci\n", []string{"go.sum", "package-lock.json"}, ""},
		{"lines add up, indented", "#!/bin/sh\n  # codumentor-setup-inputs: a/b.lock\n# codumentor-setup-inputs: c\n", []string{"a/b.lock", "c"}, ""},
		{"absolute", "# codumentor-setup-inputs: /etc/passwd\n", nil, "clean path"},
		{"parent", "# codumentor-setup-inputs: ../x\n", nil, "clean path"},
		{"unclean", "# codumentor-setup-inputs: a/../../x\n", nil, "clean path"},
		{"too many", "# codumentor-setup-inputs:" + strings.Repeat(" f", maxSetupInputs+1) + "\n", nil, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setupInputs(tc.script)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("setupInputs = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// The key changes with the script, its named inputs and the network
// setting, not with other files; a symlinked script is not run, and an
// input that leaves the snapshot is refused.
func TestSetupKey(t *testing.T) {
	snap := t.TempDir()
	write := func(name, s string) {
		os.MkdirAll(filepath.Dir(filepath.Join(snap, name)), 0o755)
		if err := os.WriteFile(filepath.Join(snap, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := func(network bool) string {
		t.Helper()
		script, k, err := setupKey(snap, network, nil)
		if err != nil || script == "" {
			t.Fatalf("setupKey: %q %q %v", script, k, err)
		}
		return k
	}
	if script, _, err := setupKey(snap, false, nil); script != "" || err != nil {
		t.Fatalf("no script: %q %v", script, err)
	}
	write("setup.sh", "# codumentor-setup-inputs: go.sum\ngo mod download\n")
	write("go.sum", "v1\n")
	k := key(false)
	write("other.go", "package x\n")
	if key(false) != k {
		t.Fatal("an unnamed file changed the key")
	}
	if key(true) == k {
		t.Fatal("the network setting did not change the key")
	}
	write("go.sum", "v2\n")
	if key(false) == k {
		t.Fatal("a named input did not change the key")
	}
	os.Remove(filepath.Join(snap, "go.sum"))
	missing := key(false)
	write(".codumentor/setup.sh", "# codumentor-setup-inputs: go.sum\ngo mod download\n")
	if script, _, _ := setupKey(snap, false, nil); script != ".codumentor/setup.sh" {
		t.Fatalf("script %q, want .codumentor/setup.sh first", script)
	}
	os.Remove(filepath.Join(snap, ".codumentor/setup.sh"))
	if key(false) != missing {
		t.Fatal("the key is not stable")
	}
	os.Symlink("/etc/passwd", filepath.Join(snap, "go.sum"))
	if _, _, err := setupKey(snap, false, nil); err == nil || !strings.Contains(err.Error(), "go.sum") {
		t.Fatalf("an input symlinked out of the snapshot: %v", err)
	}
	os.Remove(filepath.Join(snap, "setup.sh"))
	os.Symlink("other.go", filepath.Join(snap, "setup.sh"))
	if script, _, err := setupKey(snap, false, nil); script != "" || err != nil {
		t.Fatalf("a symlinked script: %q %v", script, err)
	}
}
