package sandboxkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A program outside this repository's modules (testdata/sdkuser: its own
// go.mod, not in go.work) builds against sandboxkit alone and runs a
// one-shot command and a Session in a copy-on-write view of a tree.
func TestOutsideProgram(t *testing.T) {
	requireSandbox(t)
	src, err := filepath.Abs(filepath.Join("..", "testdata", "sdkuser"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		t.Fatalf("the outside program's module: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "sdkuser")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in testdata/sdkuser: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(t.Context(), bin).CombinedOutput()
	if err != nil {
		t.Fatalf("sdkuser: %v\n%s", err, out)
	}
	if want := "run: from the host sandbox \nsession: written again \nhost tree unchanged\n"; string(out) != want {
		t.Errorf("sdkuser printed\n%q\nwant\n%q", out, want)
	}
}
